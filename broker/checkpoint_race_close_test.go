package broker_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// liveModel is what a store acknowledged: every message published, and
// those whose ack returned nil.
type liveModel struct {
	mu        sync.Mutex
	published map[string]bool
	acked     map[string]bool
	keys      map[string]string // dedup key -> ID of the message that took it
}

func (m *liveModel) live() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for id := range m.published {
		if !m.acked[id] {
			out[id] = true
		}
	}
	return out
}

// Publishes with and without keys, Receive, Ack, Nack, Extend, Reject,
// ReplayDeadLetter and Stats run on their goroutines while checkpoints
// are written: two at a time (maintenance rounds racing), then one
// racing Close. Nothing fails but with Closed once Close began, the race
// detector finds nothing, and the reopened store holds exactly the
// messages published and not acknowledged, with every dedup key.
func TestCallsRacingCheckpointsAndCloseKeepTheAcknowledgedState(t *testing.T) {
	seed := envSeed(t, "WALBROKER_SEED")
	t.Logf("seed %d (WALBROKER_SEED replays it)", seed)
	// Small segments: the rounds also remove segments and copy messages
	// forward while the calls run.
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	pol := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1000; p.MaxMessageBytes = 2 << 10 })
	qs := []*broker.Queue{e.queue("a", pol), e.queue("b", pol)}
	model := &liveModel{published: map[string]bool{}, acked: map[string]bool{}, keys: map[string]string{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var errs []error
	report := func(what string, err error) {
		if err == nil || errors.Is(err, broker.Closed) {
			return
		}
		errMu.Lock()
		errs = append(errs, fmt.Errorf("%s: %w", what, err))
		errMu.Unlock()
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for w := range 4 {
		q := qs[w%2]
		wg.Add(2)
		go func() { // producer
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(2*w)))
			for i := 0; !stopped(); i++ {
				var m broker.MessageValue
				var err error
				key := ""
				if rng.IntN(3) == 0 {
					key = fmt.Sprintf("%s-k%d", q.Name(), rng.IntN(200))
					m, err = q.PublishKeyed(ctx(t), key, []byte("keyed"))
				} else {
					m, err = q.Publish(ctx(t), fmt.Appendf(make([]byte, 0, 600), "w%d-%d%0500d", w, i, 0))
				}
				report("publish", err)
				if err != nil {
					continue
				}
				model.mu.Lock()
				if key != "" {
					if id, ok := model.keys[key]; ok && id != m.ID {
						errMu.Lock()
						errs = append(errs, fmt.Errorf("key %s took %s, then %s", key, id, m.ID))
						errMu.Unlock()
					}
					model.keys[key] = m.ID
				}
				model.published[m.ID] = true
				model.mu.Unlock()
			}
		}()
		go func() { // consumer
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(2*w+1)))
			for !stopped() {
				ds, err := q.Receive(ctx(t), 1+rng.IntN(8))
				report("receive", err)
				for _, d := range ds {
					r := d.Lease.Receipt
					switch rng.IntN(6) {
					case 0:
						lv, err := q.Extend(ctx(t), r, time.Minute)
						report("extend", err)
						if err == nil {
							r = lv.Receipt
						}
						fallthrough
					case 1, 2:
						err := q.Ack(ctx(t), r)
						report("ack", err)
						if err == nil {
							model.mu.Lock()
							model.acked[d.Message.ID] = true
							model.mu.Unlock()
						}
					case 3:
						_, err := q.Nack(ctx(t), r, errors.New("again"))
						report("nack", err)
					case 4:
						report("reject", q.Reject(ctx(t), r, errors.New("dead")))
					case 5:
						// kept leased
					}
				}
				dls, err := q.DeadLetters(ctx(t), 4)
				report("dead letters", err)
				for _, dl := range dls {
					if rng.IntN(2) == 0 {
						err := q.ReplayDeadLetter(ctx(t), dl.Message.ID)
						if !errors.Is(err, broker.DeadLetterNotFound) { // another consumer replayed it first
							report("replay", err)
						}
					}
				}
				_ = q.Stats()
				_ = e.s.Stats()
			}
		}()
	}
	s := e.s
	for range envCount(t, "WALBROKER_ROUNDS", 30, 8) {
		var mw sync.WaitGroup
		for range 2 {
			mw.Add(1)
			go func() {
				defer mw.Done()
				report("maintain", s.Maintain())
			}()
		}
		mw.Wait()
		e.clock.Advance(500 * time.Millisecond)
	}
	var mw sync.WaitGroup
	mw.Add(2)
	go func() { defer mw.Done(); report("maintain racing close", s.Maintain()) }()
	go func() { defer mw.Done(); report("close", s.Close()) }()
	mw.Wait()
	close(stop)
	wg.Wait()
	e.s = nil
	require.Empty(t, errs)
	st := s.Stats()
	t.Logf("published %d, acknowledged %d; %d checkpoints, %d records copied forward, %d bytes reclaimed",
		len(model.published), len(model.acked), st.Checkpoints, st.CopiedForward, st.BytesReclaimed)
	require.Positive(t, st.Checkpoints)
	require.Empty(t, s.Stats().MaintenanceStopped)

	for range 2 {
		e.open()
		require.NoError(t, broker.VerifyIndex(e.s))
		e.clock.Advance(time.Hour) // every lease lapses, every delay ends
		got := map[string]bool{}
		for _, name := range []string{"a", "b"} {
			q := e.queue(name, pol)
			for _, dl := range mustDeadLetters(t, q) {
				got[dl.Message.ID] = true
			}
			for {
				ds := mustReceive(t, q, 1000)
				if len(ds) == 0 {
					break
				}
				for _, d := range ds {
					require.False(t, got[d.Message.ID], "message %s held twice", d.Message.ID)
					got[d.Message.ID] = true
				}
			}
			model.mu.Lock()
			for key, id := range model.keys {
				if key[0] != name[0] {
					continue
				}
				m, err := q.PublishKeyed(ctx(t), key, []byte("again"))
				require.NoError(t, err)
				require.Equal(t, id, m.ID, "dedup key %s", key)
			}
			model.mu.Unlock()
		}
		want := model.live()
		for id := range want {
			require.True(t, got[id], "message %s published, never acknowledged, is gone", id)
		}
		for id := range got {
			require.True(t, want[id], "message %s is back (acknowledged: %v)", id, model.acked[id])
		}
		// Receiving leased everything: close without acking, reopen, and
		// the same again from the checkpoint this Close wrote.
		e.close()
	}
}
