package wal_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/internal/methodset"
	"github.com/walbroker/walbroker/wal"
)

// A nil *Log is what a caller holds that went on past Open's error. Every
// method of one refuses with an error wrapping ErrClosed that says so,
// and those that return no error answer as for an empty log, rather than
// end the process with a nil dereference.
func TestANilLogRefusesEveryCall(t *testing.T) {
	var l *wal.Log
	calls := map[string]func() error{
		"Append":        func() error { _, err := l.Append([]byte("x")); return err },
		"AppendWritten": func() error { _, err := l.AppendWritten([]byte("x")); return err },
		"Enqueue":       func() error { _, err := l.Enqueue(true, []byte("x")).Wait(); return err },
		"Sync":          l.Sync,
		"Barrier":       func() error { return l.Barrier(false) },
		"Read":          func() error { _, err := l.Read(0); return err },
		"View":          func() error { return l.View(0, func([]byte) error { return nil }) },
		"Iterate":       func() error { return l.Iterate(0, func(wal.Position, []byte) error { return nil }) },
		"RemoveBelow":   func() error { _, err := l.RemoveBelow(0); return err },
		"CopyTo":        func() error { return l.CopyTo(context.Background(), t.TempDir(), 0) },
		"Close":         l.Close,
		"Err":           l.Err,
		"SalvageDone":   l.SalvageDone,
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			require.ErrorIs(t, err, wal.ErrClosed)
			require.ErrorContains(t, err, "nil *wal.Log")
		})
	}
	require.Equal(t, wal.Stats{}, l.Stats())
	require.Empty(t, l.Sealed())
	require.Equal(t, "", l.Dir())
	require.Equal(t, "", l.SegmentPath(1))
	require.Equal(t, wal.Recovery{}, l.Recovery())
	require.Equal(t, wal.Position(0), l.End())
	select {
	case <-l.Poisoned():
	default:
		t.Fatal("a nil log's Poisoned channel is open")
	}

	// Every exported method is one of the above: a new one needs its case.
	zeros := map[string]bool{"Stats": true, "Sealed": true, "Dir": true, "SegmentPath": true, "Recovery": true, "End": true, "Poisoned": true}
	require.NoError(t, methodset.Check(reflect.TypeFor[*wal.Log](), calls, zeros), "every exported method needs a nil-receiver case")
}
