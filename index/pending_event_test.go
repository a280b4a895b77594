package index

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/wal"
)

// A lease, extend, nack, dead letter or replay of a Pending message (its
// publish applied at position 0, its record not yet in the log) is
// refused with ErrBadEvent, and changes nothing: taken, it left the
// message at position 0, where its commit, which acts only on a Pending
// message, never counted it in a log segment or a table chunk. Nothing
// hands out a message before its publish is in the log.
func TestAStateEventOfAPendingMessageIsRefused(t *testing.T) {
	for _, k := range []Kind{KindLease, KindExtend, KindNack, KindDeadLetter, KindReplay} {
		x := declared(t)
		q := x.Queue("q")
		require.NoError(t, x.Apply(0, pub(1, 100, "")))
		err := x.Apply(0, &Event{Kind: k, Queue: 1, Seq: 1, Deliveries: 1, Time: 500, Nonce: 7})
		require.Truef(t, errors.Is(err, ErrBadEvent), "%v of a pending message: %v, want ErrBadEvent", k, err)
		require.Equal(t, Pending, q.Get(1).State, "%v of a pending message changed it", k)
		require.NoError(t, q.Commit(1, wal.MakePosition(1, 100)))
		require.NoError(t, x.Verify(), "%v of a pending message refused, then its commit", k)
		require.Equal(t, 1, q.Live(), "the message, committed, is live")
	}
}
