package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/internal/sentinel"
)

// badClock wraps a fake clock so that a test can make one reading bad
// (zero time, or a panic) for both brokers at once.
type badClock struct {
	c    *fakeClock
	mode atomic.Int32 // 0 good, 1 zero time, 2 panic
}

func (r *badClock) Now() time.Time {
	switch r.mode.Load() {
	case 1:
		return time.Time{}
	case 2:
		panic("clock panic")
	}
	return r.c.Now()
}

type panicCause struct{}

func (panicCause) Error() string  { return "panics" }
func (panicCause) Reason() string { panic("boom") }

func errClassOf(err error) string {
	if err == nil {
		return "ok"
	}
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	s := sentinel.Of(err)
	if strings.HasPrefix(s, "other: ") {
		return "other"
	}
	return s
}

// TestMemoryAndStoreAgreeOnCausesBadClocksAndEndedContexts drives the existing
// differential with extra operations: more cause shapes, bad clock
// readings, ended/nil contexts, and closing both brokers at the end.
func TestMemoryAndStoreAgreeOnCausesBadClocksAndEndedContexts(t *testing.T) {
	seed := envSeed(t, "WALBROKER_MEMDIFF_SEED")
	t.Logf("seed %d; replay with WALBROKER_MEMDIFF_SEED=%d", seed, seed)
	for r := range 8 {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(r)))
		pol := randomPolicy(rng)
		pol.MaxDeliveries = 1 + rng.IntN(5)
		ok := t.Run(fmt.Sprint("run", r), func(t *testing.T) {
			rc := &badClock{}
			e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncNone })
			rc.c = e.clock
			starts := []time.Time{t0, time.Unix(-3600, 0), time.Unix(0, math.MaxInt64-int64(90*time.Second)), time.Unix(0, math.MinInt64+int64(time.Second))}
			start := starts[r%len(starts)]
			e.clock.Set(start)
			t.Logf("start %v", start)
			// reopen with the wrapped clock
			e.close()
			e.opts.Now = rc.Now
			e.open()
			d := &differential{t: t, rng: rng, clock: e.clock, e: e, pol: pol, fq: e.queue("jobs", pol),
				memID: map[string]string{}, latest: start, seen: map[string]int{}}
			mq, err := broker.NewMemory(pol, broker.MemoryOptions{Now: rc.Now})
			require.NoError(t, err)
			d.mq = mq
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("seed %d policy %+v; last ops:\n%s", seed, pol, strings.Join(d.history[max(len(d.history)-40, 0):], "\n"))
				}
			})
			causes := []error{nil, errors.New("plain"), broker.NewError("BAD", 0x01020304, "public", "private"),
				broker.DoNotRetry(nil), codeOnly{code: 7, text: "c"}, publicOnly{public: "pub", text: "p"},
				userClassified{reason: "USER_X", public: "up", private: "pp"}, (*broker.Error)(nil),
				panicCause{}, errors.Join(errors.New("a"), broker.NewError("JOINED", 9, "jp", "")),
				fmt.Errorf("wrap: %w", context.Canceled)}
			for range 400 {
				if t.Failed() {
					return
				}
				switch d.rng.IntN(10) {
				case 0, 1:
					l, _ := d.lease()
					c := causes[d.rng.IntN(len(causes))]
					d.history = append(d.history, fmt.Sprintf("t+%v nack cause %v", d.clock.Now().Sub(t0), c))
					fv, fe := d.fq.Nack(ctx(t), l.file, c)
					mv, me := d.mq.Nack(ctx(t), l.mem, c)
					require.Equal(t, errClassOf(fe), errClassOf(me), "Nack: file %v memory %v", fe, me)
					if fe == nil {
						require.Equal(t, fv.Deliveries, mv.Deliveries)
						require.Equal(t, fv.DeadLettered, mv.DeadLettered)
						require.Equal(t, fv.VisibleAt.UnixNano(), mv.VisibleAt.UnixNano())
					}
				case 2:
					l, _ := d.lease()
					c := causes[d.rng.IntN(len(causes))]
					d.history = append(d.history, fmt.Sprintf("t+%v reject cause %v", d.clock.Now().Sub(t0), c))
					fe, me := d.fq.Reject(ctx(t), l.file, c), d.mq.Reject(ctx(t), l.mem, c)
					require.Equal(t, errClassOf(fe), errClassOf(me), "Reject: file %v memory %v", fe, me)
				case 3:
					// one operation under a bad clock reading
					mode := int32(1 + d.rng.IntN(2))
					op := d.rng.IntN(6)
					d.history = append(d.history, fmt.Sprintf("t+%v badclock %d op %d", d.clock.Now().Sub(t0), mode, op))
					rc.mode.Store(mode)
					var fe, me error
					l, _ := d.lease()
					f, m := d.id()
					switch op {
					case 0:
						_, fe = d.fq.Publish(ctx(t), []byte("x"))
						_, me = d.mq.Publish(ctx(t), []byte("x"))
					case 1:
						_, fe = d.fq.Receive(ctx(t), 3)
						_, me = d.mq.Receive(ctx(t), 3)
					case 2:
						_, fe = d.fq.Nack(ctx(t), l.file, nil)
						_, me = d.mq.Nack(ctx(t), l.mem, nil)
					case 3:
						fe, me = d.fq.ReplayDeadLetter(ctx(t), f), d.mq.ReplayDeadLetter(ctx(t), m)
					case 4:
						_, fe = d.fq.PublishKeyed(ctx(t), "k1", []byte("y"))
						_, me = d.mq.PublishKeyed(ctx(t), "k1", []byte("y"))
					case 5:
						fw, mw := d.fq.Wake(), d.mq.Wake()
						require.Equal(t, fw.Scheduled, mw.Scheduled, "bad clock Wake.Scheduled")
						require.Equal(t, fw.In, mw.In, "bad clock Wake.In")
					}
					rc.mode.Store(0)
					require.Equal(t, errClassOf(fe), errClassOf(me), "bad clock op %d: file %v memory %v", op, fe, me)
					d.sameStats()
				case 4:
					c, cancel := context.WithCancel(context.Background())
					cancel()
					l, _ := d.lease()
					fe, me := d.fq.Ack(c, l.file), d.mq.Ack(c, l.mem)
					require.Equal(t, errClassOf(fe), errClassOf(me), "Ack ended ctx")
					_, fe = d.fq.Receive(c, 1)
					_, me = d.mq.Receive(c, 1)
					require.Equal(t, errClassOf(fe), errClassOf(me), "Receive ended ctx")
				case 5:
					fw, mw := d.fq.Wake(), d.mq.Wake()
					require.Equal(t, fw.Scheduled, mw.Scheduled, "Wake.Scheduled")
					require.Equal(t, fw.In, mw.In, "Wake.In")
					d.sameStats()
				default:
					d.step()
				}
				if n := d.clock.Now(); n.After(d.latest) {
					d.latest = n
				}
			}
			// Full comparison of dead letters at the end.
			fs, fe := d.fq.DeadLetters(ctx(t), 1000)
			ms, me := d.mq.DeadLetters(ctx(t), 1000)
			require.Equal(t, errClassOf(fe), errClassOf(me), "final DeadLetters: file %v memory %v", fe, me)
			require.Equal(t, len(fs), len(ms))
			for i := range fs {
				require.Equal(t, d.memID[fs[i].Message.ID], ms[i].Message.ID)
				require.Equal(t, fs[i].Reason, ms[i].Reason)
				require.Equal(t, fs[i].Code, ms[i].Code)
				require.Equal(t, fs[i].Cause, ms[i].Cause)
				require.Equal(t, fs[i].Deliveries, ms[i].Deliveries)
				require.Equal(t, fs[i].FailedAt.UnixNano(), ms[i].FailedAt.UnixNano())
			}
			d.sameStats()
			t.Logf("outcomes %v", d.seen)
		})
		if !ok {
			return
		}
	}
}

// TestANackCauseSurvivesAReopenBeforeTheLastLapse: a nack's cause is the last
// failure of the message's life; after a clean reopen (checkpoint, or
// rebuild from the log) and a lapse on the last delivery, the store's
// dead letter must record it exactly as a Memory does.
func TestANackCauseSurvivesAReopenBeforeTheLastLapse(t *testing.T) {
	for _, rebuild := range []bool{false, true} {
		t.Run(fmt.Sprint("rebuild=", rebuild), func(t *testing.T) {
			e := newEnv(t)
			pol := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2; p.RetryDelay = 0 })
			fq := e.queue("jobs", pol)
			mq := e.memoryWith(pol)
			cause := broker.NewError("SOME_FAIL", 0x01020304, "pub", "priv")
			for _, b := range []fullBroker{fq, mq} {
				_, err := b.Publish(ctx(t), []byte("a"))
				require.NoError(t, err)
				ds, err := b.Receive(ctx(t), 1)
				require.NoError(t, err)
				_, err = b.Nack(ctx(t), ds[0].Lease.Receipt, cause)
				require.NoError(t, err)
			}
			e.close()
			if rebuild {
				require.NoError(t, removeIndex(e.dir))
			}
			e.open()
			fq = e.queue("jobs", pol)
			for _, b := range []fullBroker{fq, mq} {
				ds, err := b.Receive(ctx(t), 1)
				require.NoError(t, err)
				require.Len(t, ds, 1)
				require.Equal(t, 2, ds[0].Deliveries)
			}
			e.clock.Advance(time.Minute)
			fd, err := fq.DeadLetters(ctx(t), 10)
			require.NoError(t, err)
			md, err := mq.DeadLetters(ctx(t), 10)
			require.NoError(t, err)
			require.Len(t, fd, 1)
			require.Len(t, md, 1)
			require.Equal(t, [3]any{md[0].Reason, md[0].Code, md[0].Cause}, [3]any{fd[0].Reason, fd[0].Code, fd[0].Cause})
		})
	}
}

func removeIndex(dir string) error { return os.RemoveAll(filepath.Join(dir, "index")) }

// TestTwoStoresAgreeThroughPolicyChangesAndReopens drives two stores with one
// random sequence (publish, receive, ack, nack, reject, extend, replay,
// delete, clock moves) plus policy re-declarations that raise or lower
// MaxDeliveries: store A is never reopened, store B is closed and
// reopened now and then (from its checkpoint or rebuilt from the log).
// A clean restart changes nothing a caller sees but the counters.
func TestTwoStoresAgreeThroughPolicyChangesAndReopens(t *testing.T) {
	seed := envSeed(t, "WALBROKER_POLICYDIFF_SEED")
	t.Logf("seed %d; replay with WALBROKER_POLICYDIFF_SEED=%d", seed, seed)
	for r := range 5 {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(r)+100))
		ok := t.Run(fmt.Sprint("run", r), func(t *testing.T) { policyChangeRun(t, rng) })
		if !ok {
			return
		}
	}
}

func policyChangeRun(t *testing.T, rng *rand.Rand) {
	clock := newFakeClock()
	mk := func() *env {
		e := &env{t: t, dir: t.TempDir(), clock: clock}
		e.opts = broker.Options{Now: clock.Now, SegmentBytes: testSegmentBytes, Sync: broker.SyncNone}
		t.Cleanup(func() {
			if e.s != nil {
				_ = e.s.Close()
			}
		})
		e.open()
		return e
	}
	ea, eb := mk(), mk()
	pol := randomPolicy(rng)
	pol.MaxDeliveries = 1 + rng.IntN(4)
	qa, qb := ea.queue("jobs", pol), eb.queue("jobs", pol)
	type pr struct{ a, b broker.ReceiptValue }
	var leases []pr
	idB := map[string]string{}
	var idsA []string
	var hist []string
	latest := clock.Now()
	var base broker.QueueStats
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last ops:\n%s", strings.Join(hist[max(len(hist)-40, 0):], "\n"))
		}
	})
	same := func(what string, fa, fb error) bool {
		t.Helper()
		require.Equal(t, errClassOf(fa), errClassOf(fb), "%s: A %v, B %v", what, fa, fb)
		return fa == nil
	}
	msg := func(what string, a, b broker.MessageValue) {
		t.Helper()
		if want, ok := idB[a.ID]; ok {
			require.Equal(t, want, b.ID, "%s: IDs", what)
		} else if a.ID != "" {
			idB[a.ID] = b.ID
			idsA = append(idsA, a.ID)
		}
		require.Equal(t, a.EnqueuedAt.UnixNano(), b.EnqueuedAt.UnixNano(), "%s: EnqueuedAt", what)
		require.Equal(t, string(a.Payload), string(b.Payload), "%s: payload", what)
	}
	lease := func() (pr, int) {
		if len(leases) == 0 {
			return pr{"x", "x"}, -1
		}
		i := rng.IntN(len(leases))
		if rng.IntN(3) != 0 {
			i = max(len(leases)-1-rng.IntN(3), 0)
		}
		return leases[i], i
	}
	causes := []error{nil, errors.New("plain"), broker.NewError("BAD", 0x01020304, "public", "private"),
		codeOnly{code: 7, text: "c"}, publicOnly{public: "pub", text: "p"}}
	c := ctx(t)
	for step := range 300 {
		if t.Failed() {
			return
		}
		op := rng.IntN(16)
		hist = append(hist, fmt.Sprintf("step %d t+%v op %d pol.MaxDeliveries %d", step, clock.Now().Sub(t0), op, pol.MaxDeliveries))
		switch op {
		case 0, 1:
			p := []byte(fmt.Sprint(rng.IntN(100)))
			a, fa := qa.Publish(c, p)
			b, fb := qb.Publish(c, p)
			if same("Publish", fa, fb) {
				msg("Publish", a, b)
			}
		case 2, 3:
			n := 1 + rng.IntN(3)
			as, fa := qa.Receive(c, n)
			bs, fb := qb.Receive(c, n)
			if same("Receive", fa, fb) {
				require.Equal(t, len(as), len(bs), "Receive count")
				for i := range as {
					msg("Receive", as[i].Message, bs[i].Message)
					require.Equal(t, as[i].Deliveries, bs[i].Deliveries, "Deliveries")
					require.LessOrEqual(t, as[i].Deliveries, pol.MaxDeliveries, "a delivery beyond MaxDeliveries %d", pol.MaxDeliveries)
					require.Equal(t, as[i].Lease.ExpiresAt.UnixNano(), bs[i].Lease.ExpiresAt.UnixNano())
					leases = append(leases, pr{as[i].Lease.Receipt, bs[i].Lease.Receipt})
				}
			}
		case 4:
			l, _ := lease()
			same("Ack", qa.Ack(c, l.a), qb.Ack(c, l.b))
		case 5, 6:
			l, _ := lease()
			cause := causes[rng.IntN(len(causes))]
			a, fa := qa.Nack(c, l.a, cause)
			b, fb := qb.Nack(c, l.b, cause)
			if same("Nack", fa, fb) {
				require.Equal(t, a.Deliveries, b.Deliveries)
				require.Equal(t, a.DeadLettered, b.DeadLettered)
				require.Equal(t, a.VisibleAt.UnixNano(), b.VisibleAt.UnixNano())
			}
		case 7:
			l, _ := lease()
			cause := causes[rng.IntN(len(causes))]
			same("Reject", qa.Reject(c, l.a, cause), qb.Reject(c, l.b, cause))
		case 8:
			l, i := lease()
			by := []time.Duration{time.Second, 45 * time.Second}[rng.IntN(2)]
			a, fa := qa.Extend(c, l.a, by)
			b, fb := qb.Extend(c, l.b, by)
			if same("Extend", fa, fb) {
				require.Equal(t, a.ExpiresAt.UnixNano(), b.ExpiresAt.UnixNano())
				leases[i] = pr{a.Receipt, b.Receipt}
			}
		case 9:
			as, fa := qa.DeadLetters(c, 100)
			bs, fb := qb.DeadLetters(c, 100)
			if same("DeadLetters", fa, fb) {
				require.Equal(t, len(as), len(bs), "DeadLetters count")
				for i := range as {
					msg("DeadLetters", as[i].Message, bs[i].Message)
					as[i].Message, bs[i].Message = broker.MessageValue{}, broker.MessageValue{}
					require.Equal(t, as[i].FailedAt.UnixNano(), bs[i].FailedAt.UnixNano(), "FailedAt")
					as[i].FailedAt, bs[i].FailedAt = time.Time{}, time.Time{}
					require.Equal(t, as[i], bs[i], "dead letter")
				}
			}
		case 10:
			if len(idsA) == 0 {
				continue
			}
			id := idsA[rng.IntN(len(idsA))]
			if rng.IntN(3) == 0 {
				same("Delete", qa.DeleteDeadLetter(c, id), qb.DeleteDeadLetter(c, idB[id]))
			} else {
				same("Replay", qa.ReplayDeadLetter(c, id), qb.ReplayDeadLetter(c, idB[id]))
			}
		case 11:
			clock.Advance(time.Duration(rng.IntN(40)) * time.Second / 2)
		case 12:
			if rng.IntN(2) == 0 {
				clock.Advance(-time.Duration(rng.IntN(20)) * time.Second)
			} else {
				clock.Advance(time.Duration(rng.IntN(40)) * time.Second / 2)
			}
		case 13:
			// re-declare with another MaxDeliveries
			np := pol
			np.MaxDeliveries = 1 + rng.IntN(4)
			hist = append(hist, fmt.Sprintf("  redeclare MaxDeliveries %d -> %d", pol.MaxDeliveries, np.MaxDeliveries))
			var fa, fb error
			qa, fa = ea.s.Queue("jobs", np)
			qb, fb = eb.s.Queue("jobs", np)
			require.NoError(t, fa)
			require.NoError(t, fb)
			pol = np
		case 14:
			sa, sb := qa.Stats(), addCounters(qb.Stats(), base)
			require.Equal(t, sa, sb, "Stats")
			wa, wb := qa.Wake(), qb.Wake()
			require.Equal(t, wa.Scheduled, wb.Scheduled, "Wake.Scheduled")
			require.Equal(t, wa.In, wb.In, "Wake.In")
		case 15:
			if clock.Now().Before(latest) {
				continue
			}
			rebuild := rng.IntN(2) == 0
			hist = append(hist, fmt.Sprintf("  reopen B (rebuild %v)", rebuild))
			base = addCounters(base, qb.Stats())
			before := broker.Dump(eb.s)
			eb.close()
			if rebuild {
				require.NoError(t, removeIndex(eb.dir))
			}
			eb.open()
			if rng.IntN(2) == 0 {
				np := pol
				np.MaxDeliveries = 1 + rng.IntN(4)
				hist = append(hist, fmt.Sprintf("  reopen with MaxDeliveries %d -> %d", pol.MaxDeliveries, np.MaxDeliveries))
				qa = ea.queue("jobs", np)
				pol = np
				qb = eb.queue("jobs", pol)
				qa.Stats()
				qb.Stats()
				break
			}
			qb = eb.queue("jobs", pol)
			requireSameState(t, before, broker.Dump(eb.s), fmt.Sprintf("reopen (rebuild %v)", rebuild))
			qa.Stats() // both observe the clock's latest reading, as the old process had
			qb.Stats()
		}
		if n := clock.Now(); n.After(latest) {
			latest = n
		}
		if len(leases) > 40 {
			leases = leases[len(leases)-40:]
		}
	}
}

// TestMemoryAndStoreAgreeThroughReclamation: the Memory differential on a
// store of the smallest segments, with payloads that fill them, explicit
// maintenance (checkpoints, copy-forward of live records, reclamation)
// and reopens (from the checkpoint, or rebuilt from the log), with nacks
// of every cause shape, so that restated states (a nack's recorded
// failure, leases, delays, dead letters) are compared with a Memory.
func TestMemoryAndStoreAgreeThroughReclamation(t *testing.T) {
	seed := envSeed(t, "WALBROKER_MEMDIFF_SEED")
	t.Logf("seed %d; replay with WALBROKER_MEMDIFF_SEED=%d", seed, seed)
	for r := range 4 {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(r)+1000))
		pol := randomPolicy(rng)
		pol.MaxDeliveries = 1 + rng.IntN(4)
		pol.MaxMessageBytes = 3000
		pol.Capacity = []int{0, 0, 10}[r%3]
		var copied, reclaimed int64
		ok := t.Run(fmt.Sprint("run", r), func(t *testing.T) {
			e := newEnv(t, func(o *broker.Options) {
				o.Sync = broker.SyncNone
				o.SegmentBytes = broker.MinSegmentBytes
				broker.ManualMaintenance(o)
			})
			d := newDifferential(t, e, rng, pol, seed, 40)
			c := ctx(t)
			causes := []error{nil, errors.New("plain"), broker.NewError("BAD", 0x01020304, "public", "private"),
				codeOnly{code: 7, text: "c"}, publicOnly{public: "pub", text: "p"}, broker.DoNotRetry(nil)}
			for range 600 {
				if t.Failed() {
					return
				}
				switch d.rng.IntN(12) {
				case 0, 1:
					p := make([]byte, d.rng.IntN(3200))
					for i := range p {
						p[i] = byte('a' + d.rng.IntN(26))
					}
					d.history = append(d.history, fmt.Sprintf("t+%v big publish %d", d.clock.Now().Sub(t0), len(p)))
					f, fe := d.fq.Publish(c, p)
					m, me := d.mq.Publish(c, p)
					if d.sameErr("Publish", fe, me) {
						d.sameMessage("Publish", f, m)
					}
				case 2:
					l, _ := d.lease()
					cause := causes[d.rng.IntN(len(causes))]
					d.history = append(d.history, fmt.Sprintf("t+%v nack %v", d.clock.Now().Sub(t0), cause))
					fv, fe := d.fq.Nack(c, l.file, cause)
					mv, me := d.mq.Nack(c, l.mem, cause)
					if d.sameErr("Nack", fe, me) {
						require.Equal(t, fv, mv, "Nack")
					}
				case 5, 6:
					// drain: receive some and ack all but one
					n := 1 + d.rng.IntN(6)
					fs, fe := d.fq.Receive(c, n)
					ms, me := d.mq.Receive(c, n)
					d.history = append(d.history, fmt.Sprintf("t+%v drain %d got %d", d.clock.Now().Sub(t0), n, len(fs)))
					if d.sameErr("Receive", fe, me) {
						require.Equal(t, len(fs), len(ms), "drain count")
						for i := range fs {
							d.sameMessage("drain", fs[i].Message, ms[i].Message)
							require.Equal(t, fs[i].Deliveries, ms[i].Deliveries)
							if i == 0 {
								d.leases = append(d.leases, pair{fs[i].Lease.Receipt, ms[i].Lease.Receipt})
								continue
							}
							d.sameErr("Ack", d.fq.Ack(c, fs[i].Lease.Receipt), d.mq.Ack(c, ms[i].Lease.Receipt))
						}
					}
					if d.rng.IntN(2) == 0 {
						fd, _ := d.fq.DeadLetters(c, 2)
						for _, x := range fd {
							d.sameErr("Delete", d.fq.DeleteDeadLetter(c, x.Message.ID), d.mq.DeleteDeadLetter(c, d.memID[x.Message.ID]))
						}
					}
				case 3:
					d.history = append(d.history, fmt.Sprintf("t+%v maintain", d.clock.Now().Sub(t0)))
					require.NoError(t, e.s.Maintain())
				case 4:
					if d.clock.Now().Before(d.latest) || d.rng.IntN(3) != 0 {
						continue
					}
					rebuild := d.rng.IntN(2) == 0
					d.history = append(d.history, fmt.Sprintf("t+%v reopen rebuild %v", d.clock.Now().Sub(t0), rebuild))
					d.base = addCounters(d.base, d.fq.Stats())
					copied += e.s.Stats().CopiedForward
					reclaimed += e.s.Stats().BytesReclaimed
					e.close()
					if rebuild {
						require.NoError(t, removeIndex(e.dir))
					}
					e.open()
					d.fq = e.queue("jobs", d.pol)
					d.fq.Stats()
					d.mq.Stats()
				default:
					d.step()
				}
				if n := d.clock.Now(); n.After(d.latest) {
					d.latest = n
				}
			}
			d.sameStats()
			fs, fe := d.fq.DeadLetters(c, 1000)
			ms, me := d.mq.DeadLetters(c, 1000)
			require.NoError(t, fe)
			require.NoError(t, me)
			require.Equal(t, len(fs), len(ms))
			for i := range fs {
				d.sameMessage("final DeadLetters", fs[i].Message, ms[i].Message)
				fs[i].Message, ms[i].Message = broker.MessageValue{}, broker.MessageValue{}
				require.Equal(t, fs[i].FailedAt.UnixNano(), ms[i].FailedAt.UnixNano())
				fs[i].FailedAt, ms[i].FailedAt = time.Time{}, time.Time{}
				require.Equal(t, fs[i], ms[i])
			}
			t.Logf("copied forward %d, reclaimed %d (earlier lives) + %+v", copied, reclaimed, e.s.Stats())
		})
		if !ok {
			return
		}
	}
}

// A replayed dead letter keeps its EnqueuedAt, and Receive orders by
// EnqueuedAt: it comes before every message enqueued after it, which is
// not every message published after it when the clock stepped back in
// between. Both brokers hand out the later publish, enqueued at an earlier
// instant, first.
func TestAReplayedDeadLetterComesBeforeWhatWasEnqueuedAfterIt(t *testing.T) {
	e := newEnv(t)
	for name, b := range e.storeAndMemory(policy()) {
		t.Run(name, func(t *testing.T) {
			c := ctx(t)
			e.clock.Set(t0.Add(time.Hour))
			a, err := b.Publish(c, []byte("A"))
			require.NoError(t, err)
			ds, err := b.Receive(c, 1)
			require.NoError(t, err)
			require.NoError(t, b.(broker.Rejecter).Reject(c, ds[0].Lease.Receipt, nil))
			e.clock.Advance(-10 * time.Second) // an NTP step back
			_, err = b.Publish(c, []byte("B")) // published after A, enqueued before it
			require.NoError(t, err)
			require.NoError(t, b.ReplayDeadLetter(c, a.ID))
			got, err := b.Receive(c, 2)
			require.NoError(t, err)
			require.Len(t, got, 2)
			require.Equal(t, []string{"B", "A"}, []string{string(got[0].Message.Payload), string(got[1].Message.Payload)}, "%s: oldest EnqueuedAt first", name)
		})
	}
}
