package index_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/internal/methodset"
)

// A nil *Table is what a caller holds that went on past OpenTable's error.
// Every method of one that returns an error refuses with one wrapping
// ErrClosed that says so, and those that return no error answer as for an
// empty table, rather than end the process with a nil dereference. The
// cases are checked against the method set, so a new method without a
// case fails here.
func TestANilTableRefusesEveryCall(t *testing.T) {
	var tb *index.Table
	calls := map[string]func() error{
		"Get": func() error {
			e, ok, err := tb.Get(1)
			require.Equal(t, index.Entry{}, e)
			require.False(t, ok)
			return err
		},
		"Flush": func() error {
			created, err := tb.Flush(true)
			require.Empty(t, created)
			return err
		},
		"NextStream": func() error {
			seq, ok, err := tb.NextStream(1, 0, 1<<20)
			require.Equal(t, uint64(0), seq)
			require.False(t, ok)
			return err
		},
		"Remove":          func() error { return tb.Remove(0) },
		"RemoveLeftovers": tb.RemoveLeftovers,
		"SyncDir":         tb.SyncDir,
		"Close":           tb.Close,
	}
	zeros := map[string]func(){
		"Put":           func() { tb.Put(index.Entry{Seq: 1, Pos: 1}) },
		"Detach":        tb.Detach,
		"Unflushed":     func() { require.Equal(t, 0, tb.Unflushed()) },
		"Chunks":        func() { require.Empty(t, tb.Chunks()) },
		"Bytes":         func() { require.Equal(t, int64(0), tb.Bytes()) },
		"Leftovers":     func() { require.Empty(t, tb.Leftovers()) },
		"LeftoverBytes": func() { require.Equal(t, int64(0), tb.LeftoverBytes()) },
	}
	require.NoError(t, methodset.Check(reflect.TypeFor[*index.Table](), calls, zeros), "every exported method needs a nil-receiver case")
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = call() })
			require.ErrorIs(t, err, index.ErrClosed)
			require.ErrorContains(t, err, "nil *index.Table")
		})
	}
	for name, check := range zeros {
		t.Run(name, func(t *testing.T) { require.NotPanics(t, check) })
	}
}
