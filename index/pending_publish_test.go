package index

import (
	"errors"
	"testing"

	"github.com/walbroker/walbroker/wal"
)

// A publish at position 0 is the pending publish of a new message (Commit
// places it). Of a message the queue holds, it is refused with
// ErrBadEvent and changes nothing: it made a stream message a second,
// Pending message beside its stream entry, made an active one Pending
// while its old segment still counted it (so that its commit counted it
// again and its ack uncounted only once), and made a dead letter live
// again with its failure kept.

// heldStates are the ways a queue holds message 1, each built at segment 1.
var heldStates = []struct {
	name  string
	after []*Event // applied after its publish at segment 1
}{
	{"in the stream", nil},
	{"leased", []*Event{{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 100, Nonce: 7}}},
	{"nacked with a failure", []*Event{
		{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 100, Nonce: 7},
		{Kind: KindNack, Queue: 1, Seq: 1, Deliveries: 1, Time: 200, Code: 2, Reason: "BUSY", Cause: "b"},
	}},
	{"dead", []*Event{{Kind: KindDeadLetter, Queue: 1, Seq: 1, Deliveries: 2, Time: 99, Code: 3, Reason: "R", Cause: "c"}}},
}

func TestAPendingPublishOfAHeldMessageIsRefusedAndChangesNothing(t *testing.T) {
	for _, c := range heldStates {
		t.Run(c.name, func(t *testing.T) {
			x := declared(t)
			q := x.Queue("q")
			pos := wal.MakePosition(1, 64)
			for i, e := range append([]*Event{pub(1, 5, "k")}, c.after...) {
				if err := x.Apply(pos+wal.Position(100*i), e); err != nil {
					t.Fatal(err)
				}
			}
			before, uses, chunks := snapshot(q, 0), x.SegmentUses(), x.LiveChunks()
			if _, err := q.Apply(0, pub(1, 5, "k")); !errors.Is(err, ErrBadEvent) {
				t.Errorf("Queue.Apply of a pending publish of message 1, held %s: error %v, want ErrBadEvent", c.name, err)
			}
			if err := x.Apply(0, pub(1, 5, "k")); !errors.Is(err, ErrBadEvent) {
				t.Errorf("Index.Apply of a pending publish of message 1, held %s: error %v, want ErrBadEvent", c.name, err)
			}
			if after := snapshot(q, 0); after != before {
				t.Errorf("a refused pending publish changed the queue holding message 1 %s:\nbefore:\n%s\nafter:\n%s", c.name, before, after)
			}
			if got := x.SegmentUses(); !equalUses(got, uses) {
				t.Errorf("a refused pending publish changed the segments' counts: %+v, was %+v", got, uses)
			}
			if got := x.LiveChunks(); len(got) != len(chunks) {
				t.Errorf("a refused pending publish changed the live table chunks: %v, was %v", got, chunks)
			}
		})
	}
}

func equalUses(a, b map[uint32]SegmentUse) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestAPendingPublishOfAPendingMessageIsRefused: a sequence is never
// reused, so a second pending publish of it is refused too, and the first
// commits as it would have.
func TestAPendingPublishOfAPendingMessageIsRefused(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	if _, err := q.Apply(0, pub(1, 5, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Apply(0, pub(1, 5, "")); !errors.Is(err, ErrBadEvent) {
		t.Errorf("a second pending publish of Pending message 1: error %v, want ErrBadEvent", err)
	}
	if got := q.Live(); got != 1 {
		t.Errorf("after a refused second pending publish: Live() = %d, want 1", got)
	}
	if err := q.Commit(1, wal.MakePosition(1, 64)); err != nil {
		t.Fatal(err)
	}
	if m := q.NextReady(); m == nil || m.Seq != 1 {
		t.Errorf("message 1, committed, is not the next ready: %+v", m)
	}
}

// TestAnActiveMessageIsUncountedWhereItWasCountedAfterARefusedPendingPublish:
// the sequence of the fault this guards against (publish, lease, pending
// publish, commit elsewhere, ack): its first segment kept counting the
// message for good, so reclamation never removed it.
func TestAnActiveMessageIsUncountedWhereItWasCountedAfterARefusedPendingPublish(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	a, b := wal.MakePosition(1, 64), wal.MakePosition(2, 64)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(x.Apply(a, pub(1, 5, "")))
	must(x.Apply(a+100, &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 100, Nonce: 7}))
	if _, err := q.Apply(0, pub(1, 5, "")); !errors.Is(err, ErrBadEvent) {
		t.Errorf("a pending publish of leased message 1: error %v, want ErrBadEvent", err)
	}
	must(q.Commit(1, b))
	must(x.Apply(b+100, &Event{Kind: KindAck, Queue: 1, Seq: 1}))
	if q.Live() != 0 || q.Active() != 0 {
		t.Fatalf("after the ack: Live %d, Active %d, want 0 and 0", q.Live(), q.Active())
	}
	if uses := x.SegmentUses(); len(uses) != 0 {
		t.Errorf("after the only message was acknowledged, segments still count messages: %+v (want none)", uses)
	}
	if chunks := x.LiveChunks(); len(chunks) != 0 {
		t.Errorf("after the only message was acknowledged, table chunks still count live messages: %v", chunks)
	}
}

// TestACopiedDeadLetterKeepsItsFailure: a publish applied at a position, of
// a dead letter, is a copy: the message stays dead with its failure, at the
// new position.
func TestACopiedDeadLetterKeepsItsFailure(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	pos, copyPos := wal.MakePosition(1, 64), wal.MakePosition(2, 64)
	if err := x.Apply(pos, pub(1, 5, "")); err != nil {
		t.Fatal(err)
	}
	if err := x.Apply(pos+100, &Event{Kind: KindDeadLetter, Queue: 1, Seq: 1, Deliveries: 2, Time: 99, Code: 3, Reason: "R", Cause: "c"}); err != nil {
		t.Fatal(err)
	}
	if err := x.Apply(copyPos, pub(1, 5, "")); err != nil {
		t.Fatal(err)
	}
	m := q.Get(1)
	if m == nil || m.State != Dead || m.Pos != copyPos || m.FailedAt != 99 || m.Code != 3 || m.Reason != "R" || m.Cause != "c" {
		t.Errorf("dead letter 1 after the copy of its publish: %+v, want it dead at %v with FailedAt 99, code 3, reason R, cause c", m, copyPos)
	}
	if q.Live() != 0 {
		t.Errorf("a copied dead letter counts as live: Live() = %d", q.Live())
	}
}
