package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/brokertest"
	"github.com/walbroker/walbroker/internal/leakcheck"
)

// closeRaceLedger records what calls reported as done.
type closeRaceLedger struct {
	mu        sync.Mutex
	published map[string]bool // publish returned nil
	acked     map[string]bool // Ack returned nil
	deleted   map[string]bool // DeleteDeadLetter returned nil
	bad       []string        // errors that are neither Closed nor a domain refusal
}

func newCloseRaceLedger() *closeRaceLedger {
	return &closeRaceLedger{published: map[string]bool{}, acked: map[string]bool{}, deleted: map[string]bool{}}
}

func (l *closeRaceLedger) note(what string, err error, allowed ...error) bool {
	if err == nil {
		return true
	}
	if errors.Is(err, broker.Closed) {
		return false
	}
	for _, a := range allowed {
		if errors.Is(err, a) {
			return false
		}
	}
	l.mu.Lock()
	l.bad = append(l.bad, fmt.Sprintf("%s: %v", what, err))
	l.mu.Unlock()
	return false
}

// TestEveryCallRacingCloseEitherTakesEffectOrFailsWithClosed: Close races
// every method of Store and Queue at once (Publish, PublishKeyed,
// PublishBatch, Receive, Ack, Nack, Reject, Extend, DeadLetters, Replay,
// Delete, Stats, Wake, Queue, Queues, Backup, Err, and a Consume), under
// each sync mode, over small segments that rotate while it runs. It shows
// that each call either succeeds, and its effect is in the store after a
// reopen (nothing reported published is lost, nothing reported acked or
// deleted comes back, nothing unreported appears), or fails with an error
// wrapping Closed (or a refusal of its own, LeaseExpired, say); that
// nothing panics; that Consume returns Closed; and that no goroutine or
// file is left once Close returns. A guard: no other test races Close
// with every method at once. Under -short it runs one round per sync
// mode, and each round races Close for a shorter time.
func TestEveryCallRacingCloseEitherTakesEffectOrFailsWithClosed(t *testing.T) {
	rounds, race := 9, func(round int) time.Duration { return time.Duration(150+round*40) * time.Millisecond }
	if testing.Short() {
		rounds, race = 3, func(int) time.Duration { return 100 * time.Millisecond }
	}
	for round := range rounds {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			dir := t.TempDir()
			backups := t.TempDir()
			clock := brokertest.NewClock(t0)
			opts := broker.Options{Now: clock.Now, SegmentBytes: 64 << 10, Sync: broker.SyncMode(round % 3), SyncInterval: time.Millisecond}
			pol := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1000, RetryDelay: 0, MaxMessageBytes: 1024}
			pol2 := pol
			pol2.VisibilityTimeout = 2 * time.Minute
			before := leakcheck.Running()
			s, err := broker.Open(dir, opts)
			require.NoError(t, err)
			q, err := s.Queue("jobs", pol)
			require.NoError(t, err)
			led := newCloseRaceLedger()
			c := context.Background()
			for i := range 20 {
				m, err := q.Publish(c, []byte(fmt.Sprint("pre", i)))
				require.NoError(t, err)
				led.published[m.ID] = true
			}
			ds, err := q.Receive(c, 5)
			require.NoError(t, err)
			for _, d := range ds {
				require.NoError(t, q.Reject(c, d.Lease.Receipt, nil))
			}

			consumeDone := make(chan error, 1)
			cctx, cancel := context.WithCancel(c)
			defer cancel()
			go func() {
				consumeDone <- broker.Consume(cctx, q, func(context.Context, broker.DeliveryValue) error {
					return errors.New("nack it")
				}, broker.ConsumeOptions{})
			}()

			var stop atomic.Bool
			var wg sync.WaitGroup
			var backupN atomic.Int32
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
					for i := 0; !stop.Load() || i < 3; i++ {
						switch rng.IntN(14) {
						case 0:
							m, err := q.Publish(c, make([]byte, 300))
							if led.note("Publish", err) {
								led.mu.Lock()
								led.published[m.ID] = true
								led.mu.Unlock()
							}
						case 1:
							m, err := q.PublishKeyed(c, fmt.Sprint("k", rng.IntN(4)), []byte("k"))
							if led.note("PublishKeyed", err) && m.Payload != nil {
								led.mu.Lock()
								led.published[m.ID] = true
								led.mu.Unlock()
							}
						case 2:
							ms, err := q.PublishBatch(c, [][]byte{[]byte("b1"), []byte("b2")})
							if led.note("PublishBatch", err) {
								led.mu.Lock()
								for _, m := range ms {
									led.published[m.ID] = true
								}
								led.mu.Unlock()
							}
						case 3, 4:
							ds, err := q.Receive(c, 2)
							led.note("Receive", err)
							for _, d := range ds {
								switch rng.IntN(4) {
								case 0:
									if led.note("Ack", q.Ack(c, d.Lease.Receipt), broker.LeaseExpired) {
										led.mu.Lock()
										led.acked[d.Message.ID] = true
										led.mu.Unlock()
									}
								case 1:
									_, err := q.Nack(c, d.Lease.Receipt, nil)
									led.note("Nack", err, broker.LeaseExpired)
								case 2:
									led.note("Reject", q.Reject(c, d.Lease.Receipt, nil), broker.LeaseExpired)
								case 3:
									l, err := q.Extend(c, d.Lease.Receipt, time.Second)
									if led.note("Extend", err, broker.LeaseExpired) {
										_, err := q.Nack(c, l.Receipt, nil)
										led.note("Nack after Extend", err, broker.LeaseExpired)
									}
								}
							}
						case 5:
							dls, err := q.DeadLetters(c, 3)
							led.note("DeadLetters", err)
							for _, dl := range dls {
								if rng.IntN(2) == 0 {
									led.note("Replay", q.ReplayDeadLetter(c, dl.Message.ID), broker.DeadLetterNotFound)
								} else if led.note("Delete", q.DeleteDeadLetter(c, dl.Message.ID), broker.DeadLetterNotFound) {
									led.mu.Lock()
									led.deleted[dl.Message.ID] = true
									led.mu.Unlock()
								}
							}
						case 6:
							_ = q.Stats()
						case 7:
							_ = q.Wake()
						case 8:
							p := pol
							if rng.IntN(2) == 0 {
								p = pol2
							}
							_, err := s.Queue("jobs", p)
							led.note("Queue", err)
						case 9:
							_ = s.Queues()
						case 10:
							_ = s.Stats()
						case 11:
							if backupN.Add(1) <= 2 {
								err := s.Backup(c, filepath.Join(backups, fmt.Sprint(w, "-", i)))
								led.note("Backup", err)
							}
						case 12:
							_, err := s.Queue(fmt.Sprint("other", rng.IntN(3)), pol)
							led.note("Queue new", err)
						case 13:
							_ = s.Err()
						}
					}
				}()
			}
			time.Sleep(race(round))
			require.NoError(t, s.Close())
			stop.Store(true)
			wg.Wait()
			select {
			case err := <-consumeDone:
				require.ErrorIs(t, err, broker.Closed, "Consume returns Closed")
			case <-time.After(10 * time.Second):
				t.Fatal("Consume did not return after Close")
			}
			led.mu.Lock()
			require.Empty(t, led.bad, "calls racing Close failed with errors that are not Closed")
			led.mu.Unlock()
			require.NoError(t, leakcheck.Check(before, dir))

			s, err = broker.Open(dir, opts)
			require.NoError(t, err)
			defer s.Close()
			q, err = s.Queue("jobs", pol)
			require.NoError(t, err)
			clock.Advance(time.Hour)
			held := map[string]bool{}
			all, err := q.Receive(c, 1<<20)
			require.NoError(t, err)
			for _, d := range all {
				held[d.Message.ID] = true
			}
			dls, err := q.DeadLetters(c, 1<<20)
			require.NoError(t, err)
			for _, dl := range dls {
				held[dl.Message.ID] = true
			}
			var lost, resurrected []string
			for id := range led.published {
				if !led.acked[id] && !led.deleted[id] && !held[id] {
					lost = append(lost, id)
				}
			}
			for id := range held {
				if led.acked[id] || led.deleted[id] || !led.published[id] {
					resurrected = append(resurrected, id)
				}
			}
			sort.Strings(lost)
			sort.Strings(resurrected)
			t.Logf("published %d acked %d deleted %d held %d, store %+v", len(led.published), len(led.acked), len(led.deleted), len(held), s.Stats())
			require.Empty(t, lost, "published, never acked or deleted (as far as the calls said), but gone after reopen")
			require.Empty(t, resurrected, "acked, deleted or never reported published, yet held after reopen")
		})
	}
}
