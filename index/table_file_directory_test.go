package index

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/walbroker/walbroker/vfs"
)

// Load's doc: a checkpoint that is "no file to read (a directory in its
// place)" or names a chunk file missing or of the wrong size is
// ErrDamaged, which the caller may rebuild from. A directory in the place
// of a chunk file is no file either, and damaged as well, not the bare
// EISDIR of its open, which broker.Open must take for an I/O error (the
// store would refuse to open for good, "open again once they read").
func TestATableFileThatIsADirectoryIsDamaged(t *testing.T) {
	dir := t.TempDir()
	x := goodCheckpoint(t, dir)
	chunks := x.Table.Chunks()
	if len(chunks) == 0 {
		t.Fatal("the checkpoint names no table file")
	}
	path := filepath.Join(dir, chunkName(chunks[0]))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	y, _, err := Load(vfs.Default, dir)
	if err == nil {
		_ = y.Table.Close()
		t.Fatal("Load took a directory in the place of a table file for the table file")
	}
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("Load with a directory in the place of table file %s: want an error wrapping ErrDamaged (as for a directory in the checkpoint's place, or a table file of the wrong size), got %v", path, err)
	}
}
