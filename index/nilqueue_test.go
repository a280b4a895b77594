package index_test

import (
	"math"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/internal/methodset"
)

// A nil *Queue is what a caller holds that went on past Declare's error, or
// that Index.Queue or QueueByID gave for a queue the index does not have.
// Apply and Commit refuse with an error wrapping ErrClosed that says so (a
// publish taken silently there would be lost), and the methods that return
// no error answer as for an empty queue, rather than end the process with
// a nil dereference. The cases are checked against the method set, so a
// new method without a case fails here.
func TestANilQueueRefusesEveryCall(t *testing.T) {
	q := index.New().Queue("undeclared")
	require.Nil(t, q)
	calls := map[string]func() error{
		"Apply": func() error {
			held, err := q.Apply(0, &index.Event{Kind: index.KindPublish, Seq: 1, Payload: []byte("x")})
			require.False(t, held)
			return err
		},
		"Commit": func() error { return q.Commit(1, 1) },
	}
	zeros := map[string]func(){
		"Active": func() { require.Equal(t, 0, q.Active()) },
		"Counts": func() {
			ready, leased, delayed, dead := q.Counts()
			require.Equal(t, [4]int{}, [4]int{ready, leased, delayed, dead})
		},
		"DeadLetters": func() { require.Empty(t, q.DeadLetters(10)) },
		// A nil queue dumps as no real queue does: it takes no event, so
		// it does not behave as an empty one.
		"Dump":         func() { require.Equal(t, "queue <nil>\n", q.Dump(0)) },
		"EvictSeen":    func() { require.False(t, q.EvictSeen(math.MaxInt64, 0)) },
		"Exhausted":    func() { require.Empty(t, q.Exhausted()) },
		"ExhaustedLen": func() { require.Zero(t, q.ExhaustedLen()) },
		"FinalsDue":    func() { require.Empty(t, q.FinalsDue(math.MaxInt64)) },
		"Get":          func() { require.Nil(t, q.Get(1)) },
		"IsExhausted": func() {
			require.False(t, q.IsExhausted(&index.Message{State: index.Leased, Lapsed: true}))
		},
		"Lapsed":     func() { require.Empty(t, q.Lapsed()) },
		"LastEvicts": func() { require.Equal(t, int64(math.MinInt64), q.LastEvicts()) },
		"Live":       func() { require.Equal(t, 0, q.Live()) },
		"NextDue": func() {
			at, ok := q.NextDue()
			require.Equal(t, int64(0), at)
			require.False(t, ok)
		},
		"NextReady": func() { require.Nil(t, q.NextReady()) },
		"Pinning": func() {
			msgs, keys := q.Pinning(1, 0, math.MaxUint64)
			require.Empty(t, msgs)
			require.Empty(t, keys)
		},
		"Promote": func() { q.Promote(math.MaxInt64) },
		"Seen": func() {
			seq, at, ok := q.Seen("k")
			require.Equal(t, uint64(0), seq)
			require.Equal(t, int64(0), at)
			require.False(t, ok)
		},
		"SeenCount": func() { require.Equal(t, 0, q.SeenCount()) },
		"Spent":     func() { require.Empty(t, q.Spent(1)) },
	}
	require.NoError(t, methodset.Check(reflect.TypeFor[*index.Queue](), calls, zeros), "every exported method needs a nil-receiver case")
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = call() })
			require.ErrorIs(t, err, index.ErrClosed)
			require.ErrorContains(t, err, "nil *index.Queue")
		})
	}
	for name, check := range zeros {
		t.Run(name, func(t *testing.T) { require.NotPanics(t, check) })
	}
}
