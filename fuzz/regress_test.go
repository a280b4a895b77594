package fuzz

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
)

// Regression tests of what the fuzz targets found, each reduced to the
// calls that show it. They state the contract; each fails until the code
// under test keeps it.

// testStore opens a store of small segments on a fake clock.
func testStore(t *testing.T) (*broker.Store, *fakeClock, string) {
	t.Helper()
	clock := &fakeClock{}
	clock.ns.Store(clockStart.UnixNano())
	dir := fastDir(t)
	s, err := broker.Open(dir, storeOptions(clock, nil, broker.SyncAll))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, clock, dir
}

func declareBoth(t *testing.T, s *broker.Store) [2]*broker.Queue {
	t.Helper()
	var qs [2]*broker.Queue
	for i := range qs {
		q, err := s.Queue(queueNames[i], queuePolicies[i])
		require.NoError(t, err)
		qs[i] = q
	}
	return qs
}

// An Ack refused because the lease had lapsed observed the lapse: "a lease
// whose lapse a call has observed stays lapsed even if the clock goes
// backwards" (docs/DESIGN.md, Time). The store only remembers lapses that
// Receive, Stats, DeadLetters, replay, delete or a publish saw, so with the
// clock set back a nanosecond the receipt it just refused works.
// (FuzzBrokerDifferential: seed-settle-lapse; known divergence
// settle-lapse.)
func TestRefusedAckObservesTheLapse(t *testing.T) {
	s, clock, _ := testStore(t)
	q := declareBoth(t, s)[0]
	ctx := context.Background()
	_, err := q.Publish(ctx, []byte("m"))
	require.NoError(t, err)
	ds, err := q.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	clock.ns.Store(ds[0].Lease.ExpiresAt.UnixNano()) // a lease lapses AT ExpiresAt
	require.ErrorIs(t, q.Ack(ctx, ds[0].Lease.Receipt), broker.LeaseExpired)
	clock.ns.Add(-1)
	require.ErrorIs(t, q.Ack(ctx, ds[0].Lease.Receipt), broker.LeaseExpired,
		"the Ack just refused said the lease had lapsed; the same receipt must stay refused")
}

// A copy forward (the background reclamation of an old segment) applies a
// message's state again, and forgets that a call saw its lease lapse: with
// the clock set back, the message handed back to the queue is leased again
// and its old receipt works. Within one process what a call observed stays
// observed (docs/DESIGN.md, Time). (FuzzBrokerDifferential: intermittent,
// depending on when the reclamation runs; known divergence copy-lapse.)
func TestCopyForwardKeepsAnObservedLapse(t *testing.T) {
	s, clock, _ := testStore(t)
	qs := declareBoth(t, s)
	jobs, mail := qs[0], qs[1]
	ctx := context.Background()
	_, err := jobs.Publish(ctx, []byte("pinned"))
	require.NoError(t, err)
	ds, err := jobs.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	clock.ns.Store(ds[0].Lease.ExpiresAt.UnixNano() + 1)
	st := jobs.Stats()
	require.Equal(t, [2]int{1, 0}, [2]int{st.Ready, st.Leased}, "the lapse is observed: the message is back in the queue")
	clock.ns.Store(ds[0].Lease.ExpiresAt.UnixNano() - int64(time.Second))

	// Fill the first segment with traffic on the other queue, so that it is
	// sealed and its one live record copied forward.
	payload := make([]byte, queuePolicies[1].MaxMessageBytes)
	for i := 0; s.Stats().CopiedForward == 0; i++ {
		require.Less(t, i, 2000, "no copy forward after %d rounds: %+v", i, s.Stats())
		if i >= 400 {
			time.Sleep(5 * time.Millisecond) // the rotation woke the reclamation; let it run
			continue
		}
		_, err := mail.Publish(ctx, payload)
		require.NoError(t, err)
		got, err := mail.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.NoError(t, mail.Ack(ctx, got[0].Lease.Receipt))
	}
	st = jobs.Stats()
	require.Equal(t, [2]int{1, 0}, [2]int{st.Ready, st.Leased}, "after a copy forward the observed lapse is forgotten")
	require.ErrorIs(t, jobs.Ack(ctx, ds[0].Lease.Receipt), broker.LeaseExpired, "after a copy forward the lapsed receipt works again")
}

// "If the clock goes backwards, nothing is evicted" (API.md §4): a keyed
// duplicate reads the clock at 31 s; a store that forgot that reading at a
// rebuild of the index would, at 3 s, evict a key that is 92 s old by a
// clock still behind 31 s. With or without the rebuild the key is a
// duplicate: the duplicate logged its reading as an eviction of nothing.
// (FuzzBrokerDifferential: seed-evict-restart.)
func TestDedupClockReadingSurvivesARebuild(t *testing.T) {
	run := func(rebuild bool) (orig, again broker.MessageValue) {
		s, clock, dir := testStore(t)
		q := declareBoth(t, s)[0]
		ctx := context.Background()
		_, err := q.PublishKeyed(ctx, "a", []byte("a"))
		require.NoError(t, err)
		clock.ns.Add(int64(31 * time.Second))
		_, err = q.PublishKeyed(ctx, "a", []byte("a")) // a duplicate: the store has seen 31 s
		require.NoError(t, err)
		clock.ns.Add(int64(-2 * time.Minute)) // back to -89 s
		orig, err = q.PublishKeyed(ctx, "b", []byte("b"))
		require.NoError(t, err)
		if rebuild {
			require.NoError(t, s.Close())
			require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
			s, err = broker.Open(dir, storeOptions(clock, nil, broker.SyncAll))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			q = declareBoth(t, s)[0]
		}
		clock.ns.Add(int64(92 * time.Second)) // 3 s: still behind 31 s
		again, err = q.PublishKeyed(ctx, "b", []byte("b"))
		require.NoError(t, err)
		return orig, again
	}
	orig, again := run(false)
	require.Equal(t, orig.ID, again.ID, "without a restart nothing is evicted")
	orig, again = run(true)
	require.Equal(t, orig.ID, again.ID, "after a rebuild of the index the clock is still behind what the store saw: nothing may be evicted")
}

// A checkpoint whose stream runs past the sequences it says were handed
// out is inconsistent; Load must refuse it (ErrDamaged, and the store
// rebuilds from the log). Accepted, a stream ending at 2^64-1 makes every
// walk of it (Receive's NextReady, Dump) loop for ever: the cursor wraps.
// (FuzzCheckpointLoad: 4f0942e948a7d81d.)
func TestCheckpointStreamPastNextSequenceIsRefused(t *testing.T) {
	file := checkpointWithStream(t, 1, math.MaxUint64, 10)
	dir := filepath.Join(fastDir(t), "index")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "checkpoint"), file, 0o600))
	x, _, err := index.Load(vfs.Default, dir)
	if err == nil {
		_ = x.Table.Close()
	}
	require.ErrorIs(t, err, index.ErrDamaged, "a stream of queue jobs up to sequence 2^64-1 while the next sequence is 10")
}

// checkpointWithStream returns a well-formed checkpoint of one queue with
// no messages, whose stream runs from cursor to streamMax, and no table
// file.
func checkpointWithStream(t *testing.T, cursor, streamMax, nextSeq uint64) []byte {
	t.Helper()
	file := wrapCheckpoint(1<<32|32, nextSeq, checkpointBody(cursor, streamMax))
	p, err := parseCheckpoint(file)
	require.NoError(t, err)
	require.Equal(t, []parsedQueue{{name: "jobs", cursor: cursor, streamMax: streamMax}}, p.queues)
	return file
}

// A checkpoint naming a table file twice is not what Snapshot writes; Load
// must refuse it or open the file once. It maps and opens the file twice
// and keeps only the second, so Table.Close leaves a descriptor open and
// 2 MiB mapped for the life of the process, at every Open of the store.
// (FuzzCheckpointLoad: seed-body-table-twice.)
func TestCheckpointNamingATableFileTwiceLeaksNothing(t *testing.T) {
	tp := newCkptTemplate(t)
	files := buildCheckpoints(t, fastDir(t))
	f := files[len(files)-1]
	body := f[ckptHeader:]
	require.Equal(t, []byte{1, 0}, body[len(body)-2:], "the body ends with its table files: [0]")
	dup := wrapCheckpoint(binary.LittleEndian.Uint64(f[24:]), binary.LittleEndian.Uint64(f[32:]), append(body[:len(body)-2:len(body)-2], 2, 0, 0))
	tp.reset(t, dup)
	before := openUnder(tp.root)
	x, _, err := index.Load(vfs.Default, tp.index)
	if err != nil {
		require.ErrorIs(t, err, index.ErrDamaged)
	} else {
		require.NoError(t, x.Table.Close())
	}
	var left []string
	for _, o := range openUnder(tp.root) {
		if !contains(before, o) {
			left = append(left, o)
		}
	}
	require.Empty(t, left, "after Load (err %v) and Table.Close", err)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
