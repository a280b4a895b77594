package recovery_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// TestAFailedFdatasyncThenAReopenThenAPowerLossLosesNothing: one
// fdatasync of the workload fails with EIO below the page-cache model (a
// writeback error: on Linux the failed pages stay in the page cache, clean,
// never written again). The store stops; it is opened again in the same
// page cache, as its error asks, and closed cleanly; then the power fails.
// Every call that returned before the failure must be in the clone: the
// reopen saw them, and built on them.
//
// The failed pages are clean, and the kernel may evict them before the
// reopen reads them: it then reads the device's bytes, without the failed
// writes, in those pages. With them evicted (vfs.CrashFS.EvictFailedWrites)
// the clone must hold every call the sync mode made durable before the
// failure, and must not be taken for damage. In half the cases of each,
// the failed writeback wrote a random half of its pages before the error
// (vfs.CrashFS.SetFailedWriteback): the device then holds those, and an
// eviction shows them.
func TestAFailedFdatasyncThenAReopenThenAPowerLossLosesNothing(t *testing.T) {
	per, steps := 24, 400
	if testing.Short() {
		per = 6
	}
	seed := testSeed(t)
	root := fastDir(t)
	for mi, mode := range []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dry := vfs.NewFaultFS(vfs.Default)
			w := workload{seed: seed + uint64(mi), steps: steps, mode: mode}
			if j := w.run(filepath.Join(root, fmt.Sprintf("%v-dry", mode)), dry, nil); j.failed != nil || j.openErr != nil || j.closeErr != nil {
				t.Fatalf("dry: %v", j)
			}
			n := dry.Count(vfs.OpSync)
			last := int64(0)
			for i := 0; i < per; i++ {
				nth := 1 + int64(i)*n/int64(per)
				if nth == last {
					continue
				}
				last = nth
				for e, evict := range []bool{false, true} {
					what := fmt.Sprintf("fdatasync #%d of %d failing (%v, seed %d)", nth, n, mode, w.seed)
					dir := filepath.Join(root, fmt.Sprintf("%v-%d", mode, nth))
					if evict {
						what += ", the failed pages evicted before the reopen"
						dir += "-evicted"
					}
					ffs := vfs.NewFaultFS(vfs.Default)
					cfs := vfs.NewCrashFS(ffs)
					if (i+e)%2 == 1 {
						what += ", some of its pages written before the error"
						if err := cfs.SetFailedWriteback(0.5, rand.New(rand.NewPCG(w.seed, uint64(nth)))); err != nil {
							t.Fatal(err)
						}
					}
					ffs.Inject(vfs.Rule{Op: vfs.OpSync, Nth: nth, Err: syscall.EIO})
					watch := newSyncWatchFS(cfs)
					j := w.run(dir, watch, watch)
					ffs.Clear()
					lo := lowerBound(j, true)
					if evict {
						if err := cfs.EvictFailedWrites(); err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						lo = lowerBound(j, false)
					}
					s, err := broker.Open(dir, broker.Options{Now: newClock(j.end).Now, SegmentBytes: broker.MinSegmentBytes, FS: cfs})
					if err != nil {
						t.Errorf("%s: the reopen fails: %v", what, err)
						continue
					}
					if err := s.Close(); err != nil {
						t.Errorf("%s: the reopened store does not close: %v", what, err)
						continue
					}
					clone := dir + "-clone"
					if err := cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}); err != nil {
						t.Fatalf("%s: CrashClone: %v", what, err)
					}
					checkClone(clone, j.end.Add(checkDelay), j, lo, what+", reopened, closed, power lost", func(f string, a ...any) { t.Errorf(f, a...) })
				}
			}
		})
	}
}
