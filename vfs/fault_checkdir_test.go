package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Every call of the FS interface and its optional interfaces that a store
// makes through a FaultFS has a fault point: with a rule failing every
// operation, each of them fails. CheckDir, which a store calls at Open and
// before every checkpoint (an lstat, which can fail with EIO or EACCES
// as any other), went straight to the inner FS, so no test could fail it.
func TestAFaultFSCanFailEveryCallOfItsInterface(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	for op := Op(1); op < numOps; op++ {
		ffs.Inject(Rule{Op: op, Err: syscall.EIO})
	}
	name := filepath.Join(dir, "f")
	if err := os.WriteFile(name, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, openErr := ffs.OpenFile(name, os.O_RDWR, 0)
	_, readDirErr := ffs.ReadDir(dir)
	_, lockErr := ffs.Lock(filepath.Join(dir, "LOCK"))
	calls := map[string]error{
		"OpenFile": openErr,
		"Remove":   ffs.Remove(name),
		"Rename":   ffs.Rename(name, name+"2"),
		"MkdirAll": ffs.MkdirAll(filepath.Join(dir, "d"), 0o700),
		"ReadDir":  readDirErr,
		"SyncDir":  ffs.SyncDir(dir),
		"Lock":     lockErr,
		"CheckDir": ffs.CheckDir(dir),
	}
	for call, err := range calls {
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%s with every operation failing: %v, want the injected EIO", call, err)
		}
	}
	var pe *os.PathError
	if err := calls["CheckDir"]; !errors.As(err, &pe) || pe.Path != dir {
		t.Errorf("CheckDir: %v, want an *os.PathError naming %s", err, dir)
	}
}
