package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

const rkWindow = time.Hour

var rkPolicy = policy(func(p *broker.PolicyValue) { p.DedupWindow = rkWindow; p.MaxMessageBytes = 1024 })

// rkDup publishes key on q and requires the answer to be a duplicate of
// orig: same ID and EnqueuedAt, nil Payload.
func rkDup(t *testing.T, q *broker.Queue, key string, orig broker.MessageValue, msgAndArgs ...any) {
	t.Helper()
	m, err := q.PublishKeyed(ctx(t), key, []byte("again"))
	require.NoError(t, err, msgAndArgs...)
	require.Equal(t, orig.ID, m.ID, msgAndArgs...)
	requireSameInstant(t, orig.EnqueuedAt, m.EnqueuedAt, msgAndArgs...)
	require.Nil(t, m.Payload, msgAndArgs...)
}

// rkNew publishes key on q and requires a new message (not orig).
func rkNew(t *testing.T, q *broker.Queue, key string, orig broker.MessageValue, msgAndArgs ...any) broker.MessageValue {
	t.Helper()
	m, err := q.PublishKeyed(ctx(t), key, []byte("again"))
	require.NoError(t, err, msgAndArgs...)
	require.NotEqual(t, orig.ID, m.ID, msgAndArgs...)
	require.NotNil(t, m.Payload, msgAndArgs...)
	return m
}

// The window is measured from the original's EnqueuedAt; a duplicate does
// not extend it; the key is evicted only when strictly older.
func TestAKeysWindowRunsFromTheOriginalsEnqueuedAt(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", rkPolicy)
	orig, err := q.PublishKeyed(ctx(t), "k", []byte("p"))
	require.NoError(t, err)
	e.clock.Advance(rkWindow / 2)
	rkDup(t, q, "k", orig, "half way")
	e.clock.Set(orig.EnqueuedAt.Add(rkWindow))
	rkDup(t, q, "k", orig, "exactly the window")
	e.clock.Set(orig.EnqueuedAt.Add(rkWindow + time.Nanosecond))
	rkNew(t, q, "k", orig, "one ns past the window (the duplicates did not extend it)")
}

// After ack, dead-letter, replay and delete, a duplicate returns the
// original and enqueues nothing.
func TestAKeyAnswersDuplicateAfterEveryFateOfItsMessage(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.DedupWindow = rkWindow; p.MaxDeliveries = 1 }))
	orig, err := q.PublishKeyed(ctx(t), "k", []byte("p"))
	require.NoError(t, err)
	check := func(what string) {
		t.Helper()
		before := q.Stats()
		rkDup(t, q, "k", orig, what)
		after := q.Stats()
		require.Equal(t, before.Ready, after.Ready, what)
		require.Equal(t, before.DeadLetters, after.DeadLetters, what)
		require.Equal(t, before.Published, after.Published, what)
		require.Equal(t, before.Duplicates+1, after.Duplicates, what)
	}
	check("ready")
	d := mustReceiveOne(t, q)
	check("leased")
	require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, nil))
	check("dead-lettered")
	require.NoError(t, q.ReplayDeadLetter(ctx(t), orig.ID))
	check("replayed")
	d = mustReceiveOne(t, q)
	require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, nil))
	require.NoError(t, q.DeleteDeadLetter(ctx(t), orig.ID))
	check("deleted")
	e.reopen()
	q = e.queue("jobs", policy(func(p *broker.PolicyValue) { p.DedupWindow = rkWindow; p.MaxDeliveries = 1 }))
	check("deleted, reopened")
	s := rebuildFromLog(t, e.s, e.dir, e.opts)
	e.s = nil
	q, err = s.Queue("jobs", rkPolicy)
	require.NoError(t, err)
	check("deleted, rebuilt from the log")
}

// Keys of two queues of one store are independent.
func TestKeysAreIndependentAcrossQueues(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	a, b := e.queue("a", rkPolicy), e.queue("b", rkPolicy)
	ma, err := a.PublishKeyed(ctx(t), "k", []byte("p"))
	require.NoError(t, err)
	mb := rkNew(t, b, "k", ma, "queue b")
	rkDup(t, a, "k", ma)
	rkDup(t, b, "k", mb)
	e.reopen()
	a, b = e.queue("a", rkPolicy), e.queue("b", rkPolicy)
	rkDup(t, a, "k", ma)
	rkDup(t, b, "k", mb)
	// A keyed publish on a past the window evicts a's key only: b's
	// message and key stay.
	e.clock.Set(ma.EnqueuedAt.Add(rkWindow + time.Second))
	rkNew(t, a, "k", ma)
	require.Equal(t, 1, b.Stats().Ready)
	e.clock.Set(ma.EnqueuedAt) // back: nothing more is evicted on b
	rkDup(t, b, "k", mb)
}

// A key is remembered inside its window after the segment holding the
// original publish was reclaimed, across a reopen and a rebuild from the
// log alone; and forgotten past the window.
func TestKeySurvivesReclamationOfItsSegment(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	q := e.queue("jobs", rkPolicy)
	orig, err := q.PublishKeyed(ctx(t), "k", []byte("p"))
	require.NoError(t, err)
	d := mustReceiveOne(t, q)
	require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
	for range 4 {
		churnSegments(t, e.s, 3)
		require.NoError(t, e.s.Maintain())
	}
	require.Positive(t, e.s.Stats().BytesReclaimed)
	_, err = os.Stat(filepath.Join(e.dir, "0000000001.seg"))
	require.ErrorIs(t, err, os.ErrNotExist, "the segment of the original publish was reclaimed")
	e.clock.Advance(rkWindow / 2)
	rkDup(t, q, "k", orig, "after reclamation")
	e.reopen()
	q = e.queue("jobs", rkPolicy)
	rkDup(t, q, "k", orig, "after reclamation and reopen")
	s := rebuildFromLog(t, e.s, e.dir, e.opts)
	e.s = nil
	q, err = s.Queue("jobs", rkPolicy)
	require.NoError(t, err)
	rkDup(t, q, "k", orig, "after reclamation and rebuild")
	e.clock.Set(orig.EnqueuedAt.Add(rkWindow + time.Nanosecond))
	rkNew(t, q, "k", orig, "past the window")
}

// A clock that went backwards between runs evicts nothing.
func TestAKeySurvivesAClockSetBackBetweenRuns(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", rkPolicy)
	orig, err := q.PublishKeyed(ctx(t), "k", []byte("p"))
	require.NoError(t, err)
	// A later reading, by a plain publish far ahead.
	e.clock.Advance(10 * rkWindow)
	mustPublish(t, q, "later")
	for _, how := range []string{"reopen", "rebuild"} {
		e.clock.Set(orig.EnqueuedAt.Add(2 * rkWindow)) // behind the reading
		if how == "reopen" {
			e.reopen()
		} else {
			e.s = rebuildFromLog(t, e.s, e.dir, e.opts)
			t.Cleanup(func() { e.s = nil })
		}
		q = e.queue("jobs", rkPolicy)
		rkDup(t, q, "k", orig, "clock behind a reading, after "+how)
	}
}

// Capacity: a duplicate of a message is answered when the queue is full; a
// keyed publish refused as QueueFull is no duplicate when retried, also
// after a reopen and a rebuild.
func TestAKeyedPublishWhenFullIsAnsweredIfDuplicateAndForgottenIfShed(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	pol := policy(func(p *broker.PolicyValue) { p.DedupWindow = rkWindow; p.Capacity = 1 })
	q := e.queue("jobs", pol)
	orig, err := q.PublishKeyed(ctx(t), "a", []byte("p"))
	require.NoError(t, err)
	rkDup(t, q, "a", orig, "full queue")
	_, err = q.PublishKeyed(ctx(t), "b", []byte("p"))
	requireErrorIs(t, err, broker.QueueFull)
	require.EqualValues(t, 1, q.Stats().Shed)
	for _, how := range []string{"same run", "reopen", "rebuild"} {
		switch how {
		case "reopen":
			e.reopen()
		case "rebuild":
			e.s = rebuildFromLog(t, e.s, e.dir, e.opts)
			t.Cleanup(func() { e.s = nil })
		}
		q = e.queue("jobs", pol)
		_, err = q.PublishKeyed(ctx(t), "b", []byte("p"))
		require.ErrorIs(t, err, broker.QueueFull, how)
	}
	d := mustReceiveOne(t, q)
	require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
	m := rkNew(t, q, "b", orig, "retry after room")
	require.NotEqual(t, orig.ID, m.ID)
	rkDup(t, q, "b", m)
	rkDup(t, q, "a", orig, "acked, queue full again")
}

// Concurrent keyed publishes of one key make one message; every caller
// gets its ID.
func TestConcurrentPublishesOfOneKeyMakeOneMessage(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", rkPolicy)
	for round := range 20 {
		key := fmt.Sprintf("k%d", round)
		var wg sync.WaitGroup
		got := make([]broker.MessageValue, 8)
		for i := range got {
			wg.Go(func() {
				m, err := q.PublishKeyed(context.Background(), key, []byte("p"))
				if err != nil {
					t.Error(err)
				}
				got[i] = m
			})
		}
		wg.Wait()
		fresh := 0
		for _, m := range got {
			require.Equal(t, got[0].ID, m.ID, "round %d", round)
			if m.Payload != nil {
				fresh++
			}
		}
		require.Equal(t, 1, fresh, "round %d: one caller enqueued", round)
	}
	st := q.Stats()
	require.EqualValues(t, 20, st.Published)
	require.EqualValues(t, 20*7, st.Duplicates)
	require.Equal(t, 20, st.Ready)
}

// rkDrain receives every message of name in s and returns their payloads
// by ID.
func rkDrain(t *testing.T, s *broker.Store, name string, pol broker.PolicyValue) map[string]string {
	t.Helper()
	q, err := s.Queue(name, pol)
	require.NoError(t, err)
	in := map[string]string{}
	for {
		ds, err := q.Receive(ctx(t), 256)
		require.NoError(t, err)
		if len(ds) == 0 {
			return in
		}
		for _, d := range ds {
			in[d.Message.ID] = string(d.Message.Payload)
		}
	}
}

// A Backup taken while batches are published, messages acked and keyed
// messages published holds whole batches only, no message acknowledged
// before it began, and remembers every key it holds the publish of.
func TestBackupHoldsOneInstant(t *testing.T) {
	modes := []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}
	if testing.Short() {
		modes = modes[:1]
	}
	for _, mode := range modes {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			clock := newFakeClock()
			opts := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, Sync: mode}
			s, err := broker.Open(t.TempDir(), opts)
			require.NoError(t, err)
			defer s.Close()
			pol := policy(func(p *broker.PolicyValue) { p.DedupWindow = rkWindow; p.MaxMessageBytes = 1024 })
			q, err := s.Queue("jobs", pol)
			require.NoError(t, err)
			bat, err := s.Queue("batches", pol)
			require.NoError(t, err)
			var mu sync.Mutex
			acked := map[string]bool{}   // acknowledged (Ack returned)
			keyed := map[string]string{} // key -> ID
			stop := make(chan struct{})
			progress := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					batch := make([][]byte, 5)
					for j := range batch {
						batch[j] = []byte(fmt.Sprintf("b%d-%d-%s", i, j, bytes.Repeat([]byte("x"), 100)))
					}
					if _, err := bat.PublishBatch(context.Background(), batch); err != nil {
						t.Error(err)
						return
					}
				}
			})
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("key-%d", i)
					m, err := q.PublishKeyed(context.Background(), key, []byte("k"+key))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					keyed[key] = m.ID
					mu.Unlock()
					if i%50 == 49 {
						select {
						case progress <- struct{}{}:
						default:
						}
					}
				}
			})
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					ds, err := q.Receive(context.Background(), 7)
					if err != nil {
						t.Error(err)
						return
					}
					for _, d := range ds {
						if err := q.Ack(context.Background(), d.Lease.Receipt); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						acked[d.Message.ID] = true
						mu.Unlock()
					}
				}
			})
			root := t.TempDir()
			for n := range 3 {
				<-progress
				mu.Lock()
				ackedBefore := map[string]bool{}
				for id := range acked {
					ackedBefore[id] = true
				}
				keysBefore := map[string]string{}
				for k, id := range keyed {
					keysBefore[k] = id
				}
				mu.Unlock()
				dst := filepath.Join(root, fmt.Sprint(n))
				require.NoError(t, s.Backup(context.Background(), dst))
				b, err := broker.Open(dst, opts)
				require.NoError(t, err)
				bq, err := b.Queue("jobs", pol)
				require.NoError(t, err)
				for k, id := range keysBefore {
					m, err := bq.PublishKeyed(ctx(t), k, []byte("dup"))
					require.NoError(t, err)
					require.Equal(t, id, m.ID, "backup %d forgot key %s published before it began", n, k)
					require.Nil(t, m.Payload)
				}
				require.NoError(t, b.Close())
				// Once more, without the keyed duplicates: drain.
				require.NoError(t, os.RemoveAll(dst))
				require.NoError(t, s.Backup(context.Background(), dst))
				b, err = broker.Open(dst, opts)
				require.NoError(t, err)
				in := rkDrain(t, b, "jobs", pol)
				for id := range in {
					require.False(t, ackedBefore[id], "backup %d holds %s, acknowledged before it began", n, id)
				}
				batches := map[int]int{}
				for _, p := range rkDrain(t, b, "batches", pol) {
					var i, j int
					_, err := fmt.Sscanf(p, "b%d-%d-", &i, &j)
					require.NoError(t, err)
					batches[i]++
				}
				for i, c := range batches {
					require.Equal(t, 5, c, "backup %d holds %d messages of batch %d", n, c, i)
				}
				require.NoError(t, b.Close())
			}
			close(stop)
			wg.Wait()
		})
	}
}

// A Backup canceled part way, or failing with a full disk, leaves nothing
// that opens as a store, and the store goes on.
func TestInterruptedBackupLeavesNothing(t *testing.T) {
	e, ffs, jobs := faultyBackupEnv(t)
	root := t.TempDir()
	c, cancel := context.WithCancel(ctx(t))
	var once sync.Once
	ffs.Observe(func(ev vfs.Event) {
		if ev.Op == vfs.OpWrite && strings.Contains(ev.Name, ".partial") && strings.HasSuffix(ev.Name, ".seg") {
			once.Do(cancel)
		}
	})
	dst := filepath.Join(root, "canceled")
	err := e.s.Backup(c, dst)
	require.ErrorIs(t, err, context.Canceled)
	require.NoDirExists(t, dst)
	require.NoDirExists(t, dst+".partial")

	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, NameContains: ".partial", After: 2, Err: syscall.ENOSPC, ShortFraction: 0.5})
	dst = filepath.Join(root, "full")
	err = e.s.Backup(ctx(t), dst)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NoDirExists(t, dst)
	require.NoDirExists(t, dst+".partial")
	ffs.Clear()
	mustPublish(t, jobs, "goes on")
	require.NoError(t, e.s.Backup(ctx(t), dst))
	require.Equal(t, 101, mustStats(t, openEnvAtOpts(t, dst, broker.Options{SegmentBytes: broker.MinSegmentBytes}), "jobs").Ready)
}

func openEnvAtOpts(t *testing.T, dir string, opts broker.Options) *broker.Store {
	t.Helper()
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A Backup of a store whose log failed an fdatasync fails and writes
// nothing.
func TestBackupOfAPoisonedStore(t *testing.T) {
	e, ffs, jobs := faultyBackupEnv(t)
	ffs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: ".seg"})
	_, err := jobs.Publish(ctx(t), []byte("x"))
	require.Error(t, err)
	ffs.Clear()
	dst := filepath.Join(t.TempDir(), "b")
	err = e.s.Backup(ctx(t), dst)
	require.Error(t, err)
	require.ErrorIs(t, err, syscall.EIO)
	require.NoDirExists(t, dst)
	require.NoDirExists(t, dst+".partial")
}

// A backup taken after the segment of a key's publish was reclaimed
// remembers the key, opened from its checkpoint and rebuilt from its log
// alone; the copy then lives on (rotations, a reopen).
func TestBackupRemembersKeysAfterReclamation(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	q := e.queue("jobs", rkPolicy)
	var origs []broker.MessageValue
	for i := range 5 {
		m, err := q.PublishKeyed(ctx(t), fmt.Sprint("k", i), []byte("p"))
		require.NoError(t, err)
		origs = append(origs, m)
	}
	for range 4 {
		d := mustReceiveOne(t, q)
		require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
	}
	for range 4 {
		churnSegments(t, e.s, 3)
		require.NoError(t, e.s.Maintain())
	}
	e.clock.Advance(rkWindow / 2)
	dst := filepath.Join(t.TempDir(), "b")
	require.NoError(t, e.s.Backup(ctx(t), dst))
	for _, how := range []string{"checkpoint", "log alone"} {
		if how == "log alone" {
			require.NoError(t, os.RemoveAll(filepath.Join(dst, "index")))
		}
		b := openEnvAtOpts(t, dst, e.opts)
		bq, err := b.Queue("jobs", rkPolicy)
		require.NoError(t, err)
		for i, o := range origs {
			rkDup(t, bq, fmt.Sprint("k", i), o, how)
		}
		require.Equal(t, 1, bq.Stats().Ready, how)
		churnSegments(t, b, 3)
		require.NoError(t, b.Close())
	}
	b := openEnvAtOpts(t, dst, e.opts)
	bq, err := b.Queue("jobs", rkPolicy)
	require.NoError(t, err)
	rkDup(t, bq, "k0", origs[0], "after the copy lived on")
	e.clock.Set(origs[0].EnqueuedAt.Add(rkWindow + 1))
	rkNew(t, bq, "k0", origs[0], "past the window in the copy")
}

// The default window (DedupWindow 0) is six hours, from the original.
func TestAKeysDefaultWindowHoldsAcrossAReopen(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	q := e.queue("jobs", pol)
	orig, err := q.PublishKeyed(ctx(t), "k", []byte("p"))
	require.NoError(t, err)
	e.clock.Set(orig.EnqueuedAt.Add(broker.DefaultDedupWindow))
	rkDup(t, q, "k", orig)
	e.reopen()
	q = e.queue("jobs", pol)
	rkDup(t, q, "k", orig, "reopened")
	e.clock.Set(orig.EnqueuedAt.Add(broker.DefaultDedupWindow + 1))
	rkNew(t, q, "k", orig)
}

// Random keyed traffic, acks, clock steps (backwards too) and window
// changes across reopens: a store rebuilt from its log alone, and one
// opened from its checkpoint, answer every keyed publish as the store
// and a Memory model of the run.
func TestARebuildFromTheLogAgreesOnKeys(t *testing.T) {
	seed := envSeed(t, "WALBROKER_KEYS_SEED")
	t.Logf("WALBROKER_KEYS_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	windows := []time.Duration{time.Minute, 10 * time.Minute, time.Hour}
	pol := func(w time.Duration) broker.PolicyValue {
		return policy(func(p *broker.PolicyValue) { p.DedupWindow = w; p.MaxMessageBytes = 1024; p.Capacity = 20 })
	}
	w := windows[0]
	q := e.queue("jobs", pol(w))
	handed := map[string]bool{} // IDs of new messages handed out
	for round := range envCount(t, "WALBROKER_KEYS_ROUNDS", 30, 10) {
		for range 40 {
			switch r := rng.IntN(10); {
			case r < 5:
				m, err := q.PublishKeyed(ctx(t), fmt.Sprint("k", rng.IntN(30)), bytes.Repeat([]byte("x"), 200))
				if err == nil && m.Payload != nil {
					handed[m.ID] = true
				}
				if err != nil {
					require.ErrorIs(t, err, broker.QueueFull)
				}
			case r < 7:
				ds, err := q.Receive(ctx(t), 3)
				require.NoError(t, err)
				for _, d := range ds {
					require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
				}
			case r < 9:
				e.clock.Advance(time.Duration(rng.IntN(20)) * time.Minute)
			default:
				e.clock.Advance(-time.Duration(rng.IntN(30)) * time.Minute)
			}
		}
		if rng.IntN(4) == 0 {
			require.NoError(t, e.s.Maintain())
		}
		// Close, copy, and answer the same probes three ways.
		e.close()
		rebuilt := t.TempDir()
		copyTree(t, e.dir, rebuilt)
		require.NoError(t, os.RemoveAll(filepath.Join(rebuilt, "index")))
		if rng.IntN(3) == 0 {
			w = windows[rng.IntN(len(windows))]
		}
		e.open()
		q = e.queue("jobs", pol(w))
		r := openEnvAtOpts(t, rebuilt, e.opts)
		require.True(t, r.Recovery().IndexRebuilt)
		rq, err := r.Queue("jobs", pol(w))
		require.NoError(t, err)
		key := fmt.Sprint("k", rng.IntN(30))
		a, aerr := q.PublishKeyed(ctx(t), key, []byte("probe"))
		b, berr := rq.PublishKeyed(ctx(t), key, []byte("probe"))
		require.Equal(t, aerr == nil, berr == nil, "round %d key %s: %v / %v", round, key, aerr, berr)
		if berr == nil && b.Payload != nil {
			require.False(t, handed[b.ID], "round %d: the rebuilt store hands out %s again", round, b.ID)
		}
		if aerr == nil && a.Payload != nil {
			require.False(t, handed[a.ID], "round %d: the store hands out %s again", round, a.ID)
			handed[a.ID] = true
		}
		if aerr == nil {
			require.Equal(t, a.Payload == nil, b.Payload == nil, "round %d key %s: duplicate? checkpoint %s, log alone %s", round, key, a.ID, b.ID)
			if a.Payload == nil {
				require.Equal(t, a.ID, b.ID, "round %d key %s: checkpoint vs log alone", round, key)
			}
		}
		require.Equal(t, q.Stats().Ready, rq.Stats().Ready, "round %d", round)
		require.NoError(t, r.Close())
	}
}
