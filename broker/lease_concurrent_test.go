package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// leaser is what both brokers offer for this test.
type leaser interface {
	broker.Broker
	broker.LeaseExtender
}

// TestNoMessageIsDeliveredWhileItsLeaseIsLive runs consumers that receive,
// extend, ack, nack and abandon messages concurrently while the clock
// moves forward, and requires of every delivery that the message's
// previous lease (as last extended) had lapsed, or been nacked, by the
// instant it was leased again: Broker.Receive, "each returned message is
// invisible to every other consumer until its Lease expires".
func TestNoMessageIsDeliveredWhileItsLeaseIsLive(t *testing.T) {
	pol := policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout, p.RetryDelay, p.MaxDeliveries = 50*time.Millisecond, 0, 1000
	})
	type lease struct {
		id        string
		at, until time.Time // leased; the last ExpiresAt its holder was given
		nackedAt  time.Time // zero unless nacked
		ext       []string
	}
	run := func(t *testing.T, q leaser, clock *fakeClock) {
		for range 50 {
			_, err := q.Publish(ctx(t), []byte("x"))
			require.NoError(t, err)
		}
		var mu sync.Mutex
		var all []*lease
		c, cancel := context.WithTimeout(ctx(t), 2*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		wg.Go(func() {
			for c.Err() == nil {
				clock.Advance(7 * time.Millisecond)
				time.Sleep(50 * time.Microsecond)
			}
		})
		for w := range 4 {
			wg.Go(func() {
				for i := 0; c.Err() == nil; i++ {
					ds, err := q.Receive(c, 2)
					if err != nil {
						return
					}
					for _, d := range ds {
						l := &lease{id: d.Message.ID, at: d.Lease.ExpiresAt.Add(-pol.VisibilityTimeout), until: d.Lease.ExpiresAt}
						r := d.Lease.Receipt
						for range (i + w) % 3 {
							nl, err := q.Extend(ctx(t), r, 30*time.Millisecond)
							if err != nil {
								break
							}
							l.until, r = nl.ExpiresAt, nl.Receipt
							l.ext = append(l.ext, nl.ExpiresAt.Sub(t0).String())
						}
						switch (i + w) % 4 {
						case 0: // abandoned: the lease lapses
						case 1:
							if q.Ack(ctx(t), r) == nil {
								_, _ = q.Publish(ctx(t), []byte("x"))
							}
						default:
							nv, err := q.Nack(ctx(t), r, nil)
							if err == nil {
								l.nackedAt = nv.VisibleAt // RetryDelay 0: the nack's instant
							} else {
								require.True(t, errors.Is(err, broker.LeaseExpired), "%v", err)
							}
						}
						mu.Lock()
						all = append(all, l)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		byID := map[string][]*lease{}
		for _, l := range all {
			byID[l.id] = append(byID[l.id], l)
		}
		for id, ls := range byID {
			// Leases taken at one instant: one was nacked at that
			// instant before the other began.
			slices.SortFunc(ls, func(a, b *lease) int {
				if c := a.at.Compare(b.at); c != 0 {
					return c
				}
				end := func(l *lease) time.Time {
					if !l.nackedAt.IsZero() {
						return l.nackedAt
					}
					return l.until
				}
				return end(a).Compare(end(b))
			})
			for i := 1; i < len(ls); i++ {
				prev, next := ls[i-1], ls[i]
				end := prev.until
				if !prev.nackedAt.IsZero() && prev.nackedAt.Before(end) {
					end = prev.nackedAt
				}
				if next.at.Before(end) {
					var lines []string
					for _, l := range ls {
						lines = append(lines, fmt.Sprintf("at %v until %v nacked %v ext %v", l.at.Sub(t0), l.until.Sub(t0), l.nackedAt.Sub(t0), l.ext))
					}
					t.Fatalf("message %s leased at %v while its lease from %v was held until %v:\n%s",
						id, next.at.Sub(t0), prev.at.Sub(t0), end.Sub(t0), strings.Join(lines, "\n"))
				}
			}
		}
	}
	t.Run("memory", func(t *testing.T) {
		clock := newFakeClock()
		q, err := broker.NewMemory(pol, broker.MemoryOptions{Now: clock.Now})
		require.NoError(t, err)
		run(t, q, clock)
	})
	t.Run("file", func(t *testing.T) {
		e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncNone })
		run(t, e.queue("jobs", pol), e.clock)
	})
}
