package wal

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// sweepTmp is a fresh directory on tmpfs when there is one.
func sweepTmp(t *testing.T) string {
	t.Helper()
	if d, err := os.MkdirTemp("/dev/shm", "walbroker-salvage-"); err == nil {
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		return d
	}
	return t.TempDir()
}

// cleanLogOf is buildLog keeping the clean mark a Close leaves.
func cleanLogOf(t *testing.T) (dir string, acked []entry) {
	t.Helper()
	dir = t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	acked = appendRecords(t, l, 0, 60)
	require.GreaterOrEqual(t, l.Stats().Segments, 3)
	require.NoError(t, l.Close())
	return dir, acked
}

// A power loss at every operation of a salvaging Open, for each kind of
// repair salvage makes besides padding a flipped byte (which
// TestAPowerLossDuringASalvageHidesNothing covers): a damaged header
// rewritten, a segment too short for a header replaced, a sealed segment
// cut before its seal sealed early (in a file regrown to hold the seal),
// and a last segment cut before the clean Close's end regrown and padded.
// After each, an Open without Salvage either refuses the log or, only if
// the salvaging Open returned (its last step removes the list: see
// Options.KeepSalvageList), opens it to the records an uninterrupted
// salvage keeps; and an Open with Salvage keeps exactly those, and reports
// at least one span.
func TestAPowerLossDuringEachKindOfSalvageRepairHidesNothing(t *testing.T) {
	type scenario struct {
		name   string
		clean  bool
		damage func(t *testing.T, dir string, acked []entry)
	}
	sealAt := func(acked []entry, seq uint32) int {
		end := 0
		for _, e := range acked {
			if e.pos.Segment() == seq {
				end = e.pos.Offset() + segment.Size(len(e.rec))
			}
		}
		return end
	}
	scenarios := []scenario{
		{"damaged header", false, func(t *testing.T, dir string, _ []entry) { flipByte(t, segFile(dir, 2), 3) }},
		{"too short for a header", false, func(t *testing.T, dir string, _ []entry) {
			require.NoError(t, os.Truncate(segFile(dir, 2), 20))
		}},
		{"cut where its seal began", false, func(t *testing.T, dir string, acked []entry) {
			require.NoError(t, os.Truncate(segFile(dir, 2), int64(sealAt(acked, 2))))
		}},
		{"cut in the middle", false, func(t *testing.T, dir string, acked []entry) {
			require.NoError(t, os.Truncate(segFile(dir, 2), int64(sealAt(acked, 2)/2)))
		}},
		{"last segment cut before the clean end", true, func(t *testing.T, dir string, acked []entry) {
			last := acked[len(acked)-1].pos
			require.NoError(t, os.Truncate(segFile(dir, last.Segment()), int64(last.Offset()-5)))
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var dir string
			var acked []entry
			if sc.clean {
				dir, acked = cleanLogOf(t)
			} else {
				dir, acked, _ = buildLog(t)
			}
			sc.damage(t, dir, acked)

			// The reference: an uninterrupted salvage.
			cfs := vfs.NewCrashFS(vfs.Default)
			ref := copyDir(t, dir)
			l, err := Open(ref, Options{FS: cfs, SegmentBytes: smallSeg, Salvage: true})
			require.NoError(t, err)
			total := cfs.Ops()
			want := readAll(t, l)
			require.NotEmpty(t, l.Recovery().Salvaged)
			require.NoError(t, l.Close())

			rng := rand.New(rand.NewPCG(7, 7))
			for k := int64(1); k <= total; k++ {
				for c, keep := range []float64{0, 0.5} {
					root := sweepTmp(t)
					d := copyInto(t, root, dir)
					cfs := vfs.NewCrashFS(vfs.Default)
					cfs.CrashAfter(k)
					l, err := Open(d, Options{FS: cfs, SegmentBytes: smallSeg, Salvage: true})
					reported := err == nil
					if l != nil {
						_ = l.Close()
					}
					clone := filepath.Join(root, "clone")
					require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: d, KeepUnsyncedFraction: keep, TearLastWrite: c == 1,
						Rand: rand.New(rand.NewPCG(rng.Uint64(), 1))}))
					what := fmt.Sprintf("%s: power lost after %d of %d operations of a salvaging Open, unsynced kept %v", sc.name, k, total, keep)

					plain := filepath.Join(root, "plain")
					require.NoError(t, os.CopyFS(plain, os.DirFS(clone)))
					l, err = Open(plain, Options{SegmentBytes: smallSeg})
					if err == nil {
						got := readAll(t, l)
						require.NoError(t, l.Close())
						require.True(t, reported, "%s: an Open without Salvage succeeds though no Open reported the salvage", what)
						require.Equal(t, len(want), len(got), "%s: records", what)
						continue
					}
					require.ErrorIs(t, err, ErrCorrupt, what)

					l, err = Open(clone, Options{SegmentBytes: smallSeg, Salvage: true})
					require.NoError(t, err, what)
					got := readAll(t, l)
					require.NotEmpty(t, l.Recovery().Salvaged, "%s: the salvage reports nothing", what)
					require.NoError(t, l.Close())
					require.Equal(t, len(want), len(got), "%s: records kept", what)
					for i := range want {
						require.Equal(t, string(want[i].rec), string(got[i].rec), "%s: record %d", what, i)
					}
				}
			}
			t.Logf("%s: %d operations", sc.name, total)
		})
	}
}

// TestASalvagingOpenWhoseListCannotBeRemovedStillReports: an Open with
// Salvage whose last step fails, the directory sync after it removed the
// list, has its report built: it logs the failure and returns the report
// (the list that may come back only makes a later Open report the spans
// again), not an error that would leave the report with nobody.
func TestASalvagingOpenWhoseListCannotBeRemovedStillReports(t *testing.T) {
	dir, acked, _ := buildLog(t)
	victim := firstIn(acked, 2)
	flipByte(t, segFile(dir, 2), victim.pos.Offset()+segment.FrameHeaderSize+1)

	ffs := vfs.NewFaultFS(vfs.Default)
	var removed atomic.Bool
	ffs.Observe(func(ev vfs.Event) {
		if ev.Op == vfs.OpRemove && filepath.Base(ev.Name) == unfinishedName {
			removed.Store(true)
		}
	})
	ffs.Inject(vfs.Rule{Op: vfs.OpSyncDir, Match: func(string) bool { return removed.Load() }, Times: 1})
	l, err := Open(dir, Options{FS: ffs, SegmentBytes: smallSeg, Salvage: true})
	require.NoError(t, err, "the salvage is done and reported; the list's removal is housekeeping")
	require.Positive(t, ffs.Injected(vfs.OpSyncDir), "the fault was met")
	require.Len(t, l.Recovery().Salvaged, 1, "the report of the span")
	require.NoError(t, l.Close())
}
