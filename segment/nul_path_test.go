package segment_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// Create and Open of a path holding a NUL byte say so, quoting the path,
// instead of passing on the kernel's bare EINVAL with the raw byte in its
// text.
func TestCreateAndOpenOfAPathHoldingANulByteSaySo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg\x00x")
	_, cerr := segment.Create(vfs.Default, path, 1, 7, 64<<10)
	_, oerr := segment.Open(vfs.Default, path, 1)
	for name, err := range map[string]error{"Create": cerr, "Open": oerr} {
		if err == nil {
			t.Fatalf("%s of a path with a NUL byte succeeded", name)
		}
		if !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("%s of a path with a NUL byte: %v, want fs.ErrInvalid", name, err)
		}
		if !strings.Contains(err.Error(), "NUL") || strings.ContainsRune(err.Error(), 0) {
			t.Errorf("%s of a path with a NUL byte: %q, want an error that names the NUL byte and does not carry it raw", name, err)
		}
	}
}

// Recycle and Rename say so too, for either name, as Create and Open do,
// and change nothing: the retired file stays where it was.
func TestRecycleAndRenameToAPathHoldingANulByteSaySo(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "spare")
	f, err := segment.Create(vfs.Default, old, 1, 7, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "seg\x00x")
	_, rerr := segment.Recycle(vfs.Default, old, bad, 2, 8)
	_, oerr := segment.Recycle(vfs.Default, bad, filepath.Join(dir, "2.seg"), 2, 8)
	nerr := f.Rename(vfs.Default, bad)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{"Recycle to it": rerr, "Recycle from it": oerr, "Rename": nerr} {
		if err == nil {
			t.Fatalf("%s: a path with a NUL byte succeeded", name)
		}
		if !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("%s: a path with a NUL byte: %v, want fs.ErrInvalid", name, err)
		}
		if !strings.Contains(err.Error(), "NUL") || strings.ContainsRune(err.Error(), 0) {
			t.Errorf("%s: a path with a NUL byte: %q, want an error that names the NUL byte and does not carry it raw", name, err)
		}
	}
	if got := f.Path(); got != old {
		t.Errorf("after a refused Rename the file is at %q, want %q", got, old)
	}
}
