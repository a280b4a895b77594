package recovery_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// faultOps are the file operations TestAFaultAtAnyOperationLosesNothing
// fails.
var faultOps = []vfs.Op{vfs.OpOpen, vfs.OpRead, vfs.OpWrite, vfs.OpSync, vfs.OpTruncate, vfs.OpMap,
	vfs.OpRemove, vfs.OpRename, vfs.OpSyncDir, vfs.OpClose, vfs.OpSize, vfs.OpReadDir, vfs.OpMkdirAll, vfs.OpLock,
	vfs.OpAllocate, vfs.OpWriteBack, vfs.OpCheckDir, vfs.OpUnlock}

// TestAFaultAtAnyOperationLosesNothing runs the workload of
// helpers_ext_test.go with one call of one kind of file operation failing
// (EIO, or ENOSPC for odd seeds): every call of each kind the dry run made
// up to 64 (8 with -short), evenly spread beyond. Each run must be fail-stop
// (every call after the failure refused with an error that says why),
// name the cause, end (no hang), and leave a directory that opens with a
// healthy file system and holds every call that returned. (One unlink that
// failed once left a gap in the log that every later Open refused.)
func TestAFaultAtAnyOperationLosesNothing(t *testing.T) {
	per, steps := 64, 1000
	if testing.Short() {
		per, steps = 8, 300
	}
	seed := testSeed(t)
	errno := syscall.EIO
	if seed%2 == 1 {
		errno = syscall.ENOSPC
	}
	root := fastDir(t)
	modes := []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}
	for _, op := range faultOps {
		t.Run(op.String(), func(t *testing.T) {
			mode := modes[(int(op)+int(seed%3))%3]
			dry := vfs.NewFaultFS(vfs.Default)
			w := workload{seed: seed, steps: steps, mode: mode}
			j := w.run(filepath.Join(root, op.String()+"-dry"), dry, nil)
			if j.failed != nil || j.openErr != nil || j.closeErr != nil {
				t.Fatalf("dry: %v", j)
			}
			n := dry.Count(op)
			var nths []int64
			if n <= int64(per) {
				for i := int64(1); i <= n; i++ {
					nths = append(nths, i)
				}
			} else {
				for i := 0; i < per; i++ {
					nths = append(nths, 1+int64(i)*n/int64(per))
				}
			}
			t.Logf("%v: %d calls in dry run", op, n)
			for _, nth := range nths {
				dir := filepath.Join(root, fmt.Sprintf("%v-%d", op, nth))
				ffs := vfs.NewFaultFS(vfs.Default)
				ffs.Inject(vfs.Rule{Op: op, Nth: nth, Err: errno})
				what := fmt.Sprintf("%v #%d failing with %v (%v, seed %d)", op, nth, errno, mode, seed)
				var stops []string
				w := workload{seed: seed, steps: steps, mode: mode, onFailure: func(s *broker.Store, qs map[string]*broker.Queue, ls []held) {
					stops = checkFailStop(s, qs, ls, failureText)
				}}
				done := make(chan *journal, 1)
				go func() { done <- w.run(dir, ffs, nil) }()
				var j *journal
				select {
				case j = <-done:
				case <-time.After(60 * time.Second):
					t.Fatalf("%s: workload hung", what)
				}
				for _, s := range stops {
					t.Errorf("%s: %s", what, s)
				}
				if j.openErr != nil && !strings.Contains(j.openErr.Error(), errno.Error()) {
					t.Errorf("%s: open error hides the cause: %v", what, j.openErr)
				}
				if j.failed != nil && !strings.Contains(j.failed.err.Error(), errno.Error()) {
					t.Errorf("%s: failed call's error hides the cause: %v", what, j.failed)
				}
				if j.failed != nil && j.closeErr == nil {
					t.Logf("%s: Close returned nil after the store failed (%v)", what, j.failed.err)
				}
				if j.failed == nil && j.openErr == nil && j.closeErr != nil {
					t.Logf("%s: no call failed but Close: %v (injected %d)", what, j.closeErr, ffs.Injected(op))
				}
				obsDone := make(chan struct{})
				var obs *observation
				var err error
				go func() { obs, err = observe(dir, j.end.Add(checkDelay), j.keys, broker.Options{}); close(obsDone) }()
				select {
				case <-obsDone:
				case <-time.After(60 * time.Second):
					t.Fatalf("%s: reopen hung", what)
				}
				if err != nil {
					t.Errorf("%s: reopen with a healthy FS: %v\n%v", what, err, j)
					continue
				}
				if k, d := match(j, obs, len(j.calls)); k < 0 {
					t.Errorf("%s: reopen lost acknowledged work:\n%s\n%v", what, d, j)
				}
			}
		})
	}
}
