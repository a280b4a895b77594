package broker_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// everyCallOps are the kinds of file operation the sweeps below fail, one
// call at a time.
var everyCallOps = []vfs.Op{vfs.OpOpen, vfs.OpRead, vfs.OpSize, vfs.OpMap, vfs.OpReadDir, vfs.OpWrite, vfs.OpSync, vfs.OpTruncate, vfs.OpRemove, vfs.OpRename, vfs.OpSyncDir, vfs.OpClose, vfs.OpMkdirAll, vfs.OpLock, vfs.OpAllocate, vfs.OpCheckDir}

// sweepEveryOpenCall fails, one at a time, each of the first 60 calls of
// each kind an Open of a copy of template makes (EIO), and requires an
// Open that fails to name the cause and the file it failed on, one that
// succeeds to hold the state a fault-free Open holds, and a fault-free
// Open afterwards to hold it too. ofSweep does the same for a store a
// process crash left, without asking for the file's name; these cover the
// other shapes a store is opened in. Skipped under -short.
func sweepEveryOpenCall(t *testing.T, template string, opts broker.Options) {
	if testing.Short() {
		t.Skip("-short: a sweep of every call takes minutes under -race; go test without -short runs it")
	}
	dry := vfs.NewFaultFS(vfs.Default)
	o := opts
	o.FS = dry
	s, err := broker.Open(ofCopy(t, template), o)
	require.NoError(t, err)
	want := ofViewOf(t, s)
	counts := map[vfs.Op]int64{}
	for _, op := range everyCallOps {
		counts[op] = dry.Count(op)
	}
	require.NoError(t, s.Close())
	for _, op := range everyCallOps {
		for nth := int64(1); nth <= min(counts[op], 60); nth++ {
			dir := ofCopy(t, template)
			ffs := vfs.NewFaultFS(vfs.Default)
			var failed string
			var seen int64
			ffs.Inject(vfs.Rule{Op: op, Nth: nth, Match: func(n string) bool {
				seen++
				if seen == nth {
					failed = n
				}
				return true
			}})
			o := opts
			o.FS = ffs
			s, err := broker.Open(dir, o)
			what := fmt.Sprintf("%v #%d of %d", op, nth, counts[op])
			opened := err == nil
			if err != nil {
				if !strings.Contains(err.Error(), syscall.EIO.Error()) {
					t.Errorf("%s: error does not name the cause: %v", what, err)
				}
				if !strings.Contains(err.Error(), failed) {
					t.Errorf("%s: error does not name the file %s: %v", what, failed, err)
				}
			} else {
				ffs.Clear()
				if d := ofViewOf(t, s).diff(want); d != "" {
					t.Errorf("%s: Open succeeded with another state:\n%s", what, d)
				}
				require.NoError(t, s.Close())
			}
			o.FS = nil
			s2, err := broker.Open(dir, o)
			if err != nil {
				t.Errorf("%s: fault-free Open afterwards fails: %v", what, err)
				continue
			}
			got := ofViewOf(t, s2)
			if opened && want.spans > 0 {
				got.spans, got.lost = want.spans, want.lost
			}
			if d := got.diff(want); d != "" {
				t.Errorf("%s: fault-free Open afterwards differs:\n%s", what, d)
			}
			require.NoError(t, s2.Close())
		}
	}
}

// cleanlyClosedTemplate is ofTemplate's store opened and closed again.
func cleanlyClosedTemplate(t *testing.T) (string, *fakeClock) {
	template, clock := ofTemplate(t)
	s, err := broker.Open(template, ofOptions(clock, nil))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	return template, clock
}

func TestEachFaultOpeningACleanlyClosedStoreNamesTheFileOrOpensItAsItWas(t *testing.T) {
	template, clock := cleanlyClosedTemplate(t)
	sweepEveryOpenCall(t, template, ofOptions(clock, nil))
}

func TestEachFaultOpeningACrashedStoreNamesTheFileOrOpensItAsItWas(t *testing.T) {
	template, clock := ofTemplate(t)
	sweepEveryOpenCall(t, template, ofOptions(clock, nil))
}

func TestEachFaultOpeningASuspectStoreNamesTheFileOrOpensItAsItWas(t *testing.T) {
	template, clock := cleanlyClosedTemplate(t)
	require.NoError(t, os.WriteFile(filepath.Join(template, "index", "SUSPECT"), nil, 0o600))
	sweepEveryOpenCall(t, template, ofOptions(clock, nil))
}

func TestEachFaultOpeningAStoreCutShortCheckpointingNamesTheFileOrOpensItAsItWas(t *testing.T) {
	template, clock := ofTemplate(t)
	require.NoError(t, os.WriteFile(filepath.Join(template, "index", "CHECKPOINTING"), nil, 0o600))
	sweepEveryOpenCall(t, template, ofOptions(clock, nil))
}

func TestEachFaultOpeningAStoreWithoutItsIndexNamesTheFileOrOpensItAsItWas(t *testing.T) {
	template, clock := ofTemplate(t)
	require.NoError(t, os.RemoveAll(filepath.Join(template, "index")))
	sweepEveryOpenCall(t, template, ofOptions(clock, nil))
}

func TestEachFaultInASalvagingOpenNamesTheFileOrOpensTheStoreAsItWas(t *testing.T) {
	dir, opts, _, _, _ := damagedStore(t)
	opts.Salvage = true
	opts.Logger = quiet()
	sweepEveryOpenCall(t, dir, opts)
}
