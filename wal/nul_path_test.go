package wal_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/wal"
)

// Open of a path holding a NUL byte says so, quoting the path, instead of
// passing on the kernel's bare EINVAL with the raw byte in its text.
func TestOpenOfAPathHoldingANulByteSaysSo(t *testing.T) {
	l, err := wal.Open(filepath.Join(t.TempDir(), "log\x00x"), wal.Options{})
	if err == nil {
		_ = l.Close()
		t.Fatal("Open of a path with a NUL byte succeeded")
	}
	if !strings.Contains(err.Error(), "NUL") {
		t.Errorf("Open of a path with a NUL byte: %q does not say what is wrong with the path", err)
	}
	if strings.ContainsRune(err.Error(), 0) {
		t.Errorf("Open of a path with a NUL byte: the error text holds the raw NUL byte: %q", err)
	}
	if !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("Open of a path with a NUL byte: %v, want fs.ErrInvalid", err)
	}
}
