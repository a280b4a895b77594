package broker_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// An Open on a full disk either opens the store as it was or fails with an
// error wrapping ENOSPC; either way, once space is back, an Open holds the
// same state as an Open that never met the full disk: the failed attempt
// removed nothing. Each shape a store is opened in, on a disk that refuses
// every write (hard) and on one that refuses only new space (real).
func TestAnOpenOnAFullDiskFailsWithENOSPCAndTheRetryOpensTheSameState(t *testing.T) {
	crashed, clock := ofTemplate(t)
	closed := filepath.Join(fastDir(t), "closed")
	copyTree(t, crashed, closed)
	s, err := broker.Open(closed, ofOptions(clock, nil))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	suspect := filepath.Join(fastDir(t), "suspect")
	copyTree(t, closed, suspect)
	require.NoError(t, os.WriteFile(filepath.Join(suspect, "index", "SUSPECT"), nil, 0o600))
	noIndex := filepath.Join(fastDir(t), "noindex")
	copyTree(t, crashed, noIndex)
	require.NoError(t, os.RemoveAll(filepath.Join(noIndex, "index")))

	for _, tmpl := range []struct{ name, dir string }{
		{"crashed", crashed}, {"closed", closed}, {"suspect", suspect}, {"without index", noIndex}, {"new", ""},
	} {
		var want ofView
		if tmpl.dir != "" {
			var err error
			want, err = ofState(t, ofCopy(t, tmpl.dir), clock, false)
			require.NoError(t, err)
		}
		for _, disk := range []struct {
			name string
			fs   func() (vfs.FS, func())
		}{
			{"hard", func() (vfs.FS, func()) {
				ffs := vfs.NewFaultFS(vfs.Default)
				diskFullFill(ffs)
				return ffs, ffs.Clear
			}},
			{"real", func() (vfs.FS, func()) {
				ffs := &fullDiskFS{FS: vfs.Default}
				ffs.full.Store(true)
				return ffs, func() { ffs.full.Store(false) }
			}},
		} {
			t.Run(tmpl.name+"/"+disk.name, func(t *testing.T) {
				dir := filepath.Join(fastDir(t), "store")
				if tmpl.dir != "" {
					dir = ofCopy(t, tmpl.dir)
				}
				fs, free := disk.fs()
				s, err := broker.Open(dir, ofOptions(clock, fs))
				if err != nil {
					t.Logf("Open: %v", err)
					require.ErrorIs(t, err, syscall.ENOSPC)
					require.Contains(t, err.Error(), "the disk is full: free space, then open the store again")
				} else {
					t.Logf("Open succeeded on the full disk")
					got := ofViewOf(t, s)
					require.Empty(t, got.diff(want), "Open on the full disk opened another state")
					t.Logf("Close: %v", s.Close())
				}
				free()
				if tmpl.dir == "" {
					s, err := broker.Open(dir, ofOptions(clock, nil))
					require.NoError(t, err, "Open once space is back")
					require.NoError(t, s.Close())
					return
				}
				got, err := ofState(t, dir, clock, false)
				require.NoError(t, err, "Open once space is back")
				require.Empty(t, got.diff(want), "Open once space is back")
			})
		}
	}
}
