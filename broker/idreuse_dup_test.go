package broker

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A keyed publish whose key is in flight returns the original message's ID
// once the original's record is written. Under SyncNone the original also
// waits for the mark that reserves its sequence (see seqReservation); the
// duplicate must too, or it hands out an ID that a power loss lets the
// reopened store give another message. Here the original takes the first
// sequence past the reservation made durable so far (a batch the queue
// refused drew the ones before it, and reserved nothing), so its mark is
// written with it, and the power fails in the fdatasync that follows.
func TestADuplicateOfAPublishPastTheDurableReservationWaitsForItsMark(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	s, cfs, ffs := openHeldSyncNone(t, dir, clock)
	pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024, DedupWindow: time.Hour, Capacity: 1}
	q, err := s.Queue("q", pol)
	require.NoError(t, err)
	other, err := s.Queue("other", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024})
	require.NoError(t, err)

	// The original, its mark and the duplicate's clock reading queue up
	// behind a held write and are written together; the power fails
	// right after.
	release, otherDone := holdTheWriterThenLosePower(ffs, cfs, other)

	// A batch the queue refuses draws every sequence up to the
	// reservation Open made durable.
	payloads := make([][]byte, s.seqs.durable.Load()-s.idx.PeekNextSeq())
	for i := range payloads {
		payloads[i] = []byte("b")
	}
	_, err = q.PublishBatch(ctx, payloads)
	require.ErrorIs(t, err, QueueFull)
	require.Equal(t, s.seqs.durable.Load(), s.idx.PeekNextSeq())

	var orig MessageValue
	var origErr error
	origDone := make(chan struct{})
	go func() {
		defer close(origDone)
		orig, origErr = q.PublishKeyed(ctx, "k", []byte("original"))
	}()
	waitUnderLock(t, q, "the original's queuing", func() bool { return len(q.inflight) > 0 })

	// The duplicate reads the clock later: its reading, logged under the
	// queue's lock, shows when it has looked the key up.
	later := now.Add(1)
	var dup MessageValue
	var dupErr error
	dupDone := make(chan struct{})
	go func() {
		defer close(dupDone)
		dup, dupErr = q.PublishKeyed(ctx, "k", []byte("original"))
	}()
	waitUnderLock(t, q, "the duplicate's look-up", func() bool { return q.iq.LastEvicts() == later })

	close(release)
	require.NoError(t, <-otherDone, "the held publish was written")
	<-origDone
	<-dupDone
	require.True(t, cfs.Crashed(), "the power failed after the original was written")
	returned := map[string]string{}
	if origErr == nil {
		returned[orig.ID] = "the original"
	}
	if dupErr == nil {
		returned[dup.ID] = "the duplicate"
	}
	t.Logf("original: %v %v; duplicate: %v %v", orig.ID, origErr, dup.ID, dupErr)

	requireNoIDHandedOutAgain(t, cfs, s, filepath.Join(root, "clone"), dir, clock, returned)
}
