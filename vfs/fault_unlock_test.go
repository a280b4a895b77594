package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Releasing a lock (closing the Closer FS.Lock returned) has a fault point
// of its own, OpUnlock: a rule fails it with its error, naming the lock
// file, and the lock is released all the same, as close(2) releases the
// descriptor and its lock whatever it reports. The Closer went straight to
// the inner FS, so no test could fail the release a store's Close makes
// last.
func TestAFaultFSCanFailTheReleaseOfALock(t *testing.T) {
	name := filepath.Join(t.TempDir(), "LOCK")
	ffs := NewFaultFS(Default)
	ffs.Inject(Rule{Op: OpUnlock, Nth: 1, Err: syscall.EIO})
	l, err := ffs.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Close()
	var pe *os.PathError
	if !errors.Is(err, syscall.EIO) || !errors.As(err, &pe) || pe.Path != name || pe.Op != "unlock" {
		t.Fatalf("release with OpUnlock failing: %v, want the injected EIO as an *os.PathError unlocking %s", err, name)
	}
	if got := ffs.Injected(OpUnlock); got != 1 {
		t.Errorf("Injected(OpUnlock) = %d, want 1", got)
	}
	again, err := ffs.Lock(name)
	if err != nil {
		t.Fatalf("lock again after a failed release: %v (close(2) releases the lock whatever it reports)", err)
	}
	var seen []Op
	ffs.Observe(func(e Event) { seen = append(seen, e.Op) })
	if err := again.Close(); err != nil {
		t.Fatalf("the second release, which no rule fails: %v", err)
	}
	if len(seen) != 1 || seen[0] != OpUnlock {
		t.Errorf("observed %v for a release, want [unlock]", seen)
	}
	if got := ffs.Count(OpUnlock); got != 2 {
		t.Errorf("Count(OpUnlock) = %d, want 2", got)
	}
}
