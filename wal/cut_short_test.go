package wal

import (
	"bytes"
	"context"
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// A segment file cut short while the log has it mapped (by another process,
// or by hand) leaves pages of the mapping that no file backs: reading one
// raises SIGBUS, which ends the process unless the reader asked for a
// panic. View, Iterate and CopyTo read such a page as damage, a
// *CorruptionError naming the file and the offset, which a store stops
// for. The test asks for a panic itself, so that a read that faults fails
// it instead of ending the run.
func TestASegmentCutShortUnderItsMappingIsCorruptionNotACrash(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1 << 16})
	defer l.Close()
	var all []Position
	for i := range 40 {
		pos, err := l.Append(bytes.Repeat([]byte{byte('a' + i%26)}, 3000))
		require.NoError(t, err)
		all = append(all, pos...)
	}
	// A record past the first page of the first segment, sealed, and one
	// of the last.
	var sealed Position
	for _, p := range all {
		if p.Segment() == all[0].Segment() && p.Offset() > 2*4096 {
			sealed = p
			break
		}
	}
	last := all[len(all)-1]
	require.NotZero(t, sealed)
	require.Greater(t, last.Segment(), sealed.Segment())
	require.Greater(t, last.Offset(), 2*4096)
	first, active := segFile(dir, sealed.Segment()), segFile(dir, last.Segment())
	require.NoError(t, os.Truncate(first, 4096))

	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	read := func(what string, f func() error) error {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s faulted on the file cut short (a SIGBUS that would end the process): %v", what, r)
				}
			}()
			err = f()
		}()
		return err
	}
	corrupt := func(what, path string, err error) {
		t.Helper()
		var ce *CorruptionError
		require.ErrorAs(t, err, &ce, what)
		require.Equal(t, path, ce.File, what)
		require.GreaterOrEqual(t, ce.Offset, 4096, what)
		require.ErrorContains(t, err, "cut short", what)
	}
	corrupt("View", first, read("View", func() error {
		return l.View(sealed, func([]byte) error { t.Fatal("View called fn"); return nil })
	}))
	n := 0
	corrupt("Iterate", first, read("Iterate", func() error {
		return l.Iterate(0, func(Position, []byte) error { n++; return nil })
	}))
	require.Positive(t, n, "the records in the page still backed")
	corrupt("CopyTo", first, read("CopyTo", func() error {
		return l.CopyTo(context.Background(), t.TempDir(), l.End())
	}))

	// The active segment, where CopyTo's end is looked up.
	require.NoError(t, os.Truncate(active, 4096))
	corrupt("View", active, read("View", func() error {
		return l.View(last, func([]byte) error { t.Fatal("View called fn"); return nil })
	}))
	corrupt("CopyTo", active, read("CopyTo", func() error {
		return l.CopyTo(context.Background(), t.TempDir(), last)
	}))
}
