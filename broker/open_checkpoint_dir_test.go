package broker_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// An empty directory in the checkpoint's place is taken for no checkpoint
// and the index is rebuilt (open_table_dir_test.go); one with files in it
// is none the store made, and Open refuses it as it refuses a planted
// file: an error naming it and wrapping vfs.ErrForeign (so
// fs.ErrPermission), not the bare "directory not empty" of its removal.
func TestADirectoryWithFilesInTheCheckpointsPlaceIsRefusedAsForeign(t *testing.T) {
	e := newEnv(t)
	mustPublish(t, e.queue("jobs", policy()), "x")
	e.close()
	cp := filepath.Join(e.dir, "index", "checkpoint")
	if err := os.Remove(cp); err != nil {
		t.Fatalf("setup: no checkpoint file: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(cp, "inner"), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := broker.Open(e.dir, e.opts)
	if err == nil {
		_ = s.Close()
		t.Fatalf("Open with a directory holding files in the checkpoint's place succeeded; want it refused as a file the store did not make")
	}
	if !errors.Is(err, vfs.ErrForeign) || !strings.Contains(err.Error(), cp) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("Open with a directory holding files in the checkpoint's place: want an error naming %s as a directory, wrapping vfs.ErrForeign; got %v", cp, err)
	}
	if _, err := os.Stat(filepath.Join(cp, "inner")); err != nil {
		t.Fatalf("the refused Open changed the directory it refused: %v", err)
	}
}
