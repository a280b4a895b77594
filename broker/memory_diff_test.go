package broker_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/internal/sentinel"
)

// mdDiff drives a file-backed queue and a Memory with one seeded random
// sequence, under a random policy, comparing every answer exactly.
type mdDiff struct {
	t       *testing.T
	rng     *rand.Rand
	clock   *fakeClock
	pol     broker.PolicyValue
	fq      *broker.Queue
	mq      *broker.Memory
	leases  []pair
	memID   map[string]string
	fileIDs []string
	history []string
	e       *env
	reopens bool
	latest  time.Time
	base    broker.QueueStats // the counters of the file queue's earlier lives
}

func mdAddCounters(a, b broker.QueueStats) broker.QueueStats {
	a.Published += b.Published
	a.Duplicates += b.Duplicates
	a.Shed += b.Shed
	a.Delivered += b.Delivered
	a.Acked += b.Acked
	a.Nacked += b.Nacked
	a.Rejected += b.Rejected
	a.DeadLettered += b.DeadLettered
	a.Replayed += b.Replayed
	return a
}

func mdPolicy(rng *rand.Rand) broker.PolicyValue {
	p := broker.PolicyValue{
		VisibilityTimeout: []time.Duration{time.Second, 3 * time.Second, 30 * time.Second}[rng.IntN(3)],
		MaxDeliveries:     1 + rng.IntN(3),
		RetryDelay:        []time.Duration{-time.Second, 0, time.Second, 5 * time.Second}[rng.IntN(4)],
		Capacity:          []int{0, 1, 3, 10}[rng.IntN(4)],
		DedupWindow:       []time.Duration{0, time.Nanosecond, time.Second, time.Minute}[rng.IntN(4)],
		MaxMessageBytes:   []int{0, 8}[rng.IntN(2)],
	}
	if p.RetryDelay > 0 && rng.IntN(2) == 0 {
		p.MaxRetryDelay = 4 * p.RetryDelay
	}
	return p
}

func (d *mdDiff) errs(what string, fe, me error) bool {
	d.t.Helper()
	require.Equal(d.t, sentinel.Of(fe), sentinel.Of(me), "%s: errors differ: file %v, memory %v", what, fe, me)
	return fe == nil
}

func (d *mdDiff) msg(what string, f, m broker.MessageValue) {
	d.t.Helper()
	if want, ok := d.memID[f.ID]; ok {
		require.Equal(d.t, want, m.ID, "%s: IDs do not correspond", what)
	} else if f.ID != "" {
		d.memID[f.ID] = m.ID
		d.fileIDs = append(d.fileIDs, f.ID)
	}
	require.Equal(d.t, f.EnqueuedAt.UnixNano(), m.EnqueuedAt.UnixNano(), "%s: EnqueuedAt", what)
	require.Equal(d.t, string(f.Payload), string(m.Payload), "%s: payload", what)
	require.Equal(d.t, f.Payload == nil, m.Payload == nil, "%s: nil payload", what)
}

func (d *mdDiff) payload() []byte {
	return bytes.Repeat([]byte{byte('a' + d.rng.IntN(26))}, d.rng.IntN(10))
}

func (d *mdDiff) lease() (pair, int) {
	if len(d.leases) == 0 || d.rng.IntN(20) == 0 {
		return pair{"garbage", "garbage"}, -1
	}
	i := d.rng.IntN(len(d.leases))
	if d.rng.IntN(4) != 0 {
		i = max(len(d.leases)-1-d.rng.IntN(4), 0)
	}
	return d.leases[i], i
}

func (d *mdDiff) cause() error {
	return []error{nil, errors.New("plain"), broker.NewError("BAD", 0x01020304, "public", "private"), broker.DoNotRetry(nil),
		broker.DoNotRetry(broker.NewError("WORSE", 0x01020305, "pub2", "priv2"))}[d.rng.IntN(5)]
}

func (d *mdDiff) step() {
	t, c := d.t, ctx(d.t)
	op := d.rng.IntN(21)
	d.history = append(d.history, fmt.Sprintf("t+%v op %d", d.clock.Now().Sub(t0), op))
	switch op {
	case 0, 1:
		p := d.payload()
		f, fe := d.fq.Publish(c, p)
		m, me := d.mq.Publish(c, p)
		if d.errs("Publish", fe, me) {
			d.msg("Publish", f, m)
		}
	case 2, 3:
		key, p := fmt.Sprint("k", d.rng.IntN(4)), d.payload()
		f, fe := d.fq.PublishKeyed(c, key, p)
		m, me := d.mq.PublishKeyed(c, key, p)
		if d.errs("PublishKeyed", fe, me) {
			d.msg("PublishKeyed", f, m)
		}
	case 4:
		ps := make([][]byte, d.rng.IntN(5))
		for i := range ps {
			ps[i] = d.payload()
		}
		fs, fe := d.fq.PublishBatch(c, ps)
		ms, me := d.mq.PublishBatch(c, ps)
		if d.errs("PublishBatch", fe, me) {
			require.Equal(t, len(fs), len(ms))
			for i := range fs {
				d.msg("PublishBatch", fs[i], ms[i])
			}
		}
	case 5, 6:
		max := d.rng.IntN(5)
		if d.rng.IntN(10) == 0 {
			max = math.MaxInt
		}
		fs, fe := d.fq.Receive(c, max)
		ms, me := d.mq.Receive(c, max)
		if d.errs("Receive", fe, me) {
			require.Equal(t, len(fs), len(ms), "Receive(%d)", max)
			for i := range fs {
				d.msg("Receive", fs[i].Message, ms[i].Message)
				require.Equal(t, fs[i].Deliveries, ms[i].Deliveries, "Receive: Deliveries")
				require.Equal(t, fs[i].Lease.ExpiresAt.UnixNano(), ms[i].Lease.ExpiresAt.UnixNano(), "Receive: ExpiresAt")
				d.leases = append(d.leases, pair{fs[i].Lease.Receipt, ms[i].Lease.Receipt})
			}
		}
	case 7:
		l, _ := d.lease()
		d.errs("Ack", d.fq.Ack(c, l.file), d.mq.Ack(c, l.mem))
	case 8, 9:
		l, _ := d.lease()
		cause := d.cause()
		fv, fe := d.fq.Nack(c, l.file, cause)
		mv, me := d.mq.Nack(c, l.mem, cause)
		if d.errs("Nack", fe, me) {
			require.Equal(t, fv.Deliveries, mv.Deliveries, "Nack: Deliveries")
			require.Equal(t, fv.DeadLettered, mv.DeadLettered, "Nack: DeadLettered")
			require.Equal(t, fv.VisibleAt.UnixNano(), mv.VisibleAt.UnixNano(), "Nack: VisibleAt")
			require.Equal(t, fv.VisibleAt.IsZero(), mv.VisibleAt.IsZero(), "Nack: VisibleAt zero")
		}
	case 10:
		l, _ := d.lease()
		cause := d.cause()
		d.errs("Reject", d.fq.Reject(c, l.file, cause), d.mq.Reject(c, l.mem, cause))
	case 11:
		l, i := d.lease()
		by := []time.Duration{0, -1, time.Nanosecond, time.Second, 45 * time.Second, broker.MaxDeadlineOffset, math.MaxInt64}[d.rng.IntN(7)]
		fl, fe := d.fq.Extend(c, l.file, by)
		ml, me := d.mq.Extend(c, l.mem, by)
		if d.errs("Extend", fe, me) {
			require.Equal(t, fl.ExpiresAt.UnixNano(), ml.ExpiresAt.UnixNano(), "Extend: ExpiresAt")
			d.leases[i] = pair{fl.Receipt, ml.Receipt}
		}
	case 12:
		max := d.rng.IntN(6)
		fs, fe := d.fq.DeadLetters(c, max)
		ms, me := d.mq.DeadLetters(c, max)
		if d.errs("DeadLetters", fe, me) {
			require.Equal(t, len(fs), len(ms), "DeadLetters: count")
			for i := range fs {
				d.msg("DeadLetters", fs[i].Message, ms[i].Message)
				fs[i].Message, ms[i].Message = broker.MessageValue{}, broker.MessageValue{}
				require.Equal(t, fs[i].FailedAt.UnixNano(), ms[i].FailedAt.UnixNano(), "DeadLetters: FailedAt")
				fs[i].FailedAt, ms[i].FailedAt = time.Time{}, time.Time{}
				require.Equal(t, fs[i], ms[i], "DeadLetters")
			}
		}
	case 13:
		f, m := "7fffffffffffffff", "7fffffffffffffff"
		if len(d.fileIDs) > 0 && d.rng.IntN(10) != 0 {
			f = d.fileIDs[d.rng.IntN(len(d.fileIDs))]
			m = d.memID[f]
		}
		if d.rng.IntN(2) == 0 {
			d.errs("ReplayDeadLetter", d.fq.ReplayDeadLetter(c, f), d.mq.ReplayDeadLetter(c, m))
		} else {
			d.errs("DeleteDeadLetter", d.fq.DeleteDeadLetter(c, f), d.mq.DeleteDeadLetter(c, m))
		}
	case 14, 15:
		d.clock.Advance(time.Duration(d.rng.IntN(40)) * time.Second / 2)
	case 16:
		if d.rng.IntN(3) == 0 {
			d.clock.Advance(-time.Duration(d.rng.IntN(20)) * time.Second)
		}
		fw, mw := d.fq.Wake(), d.mq.Wake()
		require.Equal(t, fw.Scheduled, mw.Scheduled, "Wake.Scheduled")
		require.Equal(t, fw.In, mw.In, "Wake.In")
	case 17, 18:
		fs := d.fq.Stats()
		b := d.base
		b.Ready, b.Leased, b.Delayed, b.DeadLetters, b.OldestReady = 0, 0, 0, 0, time.Time{}
		require.Equal(t, mdAddCounters(fs, b), d.mq.Stats(), "Stats")
	case 20:
		// Only with the clock at its latest reading: after a restart on
		// a clock set back, a lapse observed before is not observed
		// (DESIGN.md, "Time": documented).
		if d.reopens && !d.clock.Now().Before(d.latest) && d.rng.IntN(3) == 0 {
			d.e.close()
			d.base = mdAddCounters(d.base, d.fq.Stats())
			d.e.open()
			d.fq = d.e.queue("jobs", d.pol)
			d.fq.Stats() // observe the clock at once, as the old process had
			d.mq.Stats()
		}
	case 19:
		// A receipt of the other broker.
		l, _ := d.lease()
		d.errs("Ack crossed", d.fq.Ack(c, l.mem), d.mq.Ack(c, l.file))
	}
	if n := d.clock.Now(); n.After(d.latest) {
		d.latest = n
	}
	if len(d.leases) > 50 {
		d.leases = d.leases[len(d.leases)-50:]
	}
}

func TestMemoryAndStoreAgreeUnderRandomPolicies(t *testing.T) { mdRandom(t, false) }

// TestMemoryAndStoreAgreeUnderRandomPolicies goes beyond
// TestMemoryBehavesAsFileStore's one policy: a random policy per run (MaxDeliveries
// 1-3, Capacity 0/1/3/10, DedupWindow 1ns/1s/1m/default, negative RetryDelay,
// backoff), exact Wake.In, Extend by MaxDeadlineOffset/MaxInt64,
// Receive(MaxInt), receipts crossed between the two brokers.
//
// TestMemoryAndStoreAgreeAcrossRestarts: the file store is closed
// and reopened now and then (only with the clock at its latest reading),
// with a Memory as the oracle, which it promises changes
// nothing a caller sees but its counters (since open): leases, receipts,
// retry delays and dedup keys survive a clean restart (API.md §2, §5.4).
func TestMemoryAndStoreAgreeAcrossRestarts(t *testing.T) { mdRandom(t, true) }

func mdRandom(t *testing.T, reopens bool) {
	seed := envSeed(t, "WALBROKER_MEMDIFF_SEED")
	runs := envCount(t, "WALBROKER_MEMDIFF_RUNS", 8, 3)
	t.Logf("seed %d (replay with WALBROKER_MEMDIFF_SEED=%d)", seed, seed)
	for r := range runs {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(r)))
		pol := mdPolicy(rng)
		ok := t.Run(fmt.Sprint("run", r), func(t *testing.T) {
			e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncNone })
			d := &mdDiff{t: t, rng: rng, clock: e.clock, pol: pol, fq: e.queue("jobs", pol), mq: e.memoryWith(pol), memID: map[string]string{}, e: e, reopens: reopens}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("seed %d run %d policy %+v; last ops:\n%s", seed, r, pol, strings.Join(d.history[max(len(d.history)-30, 0):], "\n"))
				}
			})
			for range 400 {
				d.step()
				if t.Failed() {
					return
				}
			}
		})
		if !ok {
			return
		}
	}
}

// TestTheClocksRangeIsTheOneDocumented: Options.Now and MemoryOptions.Now
// give the range of readings a broker records, to the nanosecond: the
// first and last instants of it are taken, one nanosecond outside is
// refused with QueueMisconfigured, by Open and by a Memory's Publish.
func TestTheClocksRangeIsTheOneDocumented(t *testing.T) {
	first := time.Date(1677, time.September, 21, 0, 12, 43, 145224192, time.UTC)
	last := time.Date(2262, time.April, 11, 23, 47, 16, 854775807, time.UTC)
	for _, c := range []struct {
		at time.Time
		ok bool
	}{{first, true}, {last, true}, {first.Add(-1), false}, {last.Add(1), false}} {
		at := c.at
		m, err := broker.NewMemory(policy(), broker.MemoryOptions{Now: func() time.Time { return at }})
		require.NoError(t, err)
		_, err = m.Publish(ctx(t), []byte("x"))
		require.NoError(t, m.Close())
		s, oerr := broker.Open(t.TempDir(), broker.Options{Now: func() time.Time { return at }})
		if oerr == nil {
			require.NoError(t, s.Close())
		}
		if c.ok {
			require.NoError(t, err, "Memory at %s", at.Format(time.RFC3339Nano))
			require.NoError(t, oerr, "Open at %s", at.Format(time.RFC3339Nano))
		} else {
			require.ErrorIs(t, err, broker.QueueMisconfigured, "Memory at %s", at.Format(time.RFC3339Nano))
			require.ErrorIs(t, oerr, broker.QueueMisconfigured, "Open at %s", at.Format(time.RFC3339Nano))
		}
	}
}
