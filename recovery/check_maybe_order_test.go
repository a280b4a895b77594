package recovery

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAMaybeKeepsItsFloorsWhenAnEarlierDeliveryIsReadAfterIt: one
// process hands a message out as delivery 1 (to con0, certain: a publish
// made it so) and, once that lease lapsed, as delivery 2 (to con1, a
// maybe: the power failed first), then as delivery 3. Had con0 read its
// clock late after Receive (stalled past the lease), the checker learns
// of delivery 1, maybe and certain entry alike, after delivery 2; it
// checks it where it was handed out, first, and reports nothing of it.
// Delivery 2's floors hold in its process: a delivery 3 inside its lease
// is a double delivery, whichever consumer read its clock last, and one
// after it is sound.
func TestAMaybeKeepsItsFloorsWhenAnEarlierDeliveryIsReadAfterIt(t *testing.T) {
	id := "00000000000000c3"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	p, _ := Policy(QueueWork)
	vt := int64(p.VisibilityTimeout)
	at2 := base + ms + vt + 10*ms // after delivery 1's lease lapsed
	const floor = "in the process that had leased it as delivery 2 (journaled as a maybe), before that lease expired"

	for _, order := range []struct {
		name string
		late int64 // how long after delivery 1's Receive con0 read the clock
	}{
		{"delivery 1 read first", 0},
		{"delivery 1 read after delivery 2", vt + 200*ms},
	} {
		for _, third := range []struct {
			name string
			at   int64
			want bool // delivery 3 breaks delivery 2's floor
		}{
			{"delivery 3 inside delivery 2's lease", at2 + vt/2, true},
			{"control: delivery 3 after delivery 2's lease lapsed", at2 + vt + 10*ms, false},
		} {
			t.Run(order.name+"/"+third.name, func(t *testing.T) {
				first := maybeAt("con0", id, ref, base, 1, base+ms, IntentHold)
				first.T1 += order.late
				certain := first
				certain.Op = OpDelivered
				c := checkerWithoutStores(t)
				c.AddCycle(1, maybeJournal(id, ref, base,
					maybeAt("con1", id, ref, base, 2, at2, IntentHold),
					first,
					certain,
					maybeAt("con1", id, ref, base, 3, third.at, IntentHold)))

				if !third.want {
					require.NoError(t, c.Err(), "delivery 3 came after delivery 2's lease lapsed")
					return
				}
				var broke bool
				for _, v := range c.violations {
					if strings.Contains(v.What, "(delivery 3,") && strings.Contains(v.What, floor) {
						broke = true
					} else {
						t.Errorf("unexpected report: %s", v)
					}
				}
				require.True(t, broke,
					"delivery 3 came %v into delivery 2's lease of %v, in the process that leased it (delivery 1 read its clock %v late); reports: %v",
					time.Duration(third.at-at2), time.Duration(vt), time.Duration(order.late), c.violations)
			})
		}
	}
}
