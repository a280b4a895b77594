package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Preamble with no room kept for it (PreambleBytes 0) was accepted, and
// every rotation that wrote a preamble record then failed with
// ErrTooLarge, the first of them long after Open: it is a bad option,
// refused before any file is made.
func TestAPreambleWithoutRoomIsABadOption(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	l, err := Open(dir, Options{SegmentBytes: 4096, Preamble: func() [][]byte { return [][]byte{[]byte("first")} }})
	if err == nil {
		l.Close()
	}
	require.ErrorIs(t, err, ErrBadOptions)
	require.ErrorContains(t, err, "PreambleBytes")
	_, statErr := os.Stat(dir)
	require.ErrorIs(t, statErr, os.ErrNotExist, "the refused Open made the directory")
}
