package recovery

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestADeliveryReadLateIsCheckedWhereItWasHandedOut: one process hands a
// message out as delivery 1 to con0, who stalls past the lease before it
// reads the clock after Receive, and, once that lease lapsed, as delivery
// 2 to con1, who settles it before con0 reads its clock. The store is
// right whatever con1 did with delivery 2 (and whether delivery 1 was
// journaled as certain or only as a maybe): delivery 1 was handed out
// first, counting less, before delivery 2's lease, its retry delay or
// its settle, and is reported for none of them. A store that hands the
// message out again after delivery 2 counting no more than 2 is still
// reported, however late its consumer reads the clock.
func TestADeliveryReadLateIsCheckedWhereItWasHandedOut(t *testing.T) {
	id, ref, base, ms, vt, at1, at2 := twoLeases("00000000000000c7")
	late := at2 + 50*ms // con0 reads its clock after con1's settle returned

	for _, first := range []struct {
		name string
		op   Op
	}{
		{"delivery 1 certain", OpDelivered},
		{"delivery 1 a maybe", OpMaybe},
	} {
		for _, tc := range []struct {
			name   string
			intent Intent
			settle []Entry
		}{
			{"con1 acked delivery 2", IntentAck,
				[]Entry{{Op: OpAcked, Who: "con1", Queue: QueueWork, ID: id, Del: 2, T0: at2 + ms, T1: at2 + 2*ms}}},
			{"con1 nacked delivery 2", IntentNack,
				[]Entry{{Op: OpNacked, Who: "con1", Queue: QueueWork, ID: id, Del: 2,
					Exp: at2 + ms + int64(retryDelay(QueueWork, 2)), T0: at2 + ms, T1: at2 + 2*ms}}},
			{"con1 rejected delivery 2", IntentReject,
				[]Entry{{Op: OpRejected, Who: "con1", Queue: QueueWork, ID: id, Del: 2, T0: at2 + ms, T1: at2 + 2*ms}}},
			{"con1 holds delivery 2", IntentHold, nil},
		} {
			t.Run(first.name+"/"+tc.name, func(t *testing.T) {
				d1 := certainAt("con0", id, ref, base, 1, at1, IntentHold)
				d1.Op, d1.T1 = first.op, late
				c := checkerWithoutStores(t)
				c.AddCycle(1, certainJournal(id, ref, base,
					append([]Entry{d1, certainAt("con1", id, ref, base, 2, at2, tc.intent)}, tc.settle...)...))
				require.NoError(t, c.Err(), "delivery 1 was handed out at %s, before delivery 2 (%s); con0 read its clock only at %s",
					ns(at1), ns(at2), ns(late))
			})
		}

		for _, again := range []int{1, 2} {
			for _, readLate := range []bool{false, true} {
				name := fmt.Sprintf("%s/a store that hands it out again as delivery %d", first.name, again)
				if readLate {
					name += ", read late"
				}
				t.Run(name, func(t *testing.T) {
					d1 := certainAt("con0", id, ref, base, 1, at1, IntentHold)
					d1.Op, d1.T1 = first.op, late
					at3 := at2 + vt + 10*ms // after delivery 2's lease lapsed
					d3 := certainAt("con1", id, ref, base, again, at3, IntentHold)
					if readLate {
						d3.T1 = at3 + vt
					}
					c := checkerWithoutStores(t)
					c.AddCycle(1, certainJournal(id, ref, base, d1, certainAt("con1", id, ref, base, 2, at2, IntentHold), d3))
					want := fmt.Sprintf("delivered with delivery count %d; an earlier delivery already counted 2", again)
					var found bool
					for _, v := range c.violations {
						if strings.Contains(v.What, want) {
							found = true
						} else {
							t.Errorf("unexpected report: %s", v)
						}
					}
					require.True(t, found, "the store handed the message out as delivery 2 at %s and as delivery %d at %s; reports: %v",
						ns(at2), again, ns(at3), c.violations)
				})
			}
		}
	}
}

// TestACountGoneBackIsCaughtWhenTheHigherOneIsReadLate: a store hands a
// message out counting 2 to con0, who stalls past the lease before it
// reads the clock, and, once that lease lapsed, counting 1 to con1, who
// reads the clock at once: the count went back, though the checker
// learns of the delivery counting 2 last. (The delivery counting 2
// journaled as a maybe binds its process all the same.) The control: the
// same with the counts the right way round.
func TestACountGoneBackIsCaughtWhenTheHigherOneIsReadLate(t *testing.T) {
	id, ref, base, ms, _, at1, at2 := twoLeases("00000000000000c8")
	late := at2 + 50*ms // con0 reads its clock after con1 did

	for _, first := range []struct {
		name string
		op   Op
		want string // what the delivery counting 1 is reported for
	}{
		{"the first delivery certain", OpDelivered, "delivered with delivery count 1; an earlier delivery already counted 2"},
		{"the first delivery a maybe", OpMaybe, "delivered with delivery count 1 in the process that had handed it out as delivery 2 (journaled as a maybe)"},
	} {
		for _, tc := range []struct {
			name          string
			first, second int
			want          bool // the count went back
		}{
			{"counts 2 then 1", 2, 1, true},
			{"control: counts 1 then 2", 1, 2, false},
		} {
			t.Run(first.name+"/"+tc.name, func(t *testing.T) {
				d1 := certainAt("con0", id, ref, base, tc.first, at1, IntentHold)
				d1.Op, d1.T1 = first.op, late
				c := checkerWithoutStores(t)
				c.AddCycle(1, certainJournal(id, ref, base, d1, certainAt("con1", id, ref, base, tc.second, at2, IntentHold)))
				if !tc.want {
					require.NoError(t, c.Err())
					return
				}
				var found bool
				for _, v := range c.violations {
					if strings.Contains(v.What, first.want) {
						found = true
					} else {
						t.Errorf("unexpected report: %s", v)
					}
				}
				require.True(t, found, "delivery 2 was handed out at %s and delivery 1 at %s, %v later; reports: %v",
					ns(at1), ns(at2), time.Duration(at2-at1), c.violations)
			})
		}
	}
}

// TestADeadLetterReadLateHidesNoDeliveryOfTheDeadMessage: con1 rejected
// delivery 2, and the janitor read the dead letter and stalled before it
// read the clock; it then replayed the message. A store that handed the
// dead message out before the replay (in the janitor's stall) broke the
// reject, even if its consumer read the clock after the janitor did. The
// controls: the next life's first delivery, after the replay, and
// delivery 1, handed out before the reject but read after the janitor's
// clock, are sound.
func TestADeadLetterReadLateHidesNoDeliveryOfTheDeadMessage(t *testing.T) {
	id, ref, base, ms, _, at1, at2 := twoLeases("00000000000000c9")
	reason := Reason(QueueWork, IntentReject)
	code, cause, _ := recordedCause(QueueWork, reason)
	read := at2 + 5*ms        // DeadLetters returned
	stalled := read + 300*ms  // the janitor read its clock
	replay := stalled + 2*ms  // the replay started
	readAfter := stalled + ms // a consumer reads its clock after the janitor did

	for _, tc := range []struct {
		name  string
		d1T1  int64   // when con0 read its clock after delivery 1
		extra []Entry // after the replay's entries
		want  string  // what it must be reported for; "" if sound
	}{
		{"a delivery of the dead message in the janitor's stall", at1,
			[]Entry{func() Entry {
				e := certainAt("con2", id, ref, base, 3, stalled-ms, IntentHold)
				e.T1 = readAfter
				return e
			}()}, "delivered (delivery 3) after it was dead-lettered"},
		{"control: the next life's first delivery", at1,
			[]Entry{certainAt("con2", id, ref, base, 1, replay+5*ms, IntentHold)}, ""},
		{"control: delivery 1 read after the janitor's clock", readAfter, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d1 := certainAt("con0", id, ref, base, 1, at1, IntentHold)
			d1.T1 = tc.d1T1
			c := checkerWithoutStores(t)
			c.AddCycle(1, certainJournal(id, ref, base, append([]Entry{
				d1,
				certainAt("con1", id, ref, base, 2, at2, IntentReject),
				{Op: OpRejected, Who: "con1", Queue: QueueWork, ID: id, Del: 2, T0: at2 + ms, T1: at2 + 2*ms},
				{Op: OpReplaying, Who: "janitor", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 2,
					Reason: reason, Code: code, Cause: cause, Failed: at2 + ms, T0: read - ms, T1: stalled},
				{Op: OpReplayed, Who: "janitor", Queue: QueueWork, ID: id, T0: replay, T1: replay + ms},
			}, tc.extra...)...))
			if tc.want == "" {
				require.NoError(t, c.Err())
				return
			}
			// The delivery of the dead message may be reported for what it
			// makes of the dead letter too.
			require.ErrorContains(t, c.Err(), tc.want, "the message was dead-lettered at %s and handed out at %s, before its replay started (%s)",
				ns(at2+ms), ns(stalled-ms), ns(replay))
		})
	}
}
