package broker

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
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
	cfs := vfs.NewCrashFS(vfs.Default)
	ffs := vfs.NewFaultFS(cfs)
	opts := Options{Now: clock, Sync: SyncNone, SyncInterval: time.Hour, FS: ffs, SegmentBytes: 1 << 20}
	ManualMaintenance(&opts)
	s, err := Open(dir, opts)
	require.NoError(t, err)
	pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024, DedupWindow: time.Hour, Capacity: 1}
	q, err := s.Queue("q", pol)
	require.NoError(t, err)
	other, err := s.Queue("other", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024})
	require.NoError(t, err)

	// The log's writer is held in the write of a publish to other (step
	// 1), so that the original, its mark and the duplicate's clock
	// reading queue up behind it and are written together; the power
	// fails right after that write (step 2).
	var step atomic.Int32
	held, release := make(chan struct{}), make(chan struct{})
	ffs.Observe(func(e vfs.Event) {
		if e.Op != vfs.OpWrite || !strings.Contains(filepath.Base(e.Name), "0000000001.seg") {
			return
		}
		if step.CompareAndSwap(1, 2) {
			close(held)
			<-release
		} else if step.CompareAndSwap(2, 0) {
			cfs.Crash() // the fdatasync after this write fails
		}
	})
	step.Store(1)
	otherDone := make(chan error, 1)
	go func() {
		_, err := other.Publish(ctx, []byte("first"))
		otherDone <- err
	}()
	<-held

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
	// Until the original is queued (in flight) behind the held write. A
	// hang guard, not a timing assumption.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			q.mu.Lock()
			ok := cond()
			q.mu.Unlock()
			if ok {
				return
			}
			require.True(t, time.Now().Before(deadline), "%s never happened", what)
			time.Sleep(50 * time.Microsecond)
		}
	}
	waitFor("the original's queuing", func() bool { return len(q.inflight) > 0 })

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
	waitFor("the duplicate's look-up", func() bool { return q.iq.LastEvicts() == later })

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

	clone := filepath.Join(root, "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
	_ = s.Close()
	r, err := Open(clone, Options{Now: clock, Sync: SyncNone, SegmentBytes: 1 << 20})
	require.NoError(t, err)
	defer r.Close()
	rq, err := r.Queue("q", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		m, err := rq.Publish(ctx, []byte("published after the power came back"))
		require.NoError(t, err)
		require.Empty(t, returned[m.ID], "message ID %s was returned to %s before the power loss, and now names another message", m.ID, returned[m.ID])
	}
}
