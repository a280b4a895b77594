package wal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSalvageRefusesAGapNoLostFileExplains: Salvage puts an empty segment
// in the place of a missing segment file, but a gap of billions (a file of
// another log, or a stray name, far past the last segment) is no lost
// file: Open with Salvage refuses it as corrupt, naming the gap, at once,
// rather than make a file for each segment in it.
func TestSalvageRefusesAGapNoLostFileExplains(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 64 << 10})
	_, err := l.Append([]byte("kept"))
	require.NoError(t, err)
	require.NoError(t, l.Close())
	data, err := os.ReadFile(filepath.Join(dir, segName(1)))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, segName(4_000_000_000)), data, 0o600))

	done := make(chan error, 1)
	go func() {
		l, err := Open(dir, Options{SegmentBytes: 64 << 10, Salvage: true})
		if err == nil {
			_ = l.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		var ce *CorruptionError
		require.True(t, errors.As(err, &ce), "Open with Salvage of a log whose next segment file is named 4000000000: want a *CorruptionError naming the gap, got %v", err)
		require.Contains(t, err.Error(), "missing")
	case <-time.After(30 * time.Second):
		t.Fatal("Open with Salvage of a log with a segment file named 4000000000 did not return in 30 s: it fills the gap segment by segment")
	}
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Less(t, len(names), 10, "Open with Salvage made files for the gap")
}
