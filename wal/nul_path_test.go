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

// CopyTo a path holding a NUL byte says so as Open does: it named the
// path twice, first with the raw byte in the text ("wal: copy to a<NUL>b:
// path \"a\\x00b\" holds a NUL byte ..."). Nothing is written.
func TestCopyToAPathHoldingANulByteSaysSo(t *testing.T) {
	l, err := wal.Open(t.TempDir(), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append([]byte("x")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy\x00x")
	err = l.CopyTo(t.Context(), dst, l.End())
	if !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("CopyTo a path with a NUL byte: %v, want fs.ErrInvalid", err)
	}
	if strings.ContainsRune(err.Error(), 0) {
		t.Errorf("CopyTo a path with a NUL byte: the error text holds the raw NUL byte: %q", err)
	}
	if want := `wal: copy: path "` + strings.ReplaceAll(dst, "\x00", `\x00`) + `" holds a NUL byte`; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("CopyTo a path with a NUL byte: %q, want it to begin %q", err, want)
	}
}
