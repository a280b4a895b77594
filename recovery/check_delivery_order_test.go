package recovery

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// certainAt is a certain delivery of id on its del-th delivery by
// consumer who, Receive running from at to at, leased for the work
// queue's visibility timeout.
func certainAt(who, id, ref string, base int64, del int, at int64, intent Intent) Entry {
	e := maybeAt(who, id, ref, base, del, at, intent)
	e.Op = OpDelivered
	return e
}

// certainJournal is the journal of a child under SyncAll: message id
// published, then the entries given.
func certainJournal(id, ref string, base int64, entries ...Entry) []Entry {
	return append([]Entry{
		{Op: OpStart, Cycle: 1, Sync: broker.SyncAll.String()},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
	}, entries...)
}

// twoLeases is the timeline the tests below share: message id of the
// work queue, published with ref, handed out as delivery 1 at at1 and, once
// that lease (vt) lapsed, as delivery 2 at at2, base being a minute ago and
// ms a millisecond, all in nanoseconds.
func twoLeases(id string) (_, ref string, base, ms, vt, at1, at2 int64) {
	ref = MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base = time.Now().Add(-time.Minute).UnixNano()
	ms = int64(time.Millisecond)
	p, _ := Policy(QueueWork)
	vt = int64(p.VisibilityTimeout)
	at1 = base + ms
	at2 = at1 + vt + 10*ms // after delivery 1's lease lapsed
	return id, ref, base, ms, vt, at1, at2
}

// TestALaterDeliveryKeepsItsLeaseAndCountWhenAnEarlierOneIsReadAfterIt:
// one process hands a message out as delivery 1 (to con0) and, once that
// lease lapsed, as delivery 2 (to con1), both certain. Had con0 read its
// clock late after Receive (stalled past the lease), the checker learns
// of delivery 1 after delivery 2; it checks it where it was handed out,
// first, and reports nothing of it. Delivery 2's count and lease bind
// what follows: a delivery 3 inside its lease, or a later delivery
// counting 2 again, is a fault, whichever consumer read its clock last;
// a delivery 3 after its lease is sound.
func TestALaterDeliveryKeepsItsLeaseAndCountWhenAnEarlierOneIsReadAfterIt(t *testing.T) {
	id, ref, base, ms, vt, at1, at2 := twoLeases("00000000000000c4")

	for _, order := range []struct {
		name string
		late int64 // how long after delivery 1's Receive con0 read the clock
	}{
		{"delivery 1 read first", 0},
		{"delivery 1 read after delivery 2", vt + 200*ms},
	} {
		for _, next := range []struct {
			name string
			del  int
			at   int64
			want string // what it must be reported for; "" if sound
		}{
			{"delivery 3 inside delivery 2's lease", 3, at2 + vt/2, "before the previous lease expired"},
			{"delivery 2 again after its lease lapsed", 2, at2 + vt + 10*ms, "delivery count 2; an earlier delivery already counted 2"},
			{"control: delivery 3 after delivery 2's lease lapsed", 3, at2 + vt + 10*ms, ""},
		} {
			t.Run(order.name+"/"+next.name, func(t *testing.T) {
				first := certainAt("con0", id, ref, base, 1, at1, IntentHold)
				first.T1 += order.late
				c := checkerWithoutStores(t)
				c.AddCycle(1, certainJournal(id, ref, base,
					first,
					certainAt("con1", id, ref, base, 2, at2, IntentHold),
					certainAt("con1", id, ref, base, next.del, next.at, IntentHold)))

				if next.want == "" {
					require.NoError(t, c.Err())
					return
				}
				var found bool
				for _, v := range c.violations {
					if strings.Contains(v.What, next.want) {
						found = true
					} else {
						t.Errorf("unexpected report: %s", v)
					}
				}
				require.True(t, found, "want a report %q (delivery 1 read its clock %v late); reports: %v",
					next.want, time.Duration(order.late), c.violations)
			})
		}
	}
}

// TestTheLatestDeliveryKeepsItsIntentWhenAnEarlierOneIsReadAfterIt: as
// above, with the kill coming before either consumer settled its
// delivery. Only con1's intent can still be carried out: con0's lease
// lapsed before delivery 2, so its Ack would be refused. A store after
// the kill that no longer holds the message is right if con1 meant to ack
// delivery 2, and has lost it if only con0 meant to ack delivery 1,
// whichever consumer read its clock last, and whether delivery 1 was
// journaled as certain or only as a maybe (its certain entry not yet
// written). Nor does the intent of delivery 1 lift delivery 2's lease
// for the nack con1 meant: a delivery 3 after that nack's retry delay is
// sound, and one before it a fault.
func TestTheLatestDeliveryKeepsItsIntentWhenAnEarlierOneIsReadAfterIt(t *testing.T) {
	id, ref, base, ms, vt, at1, at2 := twoLeases("00000000000000c5")

	orders := []struct {
		name  string
		late  int64 // how long after delivery 1's Receive con0 read the clock
		maybe bool  // delivery 1 is journaled only as a maybe
	}{
		{"delivery 1 read first", 0, false},
		{"delivery 1 read after delivery 2", vt + 200*ms, false},
		{"delivery 1, a maybe, read after delivery 2", vt + 200*ms, true},
	}
	journal := func(late int64, maybe bool, intent1, intent2 Intent, more ...Entry) []Entry {
		first := certainAt("con0", id, ref, base, 1, at1, intent1)
		first.T1 += late
		if maybe {
			first.Op = OpMaybe
		}
		return certainJournal(id, ref, base, append([]Entry{first, certainAt("con1", id, ref, base, 2, at2, intent2)}, more...)...)
	}
	for _, order := range orders {
		for _, tc := range []struct {
			name             string
			intent1, intent2 Intent
			lost             bool // the store without the message lost it
		}{
			{"con1 meant to ack delivery 2", IntentHold, IntentAck, false},
			{"only con0 meant to ack delivery 1", IntentAck, IntentHold, true},
		} {
			t.Run(order.name+"/"+tc.name, func(t *testing.T) {
				c := checkerWithoutStores(t)
				c.AddCycle(1, journal(order.late, order.maybe, tc.intent1, tc.intent2))
				require.NoError(t, c.Err())
				_ = c.CheckDrain(storeWithQueues(t, QueueNames...))
				after := c.violations
				if tc.lost {
					require.Len(t, after, 1, "the store after the kill lost the message: %v", after)
					require.Contains(t, after[0].What, "lost: ")
				} else {
					require.Empty(t, after, "con1's Ack of delivery 2 was in flight at the kill and may have happened")
				}
			})
		}

		nackFloor := at2 + int64(retryDelay(QueueWork, 2))
		for _, next := range []struct {
			name string
			at   int64
			want bool // delivery 3 is a fault
		}{
			{"delivery 3 before the retry delay of the nack meant for delivery 2", nackFloor - 5*ms, true},
			{"control: delivery 3 after the retry delay of the nack meant for delivery 2", nackFloor + 5*ms, false},
		} {
			t.Run(order.name+"/"+next.name, func(t *testing.T) {
				c := checkerWithoutStores(t)
				c.AddCycle(1, journal(order.late, order.maybe, IntentHold, IntentNack,
					certainAt("con1", id, ref, base, 3, next.at, IntentHold)))
				var found bool
				for _, v := range c.violations {
					switch {
					case strings.Contains(v.What, "(delivery 3,") && strings.Contains(v.What, "before the previous lease expired"):
						found = true
					default:
						t.Errorf("unexpected report: %s", v)
					}
				}
				require.Equal(t, next.want, found, "delivery 3 came %v after delivery 2, whose consumer meant to nack it; reports: %v",
					time.Duration(next.at-at2), c.violations)
			})
		}
	}
}

// TestARejectInFlightOfTheLatestDeliveryHoldsWhenAnEarlierOneIsReadAfterIt:
// con1's Reject of delivery 2 was in flight at the kill, and the store
// after it shows the dead letter: the reject happened (it failed within
// delivery 2's lease, so it is no lapse), and the message stays dead. A
// later store that has it back in the queue broke that, and one that
// still shows the dead letter is right, whichever of con0 and con1 read
// the clock last.
func TestARejectInFlightOfTheLatestDeliveryHoldsWhenAnEarlierOneIsReadAfterIt(t *testing.T) {
	ctx := context.Background()
	p, _ := Policy(QueueWork)
	vt := p.VisibilityTimeout
	dir := t.TempDir()
	clk := &stepClock{now: time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)}
	s, q := openQueueAt(t, dir, QueueWork, clk.Now)
	m, entries := publishJournaled(t, q)
	var ds [2]broker.DeliveryValue
	for i := range ds {
		clk.Set(clk.Now().Add(vt + 10*time.Millisecond))
		got, err := q.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, i+1, got[0].Deliveries)
		ds[i] = got[0]
	}
	at1, at2 := ds[0].Lease.ExpiresAt.Add(-vt).UnixNano(), ds[1].Lease.ExpiresAt.Add(-vt).UnixNano()
	leased := t.TempDir()
	require.NoError(t, CopyTree(dir, leased))
	clk.Set(clk.Now().Add(100 * time.Millisecond))
	require.NoError(t, q.Reject(ctx, ds[1].Lease.Receipt, causeFor(QueueWork, IntentReject)))
	require.NoError(t, s.Close())

	for _, order := range []struct {
		name string
		late int64 // how long after delivery 1's Receive con0 read the clock
	}{
		{"delivery 1 read first", 0},
		{"delivery 1 read after delivery 2", int64(vt + 200*time.Millisecond)},
	} {
		for _, later := range []struct {
			name  string
			store string
			want  string // what it must be reported for; "" if right
		}{
			{"a later store has it back in the queue", leased, "after it was dead-lettered"},
			{"control: a later store still shows the dead letter", dir, ""},
		} {
			t.Run(order.name+"/"+later.name, func(t *testing.T) {
				c := checkerWithoutStores(t)
				c.AddCycle(1, append(slices.Clone(entries),
					deliveredEntry("con0", QueueWork, ds[0], IntentHold, at1, at1+order.late),
					deliveredEntry("con1", QueueWork, ds[1], IntentReject, at2, at2)))
				// Drain a copy: a drain takes what it receives.
				dead := t.TempDir()
				require.NoError(t, CopyTree(dir, dead))
				require.NoError(t, c.CheckDrain(dead), "the reject in flight at the kill happened")
				before := len(c.violations)

				c.AddCycle(2, []Entry{{Op: OpStart, Cycle: 2, Sync: "all"}})
				cp := t.TempDir()
				require.NoError(t, CopyTree(later.store, cp))
				_ = c.CheckDrain(cp)
				after := c.violations[before:]
				if later.want == "" {
					require.Empty(t, after, "message %s is still the rejected dead letter of delivery 2", m.ID)
					return
				}
				require.NotEmpty(t, after, "message %s was the rejected dead letter of delivery 2 after the kill that left the reject in flight, and a later store delivers it", m.ID)
				require.Contains(t, after[0].What, later.want)
			})
		}
	}
}

// TestADeliveryReadAfterAReplayBindsNothingOfTheNextLife: con0 received
// delivery 1 and stalled past its lease; con1 received delivery 2 and
// rejected it, the janitor replayed the dead letter, and con1 received
// the message again as delivery 1 of its next life, then as delivery 2.
// Had con0 read its clock after the replay (and perhaps after the next
// life's first delivery), its delivery still belongs to the life before,
// is checked there, and binds nothing of the next: a delivery 2 inside
// the next life's first lease is a fault, and one after it is sound,
// whenever con0 read its clock.
func TestADeliveryReadAfterAReplayBindsNothingOfTheNextLife(t *testing.T) {
	id, ref, base, ms, vt, at1, at2 := twoLeases("00000000000000c6")
	read := at2 + 5*ms // the janitor read the dead letter
	at3 := at2 + 10*ms // the next life's first delivery
	reason := Reason(QueueWork, IntentReject)
	code, cause, _ := recordedCause(QueueWork, reason)

	for _, order := range []struct {
		name string
		t1   int64 // when con0 read the clock after Receive returned
	}{
		{"delivery 1 read first", at1},
		{"delivery 1 read after the replay", read + ms},
		{"delivery 1 read after the next life's first delivery", at3 + 5*ms},
	} {
		for _, next := range []struct {
			name string
			at   int64
			want bool // the next life's delivery 2 is a fault
		}{
			{"the next life's delivery 2 inside its first lease", at3 + vt/2, true},
			{"control: the next life's delivery 2 after its first lease lapsed", at3 + vt + 10*ms, false},
		} {
			t.Run(order.name+"/"+next.name, func(t *testing.T) {
				first := certainAt("con0", id, ref, base, 1, at1, IntentHold)
				first.T1 = order.t1
				c := checkerWithoutStores(t)
				c.AddCycle(1, certainJournal(id, ref, base,
					first,
					certainAt("con1", id, ref, base, 2, at2, IntentReject),
					Entry{Op: OpRejected, Who: "con1", Queue: QueueWork, ID: id, Del: 2, T0: at2 + ms, T1: at2 + 2*ms},
					Entry{Op: OpReplaying, Who: "janitor", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 2,
						Reason: reason, Code: code, Cause: cause, Failed: at2 + ms, T0: read, T1: read},
					Entry{Op: OpReplayed, Who: "janitor", Queue: QueueWork, ID: id, T0: read, T1: read + ms},
					certainAt("con1", id, ref, base, 1, at3, IntentHold),
					certainAt("con1", id, ref, base, 2, next.at, IntentHold)))

				var found bool
				for _, v := range c.violations {
					switch {
					case strings.Contains(v.What, "(delivery 2,") && strings.Contains(v.What, "before the previous lease expired"):
						found = true
					default:
						t.Errorf("unexpected report: %s", v)
					}
				}
				require.Equal(t, next.want, found, "the next life's delivery 2 came %v into its first lease of %v; reports: %v",
					time.Duration(next.at-at3), time.Duration(vt), c.violations)
			})
		}
	}
}
