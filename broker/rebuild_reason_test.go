package broker

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
)

// When Open rebuilds the index from the log, the warning says which of its
// reasons held, not the list of them all: a crash in the middle of a
// checkpoint is routine, damage found while running is not, and an
// operator reading "salvage changed the log" after a plain crash looks for
// a salvage that never ran.
func TestTheRebuildWarningNamesItsOwnReason(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mark   func(dir string) error
		says   string
		denies []string
	}{
		{"crash mid-checkpoint", func(dir string) error { return index.BeginCheckpoint(vfs.Default, dir) },
			"CHECKPOINTING", []string{"salvage", "damage"}},
		{"damage found while running", func(dir string) error { return index.MarkSuspect(vfs.Default, dir) },
			"damage", []string{"salvage", "CHECKPOINTING"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}
			s, err := Open(dir, Options{SegmentBytes: 4 << 20})
			require.NoError(t, err)
			q, err := s.Queue("jobs", pol)
			require.NoError(t, err)
			_, err = q.Publish(context.Background(), []byte("x"))
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.NoError(t, tc.mark(filepath.Join(dir, "index")))

			log, buf := newTestLogger()
			s, err = Open(dir, Options{SegmentBytes: 4 << 20, Logger: log})
			require.NoError(t, err)
			defer s.Close()
			require.True(t, s.Recovery().IndexRebuilt)
			q, err = s.Queue("jobs", pol)
			require.NoError(t, err)
			require.Equal(t, 1, q.Stats().Ready)
			out := buf.String()
			require.Contains(t, out, "rebuilding the index from the log")
			require.Contains(t, out, tc.says)
			for _, d := range tc.denies {
				require.NotContains(t, out, d)
			}
		})
	}
}
