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

// TestAMessageIDAPowerLossTookIsNeverHandedOutAgain: under SyncNone a
// power loss may take publishes that returned (at most the last
// SyncInterval of them), but the IDs they returned are still "unique in
// the store, never reused" (DESIGN.md, The broker over the log). The
// reopened store drew its next sequence from the log it kept, so the next
// publish got the ID of a lost message: a consumer that remembers IDs it
// processed (the caller of the lost publish logged it) takes the new
// message for the old one.
func TestAMessageIDAPowerLossTookIsNeverHandedOutAgain(t *testing.T) {
	requireLostIDsNotReused(t, false)
}

// The same after a checkpoint: the reopened store replays the log from the
// checkpoint's position, past the durable mark that reserved the lost
// publishes' sequences, so the checkpoint itself must carry that
// reservation, or the next publish gets a lost message's ID.
func TestAMessageIDAPowerLossTookAfterACheckpointIsNeverHandedOutAgain(t *testing.T) {
	requireLostIDsNotReused(t, true)
}

// requireLostIDsNotReused publishes three messages under SyncNone that a
// power loss then takes (after a checkpoint of an earlier one when
// checkpoint is set), reopens a clone of what the disk kept, and requires
// that none of the next three publishes gets a lost message's ID.
func requireLostIDsNotReused(t *testing.T, checkpoint bool) {
	t.Helper()
	ctx := context.Background()
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	cfs := vfs.NewCrashFS(vfs.Default)
	opts := Options{Now: clock, Sync: SyncNone, SyncInterval: time.Hour, FS: cfs}
	ManualMaintenance(&opts)
	s, err := Open(dir, opts)
	require.NoError(t, err)
	pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 4096}
	q, err := s.Queue("q", pol) // a declaration is always synced
	require.NoError(t, err)
	if checkpoint {
		_, err = q.Publish(ctx, []byte("kept"))
		require.NoError(t, err)
		require.NoError(t, s.Maintain()) // a checkpoint: everything so far is durable
	}
	lost := map[string]bool{}
	for i := 0; i < 3; i++ {
		m, err := q.Publish(ctx, []byte("lost to the power"))
		require.NoError(t, err)
		lost[m.ID] = true
	}
	cfs.Crash()
	clone := filepath.Join(root, "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
	_ = s.Close()

	r, err := Open(clone, Options{Now: clock, Sync: SyncNone})
	require.NoError(t, err)
	defer r.Close()
	if checkpoint {
		require.False(t, r.Recovery().IndexRebuilt, "the reopened store starts from the checkpoint")
	}
	rq, err := r.Queue("q", pol)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		m, err := rq.Publish(ctx, []byte("published after the power came back"))
		require.NoError(t, err)
		require.False(t, lost[m.ID], "message ID %s was returned before the power loss for another message", m.ID)
	}
}

// Under SyncNone a publish that takes sequences past the reservation made
// durable so far waits for the mark that reserves them, or fails. Here a
// batch crosses the reservation Open made: its records and the new mark
// are written together, and the power fails in the fdatasync that
// follows. The batch may fail; if it returned, none of its IDs may be
// handed out again by the store the disk kept.
func TestAPublishPastTheDurableReservationWaitsForTheMarkThatReservesIt(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	s, cfs, ffs := openHeldSyncNone(t, dir, clock)
	pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024}
	q, err := s.Queue("q", pol)
	require.NoError(t, err)
	other, err := s.Queue("other", pol)
	require.NoError(t, err)

	// The batch and its mark queue up behind a held write and are written
	// together; the power fails right after.
	release, otherDone := holdTheWriterThenLosePower(ffs, cfs, other)

	// Open reserved the sequences below 1+seqReserve; the batch's last
	// message takes the one past them.
	payloads := make([][]byte, seqReserve+1)
	for i := range payloads {
		payloads[i] = []byte("b")
	}
	var out []MessageValue
	var batchErr error
	batchDone := make(chan struct{})
	go func() {
		defer close(batchDone)
		out, batchErr = q.PublishBatch(ctx, payloads)
	}()
	waitUnderLock(t, q, "the batch's queuing", func() bool { return len(q.inflight) > 0 })
	close(release)
	require.NoError(t, <-otherDone, "the held publish was written")
	<-batchDone
	require.True(t, cfs.Crashed(), "the power failed after the batch was written")
	returned := map[string]string{}
	if batchErr == nil {
		for _, m := range out {
			returned[m.ID] = "the batch"
		}
	}
	t.Logf("the batch returned %d IDs (err %v)", len(returned), batchErr)
	requireNoIDHandedOutAgain(t, cfs, s, filepath.Join(root, "clone"), dir, clock, returned)
}

// openHeldSyncNone opens a SyncNone store in dir on a simulated disk
// (cfs) that a FaultFS (ffs) watches, so that holdTheWriterThenLosePower
// can hold its writer and then cut its power.
func openHeldSyncNone(t *testing.T, dir string, clock func() time.Time) (s *Store, cfs *vfs.CrashFS, ffs *vfs.FaultFS) {
	t.Helper()
	cfs = vfs.NewCrashFS(vfs.Default)
	ffs = vfs.NewFaultFS(cfs)
	opts := Options{Now: clock, Sync: SyncNone, SyncInterval: time.Hour, FS: ffs, SegmentBytes: 1 << 20}
	ManualMaintenance(&opts)
	s, err := Open(dir, opts)
	require.NoError(t, err)
	return s, cfs, ffs
}

// holdTheWriterThenLosePower holds the log's writer in the write of a
// publish to other, so that what is queued meanwhile is written together
// in the next write, and makes the power fail right after that write (its
// fdatasync fails). It returns once the writer is held: closing release
// lets it go, and otherDone then gets the held publish's result.
func holdTheWriterThenLosePower(ffs *vfs.FaultFS, cfs *vfs.CrashFS, other *Queue) (release chan struct{}, otherDone <-chan error) {
	var step atomic.Int32
	held := make(chan struct{})
	release = make(chan struct{})
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
	done := make(chan error, 1)
	go func() {
		_, err := other.Publish(context.Background(), []byte("first"))
		done <- err
	}()
	<-held
	return release, done
}

// waitUnderLock waits until cond, read under q's lock, holds. A hang
// guard, not a timing assumption.
func waitUnderLock(t *testing.T, q *Queue, what string, cond func() bool) {
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

// requireNoIDHandedOutAgain opens what the disk of s kept (cloned from
// dir into clone) and publishes: no new message may take an ID returned
// (to whom: returned's value) before the power loss.
func requireNoIDHandedOutAgain(t *testing.T, cfs *vfs.CrashFS, s *Store, clone, dir string, clock func() time.Time, returned map[string]string) {
	t.Helper()
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
	_ = s.Close()
	r, err := Open(clone, Options{Now: clock, Sync: SyncNone, SegmentBytes: 1 << 20})
	require.NoError(t, err)
	defer r.Close()
	rq, err := r.Queue("q", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024})
	require.NoError(t, err)
	for range 3 {
		m, err := rq.Publish(context.Background(), []byte("published after the power came back"))
		require.NoError(t, err)
		require.Empty(t, returned[m.ID], "message ID %s was returned to %s before the power loss, and now names another message", m.ID, returned[m.ID])
	}
}
