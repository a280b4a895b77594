package index_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/internal/methodset"
)

// A nil *Index is what a caller holds that went on past the error of Load
// or Rebuild. Every method of one that returns an error refuses with one
// wrapping ErrClosed that says so (Damaged included), and those that
// return no error answer as for an empty index, rather than end the
// process with a nil dereference. The cases are checked against the
// method set, so a new method without a case fails here.
func TestANilIndexRefusesEveryCall(t *testing.T) {
	var x *index.Index
	rec := (&index.Event{Kind: index.KindMark, Seq: 5}).Append(nil)
	calls := map[string]func() error{
		"Apply":       func() error { return x.Apply(1, &index.Event{Kind: index.KindMark, Seq: 5}) },
		"ApplyRecord": func() error { return x.ApplyRecord(1, rec) },
		"Declare": func() error {
			q, err := x.Declare(1, "q", index.Policy{})
			require.Nil(t, q)
			return err
		},
		"NextSeq": func() error {
			seq, err := x.NextSeq()
			require.Equal(t, uint64(0), seq)
			return err
		},
		"Snapshot": func() error {
			s, err := x.Snapshot(0, nil)
			require.Nil(t, s)
			return err
		},
		"Damaged": x.Damaged,
		"Verify":  x.Verify,
	}
	zeros := map[string]func(){
		"Holds": func() { require.False(t, x.Holds(1)) },
		"LargestLive": func() {
			seq, size := x.LargestLive()
			require.Equal(t, uint64(0), seq)
			require.Equal(t, uint32(0), size)
		},
		"LiveChunks":    func() { require.Empty(t, x.LiveChunks()) },
		"LiveIn":        func() { require.Empty(t, x.LiveIn(1, 0, 1<<20)) },
		"LiveInByQueue": func() { require.Empty(t, x.LiveInByQueue(1, 0, 1<<20)) },
		"NextQueueID": func() {
			id, ok := x.NextQueueID()
			require.Equal(t, uint32(0), id)
			require.False(t, ok)
		},
		"PeekNextSeq": func() { require.Equal(t, uint64(0), x.PeekNextSeq()) },
		"Queue":       func() { require.Nil(t, x.Queue("q")) },
		"QueueByID":   func() { require.Nil(t, x.QueueByID(1)) },
		"Queues":      func() { require.Empty(t, x.Queues()) },
		"SegmentUses": func() {
			u := x.SegmentUses()
			require.Empty(t, u)
			u[1] = index.SegmentUse{} // a copy is the caller's to change
		},
	}
	require.NoError(t, methodset.Check(reflect.TypeFor[*index.Index](), calls, zeros), "every exported method needs a nil-receiver case")
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = call() })
			require.ErrorIs(t, err, index.ErrClosed)
			require.ErrorContains(t, err, "nil *index.Index")
		})
	}
	for name, check := range zeros {
		t.Run(name, func(t *testing.T) { require.NotPanics(t, check) })
	}
}
