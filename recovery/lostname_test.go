package recovery_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/recovery"
	"github.com/walbroker/walbroker/vfs"
)

// TestASegmentFileLostAfterItsNameWasDurable loses the directory entry of
// one segment file after a directory sync made it durable, as a file
// system or device that drops an acknowledged change of names would: the
// workload runs under SyncAll and its process dies before Close (every
// byte written kept), then each segment file in turn is removed from a
// copy, which is opened and read whole. The crash model never does this
// (vfs.CrashFS keeps every name a directory sync made durable), so no
// other test did.
//
// Open, or the first read of a record the lost file held, must refuse the
// store as Corrupt, or the store must hold what the journal says, except
// in the two cases nothing on disk can tell from a log that never had the
// file (docs/DESIGN.md, "What the crash suites do not simulate"): the
// last segment, when no durable position (clean mark, checkpoint) names
// it; and the oldest, when no checkpoint is used (none written yet, or
// one suspect or damaged: the index is rebuilt from the whole log), since
// the segments the log removes are its oldest too, and which were removed
// is known only to a checkpoint. A segment between two others leaves a
// gap, which is always refused.
func TestASegmentFileLostAfterItsNameWasDurable(t *testing.T) {
	seed := testSeed(t)
	root := fastDir(t)
	runs := 12
	if testing.Short() {
		runs = 4
	}
	outcomes := map[string]int{}
	for i := range runs {
		run := runToCrash(t, root, i, workload{seed: seed + uint64(i), steps: 200, mode: broker.SyncAll})
		segs := segmentFiles(t, run.all)
		// The position of the checkpoint, suspect or not, vouches for
		// the segments up to its own: the log was durable to there.
		var vouched uint64
		if cl, ok := index.ReadCheckpointLog(vfs.Default, filepath.Join(run.all, "index")); ok && cl.Pos.Offset() > segHeader {
			vouched = uint64(cl.Pos.Segment())
		}
		for k, name := range segs {
			seq, err := strconv.ParseUint(name[:len(name)-len(".seg")], 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("workload seed %d, %s lost (segment %d of %d)", seed+uint64(i), name, k+1, len(segs))
			dir := filepath.Join(root, fmt.Sprintf("lost-%d-%d", i, k))
			if err := recovery.CopyTree(run.all, dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			obs, err := observe(dir, run.j.end.Add(checkDelay), run.j.keys, broker.Options{})
			switch {
			case err != nil && errors.Is(err, broker.Corrupt) && obs == nil:
				outcomes["refused at Open"]++
			case err != nil && errors.Is(err, broker.Corrupt):
				outcomes["refused at the first read of a record it held"]++
			case err != nil:
				t.Errorf("%s: %v, want Corrupt or a store that opens", what, err)
			default:
				n, d := match(run.j, obs, lowerBound(run.j, true))
				switch {
				case n >= 0:
					outcomes["nothing acknowledged lost"]++
				case k == len(segs)-1 && seq > vouched:
					outcomes["the last segment lost without a report"]++
				case k == 0 && obs.recovery.IndexRebuilt:
					outcomes["the oldest segment lost without a report, the index rebuilt"]++
				default:
					t.Errorf("%s: opened (%v) and lost acknowledged work without a report:\n%s", what, obs.recovery, d)
				}
			}
			_ = os.RemoveAll(dir)
		}
	}
	t.Logf("seed %d: %v", seed, outcomes)
	if outcomes["refused at Open"] == 0 {
		t.Errorf("no lost segment was refused at Open (%v): a gap between two segments always is", outcomes)
	}
}
