package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/internal/leakcheck"
)

// ledger is what the calls returned, across goroutines.
type ledger struct {
	mu        sync.Mutex
	published map[string]string // id -> queue
	acked     map[string]bool
	deleted   map[string]bool
	unsure    map[string]bool // an Ack/Delete that failed with something other than Closed/LeaseExpired
}

func (l *ledger) add(m map[string]bool, id string) {
	l.mu.Lock()
	m[id] = true
	l.mu.Unlock()
}

// TestCallsBackupsAndConsumeMeetACloseAtRandom runs mixed calls on three queues of a
// store of the smallest segments (rotations, checkpoints, copies forward
// and removals all the time), with Backups, re-declarations, a Consume and
// a Stats reader beside them, and closes the store at a random moment.
// Checked: counters never go backwards; Close leaves no goroutine,
// descriptor or mapping; Consume returns Closed; each Backup (a checkpoint
// taken under load) holds one state opened from its checkpoint and
// rebuilt from its log; the reopened store holds every message a publish
// returned that no Ack or delete took, none twice, none that was acked or
// deleted, and none no publish returned. WALBROKER_CLOSE_STRESS_ROUNDS (default 6, 3 with
// -short) and WALBROKER_CLOSE_STRESS_SEED.
func TestCallsBackupsAndConsumeMeetACloseAtRandom(t *testing.T) {
	rounds := envCount(t, "WALBROKER_CLOSE_STRESS_ROUNDS", 6, 3)
	seed := envSeed(t, "WALBROKER_CLOSE_STRESS_SEED")
	t.Logf("seed %d", seed)
	for round := 0; round < rounds; round++ {
		closeAtRandomRound(t, seed+int64(round))
	}
}

func closeAtRandomRound(t *testing.T, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 11))
	mode := []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}[rng.IntN(3)]
	before := leakcheck.Running()
	dir := filepath.Join(t.TempDir(), "store")
	clock := newFakeClock()
	opts := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, Sync: mode, SyncInterval: time.Millisecond}
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	pol := broker.PolicyValue{VisibilityTimeout: 30 * time.Millisecond, RetryDelay: time.Millisecond, MaxDeliveries: 3,
		MaxMessageBytes: 512, DedupWindow: time.Second}
	names := []string{"a", "b", "c"}
	qs := map[string]*broker.Queue{}
	for _, n := range names {
		q, err := s.Queue(n, pol)
		require.NoError(t, err)
		qs[n] = q
	}
	l := &ledger{published: map[string]string{}, acked: map[string]bool{}, deleted: map[string]bool{}, unsure: map[string]bool{}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var problems sync.Map
	note := func(what string, err error) {
		if err == nil || errors.Is(err, broker.Closed) {
			return
		}
		problems.Store(what+": "+err.Error(), true)
	}
	bg := context.Background()
	for w := 0; w < 3; w++ {
		wrng := rand.New(rand.NewPCG(uint64(seed), uint64(100+w)))
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				n := names[wrng.IntN(len(names))]
				q := qs[n]
				payload := fmt.Appendf(nil, "w%d-%d-%0100d", w, i, i)
				switch wrng.IntN(3) {
				case 0:
					m, err := q.Publish(bg, payload)
					note("publish", err)
					if err == nil {
						l.mu.Lock()
						l.published[m.ID] = n
						l.mu.Unlock()
					}
				case 1:
					m, err := q.PublishKeyed(bg, strconv.Itoa(wrng.IntN(40)), payload)
					note("publishkeyed", err)
					if err == nil && m.Payload != nil {
						l.mu.Lock()
						l.published[m.ID] = n
						l.mu.Unlock()
					}
				case 2:
					ms, err := q.PublishBatch(bg, [][]byte{payload, payload, payload})
					note("batch", err)
					l.mu.Lock()
					for _, m := range ms {
						l.published[m.ID] = n
					}
					l.mu.Unlock()
				}
			}
		})
	}
	for w := 0; w < 3; w++ {
		wrng := rand.New(rand.NewPCG(uint64(seed), uint64(200+w)))
		wg.Go(func() {
			for !stop.Load() {
				q := qs[names[wrng.IntN(len(names))]]
				ds, err := q.Receive(bg, 1+wrng.IntN(6))
				note("receive", err)
				for _, d := range ds {
					want := d.Message.Payload
					if len(want) < 5 || want[0] != 'w' {
						problems.Store(fmt.Sprintf("receive %s: payload %q", d.Message.ID, want), true)
					}
					r := d.Lease.Receipt
					switch wrng.IntN(6) {
					case 0, 1:
						err := q.Ack(bg, r)
						if err == nil {
							l.add(l.acked, d.Message.ID)
						} else if !errors.Is(err, broker.Closed) && !errors.Is(err, broker.LeaseExpired) {
							l.add(l.unsure, d.Message.ID)
							note("ack", err)
						}
					case 2:
						_, err := q.Nack(bg, r, errors.New("x"))
						if err != nil && !errors.Is(err, broker.LeaseExpired) {
							note("nack", err)
						}
					case 3:
						err := q.Reject(bg, r, broker.NewError("BAD", 1, "bad", ""))
						if err != nil && !errors.Is(err, broker.LeaseExpired) {
							note("reject", err)
						}
					case 4:
						lv, err := q.Extend(bg, r, time.Duration(1+wrng.IntN(40))*time.Millisecond)
						if err != nil && !errors.Is(err, broker.LeaseExpired) {
							note("extend", err)
						}
						if err == nil && wrng.IntN(2) == 0 {
							if err := q.Ack(bg, lv.Receipt); err == nil {
								l.add(l.acked, d.Message.ID)
							} else if !errors.Is(err, broker.Closed) && !errors.Is(err, broker.LeaseExpired) {
								l.add(l.unsure, d.Message.ID)
								note("ack2", err)
							}
						}
					default: // let it lapse
					}
				}
			}
		})
	}
	wrng := rand.New(rand.NewPCG(uint64(seed), 300))
	wg.Go(func() {
		for !stop.Load() {
			q := qs[names[wrng.IntN(len(names))]]
			dls, err := q.DeadLetters(bg, 4)
			note("deadletters", err)
			for _, dl := range dls {
				if len(dl.Message.Payload) < 5 || dl.Message.Payload[0] != 'w' {
					problems.Store(fmt.Sprintf("deadletter %s: payload %q", dl.Message.ID, dl.Message.Payload), true)
				}
				if wrng.IntN(2) == 0 {
					err := q.DeleteDeadLetter(bg, dl.Message.ID)
					if err == nil {
						l.add(l.deleted, dl.Message.ID)
					} else if !errors.Is(err, broker.DeadLetterNotFound) {
						note("delete", err)
					}
				} else {
					err := q.ReplayDeadLetter(bg, dl.Message.ID)
					if err != nil && !errors.Is(err, broker.DeadLetterNotFound) {
						note("replay", err)
					}
				}
			}
		}
	})
	crng := rand.New(rand.NewPCG(uint64(seed), 400))
	wg.Go(func() {
		for !stop.Load() {
			clock.Advance(time.Duration(crng.IntN(5)) * time.Millisecond)
			time.Sleep(200 * time.Microsecond)
		}
	})
	// Backups taken under load: each is a checkpoint taken while calls are
	// between their appends and their index updates.
	var backups []string
	brng := rand.New(rand.NewPCG(uint64(seed), 500))
	wg.Go(func() {
		for i := 0; !stop.Load() && i < 3; i++ {
			time.Sleep(time.Duration(brng.IntN(100)) * time.Millisecond)
			b := filepath.Join(t.TempDir(), "backup")
			err := s.Backup(bg, b)
			note("backup", err)
			if err == nil {
				backups = append(backups, b)
			}
		}
	})
	// A Consume on queue c, stopped by Close.
	consumeErr := make(chan error, 1)
	var consumedAcks sync.Map
	copts := broker.ConsumeOptions{Concurrency: 1 + rng.IntN(3), Batch: 1 + rng.IntN(4), PollInterval: time.Millisecond}
	if rng.IntN(2) == 0 {
		copts.Prefetch = 1 + rng.IntN(6)
	}
	go func() {
		consumeErr <- broker.Consume(bg, qs["c"], func(_ context.Context, d broker.DeliveryValue) error {
			consumedAcks.Store(d.Message.ID, true)
			if d.Message.Payload[len(d.Message.Payload)-1]%3 == 0 {
				return errors.New("nope")
			}
			return nil
		}, copts)
	}()
	// Re-declarations racing everything.
	prng := rand.New(rand.NewPCG(uint64(seed), 600))
	wg.Go(func() {
		for !stop.Load() {
			p := pol
			p.MaxDeliveries = 2 + prng.IntN(3)
			_, err := s.Queue(names[prng.IntN(len(names))], p)
			note("declare", err)
			time.Sleep(time.Duration(prng.IntN(20)) * time.Millisecond)
		}
	})
	// Counters never go backwards.
	wg.Go(func() {
		prev := map[string]broker.QueueStats{}
		var prevStore broker.StoreStats
		for !stop.Load() {
			for _, n := range names {
				st := qs[n].Stats()
				p := prev[n]
				if st.Published < p.Published || st.Acked < p.Acked || st.Nacked < p.Nacked || st.DeadLettered < p.DeadLettered ||
					st.Delivered < p.Delivered || st.Rejected < p.Rejected || st.Replayed < p.Replayed || st.Duplicates < p.Duplicates {
					problems.Store(fmt.Sprintf("queue %s stats went backwards: %+v then %+v", n, p, st), true)
				}
				prev[n] = st
			}
			ss := s.Stats()
			if ss.Checkpoints < prevStore.Checkpoints || ss.BytesReclaimed < prevStore.BytesReclaimed || ss.Records < prevStore.Records || ss.Commits < prevStore.Commits {
				problems.Store(fmt.Sprintf("store stats went backwards: %+v then %+v", prevStore, ss), true)
			}
			prevStore = ss
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
	cerr := s.Close()
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-consumeErr:
		if !errors.Is(err, broker.Closed) {
			t.Errorf("seed %d: Consume after Close returned %v", seed, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("seed %d: Consume did not return after Close", seed)
	}
	require.NoError(t, cerr, "seed %d", seed)
	st := s.Stats()
	problems.Range(func(k, _ any) bool { t.Errorf("seed %d mode %v: %v", seed, mode, k); return true })
	if err := leakcheck.Check(before, dir); err != nil {
		t.Errorf("seed %d: after Close: %v", seed, err)
	}

	consumedAcks.Range(func(k, _ any) bool { l.unsure[k.(string)] = true; return true })
	// Each backup: opened from its checkpoint, and rebuilt from its
	// whole log, it holds one state.
	for i, b := range backups {
		a := filepath.Join(t.TempDir(), "a")
		r := filepath.Join(t.TempDir(), "r")
		require.NoError(t, os.CopyFS(a, os.DirFS(b)))
		require.NoError(t, os.CopyFS(r, os.DirFS(b)))
		require.NoError(t, os.RemoveAll(filepath.Join(r, "index")))
		sa, err := broker.Open(a, opts)
		require.NoError(t, err)
		sr, err := broker.Open(r, opts)
		require.NoError(t, err)
		require.True(t, sr.Recovery().IndexRebuilt)
		da, dr := broker.Dump(sa), broker.Dump(sr)
		require.NoError(t, sa.Close())
		require.NoError(t, sr.Close())
		requireSameState(t, dr, da, fmt.Sprintf("seed %d backup %d: from its checkpoint vs rebuilt from its log", seed, i))
	}
	// Reopen and compare.
	clock.Advance(time.Hour)
	s2, err := broker.Open(dir, opts)
	require.NoError(t, err, "seed %d", seed)
	defer s2.Close()
	found := map[string]string{}
	dup := []string{}
	for _, n := range names {
		q, err := s2.Queue(n, broker.PolicyValue{VisibilityTimeout: time.Hour, RetryDelay: time.Millisecond, MaxDeliveries: 3, MaxMessageBytes: 512, DedupWindow: time.Second})
		require.NoError(t, err)
		for {
			ds, err := q.Receive(bg, 100)
			require.NoError(t, err)
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				if _, ok := found[d.Message.ID]; ok {
					dup = append(dup, d.Message.ID)
				}
				found[d.Message.ID] = n
			}
		}
		dls, err := q.DeadLetters(bg, 1<<20)
		require.NoError(t, err)
		for _, dl := range dls {
			if _, ok := found[dl.Message.ID]; ok {
				dup = append(dup, dl.Message.ID)
			}
			found[dl.Message.ID] = n
		}
	}
	require.Empty(t, dup, "seed %d: messages found twice", seed)
	var missing, unexpected, ackedFound []string
	for id, n := range l.published {
		if l.acked[id] || l.deleted[id] || l.unsure[id] {
			continue
		}
		if found[id] != n {
			missing = append(missing, id+"@"+n+"->"+found[id])
		}
	}
	for id := range found {
		if _, ok := l.published[id]; !ok {
			unexpected = append(unexpected, id)
		}
		if l.acked[id] || l.deleted[id] {
			ackedFound = append(ackedFound, id)
		}
	}
	sort.Strings(missing)
	sort.Strings(unexpected)
	sort.Strings(ackedFound)
	require.Empty(t, missing, "seed %d mode %v: published and not acked, missing after reopen", seed, mode)
	require.Empty(t, ackedFound, "seed %d mode %v: acked/deleted but present after reopen", seed, mode)
	require.Empty(t, unexpected, "seed %d mode %v: present but no publish returned it", seed, mode)
	t.Logf("seed %d mode %v: %d published, %d acked, %d deleted, %d found; checkpoints %d reclaimed %d copied %d",
		seed, mode, len(l.published), len(l.acked), len(l.deleted), len(found), st.Checkpoints, st.BytesReclaimed, st.CopiedForward)
}
