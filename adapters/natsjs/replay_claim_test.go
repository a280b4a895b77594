package natsjs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/broker"
)

// deadLetterOf publishes a message on q, leases and rejects it, and
// returns its ID and its dead-letter record.
func deadLetterOf(t *testing.T, q *Queue) (string, *jetstream.RawStreamMsg) {
	t.Helper()
	ctx := context.Background()
	m, _ := publishOne(t, q)
	var ds []broker.DeliveryValue
	for deadline := time.Now().Add(10 * time.Second); len(ds) == 0; {
		var err error
		if ds, err = q.Receive(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the message was never delivered")
		}
	}
	if err := q.Reject(ctx, ds[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	raw, err := q.deadRecord(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	return m.ID, raw
}

// TestALiveClaimKeepsOtherCallsOffADeadLetter: while a replay's claim on a
// dead letter lasts, another replay or a delete of it finds it gone and
// changes nothing, and DeadLetters still lists it (the replay has not
// queued the message yet); once the claim is released, as a replay whose
// publish the server refused releases it, a delete removes it.
func TestALiveClaimKeepsOtherCallsOffADeadLetter(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "claim", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	id, raw := deadLetterOf(t, q)
	c, err := q.claimDead(ctx, id, raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.ReplayDeadLetter(ctx, id); !errors.Is(err, broker.DeadLetterNotFound) {
		t.Errorf("replay of a claimed dead letter: %v, want DeadLetterNotFound", err)
	}
	if err := q.DeleteDeadLetter(ctx, id); !errors.Is(err, broker.DeadLetterNotFound) {
		t.Errorf("delete of a claimed dead letter: %v, want DeadLetterNotFound", err)
	}
	if dls, err := q.DeadLetters(ctx, 10); err != nil || len(dls) != 1 || dls[0].Message.ID != id {
		t.Fatalf("dead letters while claimed: %+v, %v; want %s", dls, err, id)
	}
	if _, err := q.claimDead(ctx, id, raw); !errors.Is(err, broker.DeadLetterNotFound) {
		t.Errorf("a claim on the record the first claim replaced: %v, want DeadLetterNotFound", err)
	}
	q.releaseDead(ctx, id, c, false)
	if err := q.DeleteDeadLetter(ctx, id); err != nil {
		t.Fatalf("delete once the claim was released: %v", err)
	}
	if ds, err := q.Receive(ctx, 10); err != nil || len(ds) != 0 {
		t.Fatalf("after the delete: received %d, %v; want nothing", len(ds), err)
	}
}

// TestAReplayAfterOneThatStoppedHalfwayQueuesTheMessageOnce: a replay that
// published its message and then stopped (its process died, or its delete
// of the record failed) leaves the record claimed; once the claim ends, a
// replay takes the record over and publishes the message with the same
// Nats-Msg-Id, which the work stream's duplicate window folds into the
// first copy: one message, and no dead letter left.
func TestAReplayAfterOneThatStoppedHalfwayQueuesTheMessageOnce(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "halfway", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	id, raw := deadLetterOf(t, q)
	c := replayHalfway(t, q, id, raw)
	time.Sleep(time.Until(c.until))
	if err := q.ReplayDeadLetter(ctx, id); err != nil {
		t.Fatalf("replay after one that stopped halfway: %v", err)
	}
	if dls, err := q.DeadLetters(ctx, 10); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after the replay: %d, %v; want none", len(dls), err)
	}
	ds, err := q.Receive(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].Message.ID != id {
		t.Fatalf("received %d, %v; want %s once", len(ds), err, id)
	}
}

// TestADeathOfAHalfwayReplaysCopyIsRecordedAndReplayedAgain: a replay that
// published its copy and stopped before it deleted the record (its
// process died) leaves the record claimed. When that copy dies too (its
// last lease lapses after a nack), the death is recorded as any other
// (the nack's cause, the lapsed delivery's count), not hidden behind the
// claimed record of the earlier death; and a replay of it then queues the message, rather
// than publishing the claim's Nats-Msg-Id again, which the work stream's
// duplicate window would fold into the dead copy: nothing queued, the
// record deleted, the message lost.
func TestADeathOfAHalfwayReplaysCopyIsRecordedAndReplayedAgain(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "halfwaylapse", broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 2})
	id, raw := deadLetterOf(t, q)

	c := replayHalfway(t, q, id, raw)

	// The replayed message fails again: its last lease lapses.
	d1 := receiveOneOf(t, q, "the replayed message")
	if d1.Message.ID != id {
		t.Fatalf("received %s, want %s", d1.Message.ID, id)
	}
	if _, err := q.Nack(ctx, d1.Lease.Receipt, broker.NewError("COPY_FAILED", 0x2A00000C, "the copy failed", "detail")); err != nil {
		t.Fatal(err)
	}
	d2 := receiveOneOf(t, q, "the redelivery")
	if d2.Deliveries != 2 {
		t.Fatalf("redelivery #%d, want #2", d2.Deliveries)
	}
	time.Sleep(time.Until(d2.Lease.ExpiresAt) + 50*time.Millisecond)
	time.Sleep(time.Until(c.until))
	if err := q.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}

	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Message.ID != id {
		t.Fatalf("dead letters after the replayed message's lapse: %+v; want %s", dls, id)
	}
	if dls[0].Reason != "COPY_FAILED" || dls[0].Cause != "the copy failed" || dls[0].Deliveries != 2 {
		t.Errorf("the dead letter of the copy that died by a lapse of delivery 2 after a nack says %s %q with %d deliveries, FailedAt %v; want COPY_FAILED, its last nack's, with 2 (the claimed record of the earlier death was kept)",
			dls[0].Reason, dls[0].Cause, dls[0].Deliveries, dls[0].FailedAt)
	}

	if err := q.ReplayDeadLetter(ctx, id); err != nil {
		t.Fatalf("replay of the listed dead letter: %v", err)
	}
	var got []broker.DeliveryValue
	for deadline := time.Now().Add(2 * time.Second); len(got) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got, err = q.Receive(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	left, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Message.ID != id {
		t.Fatalf("ReplayDeadLetter(%s) returned nil, but the queue holds %d messages and %d dead letters: the message, never acknowledged, is lost (a replay under Nats-Msg-Id %q was folded into the dead copy)",
			id, len(got), len(left), c.replayID)
	}
}

// TestAReplayAfterAHalfwayOneWhoseCopyIsGoneQueuesTheMessage: a replay
// that stopped halfway queued its copy, which was then received and
// acknowledged. A later replay of the record it left publishes the same
// Nats-Msg-Id, which the work stream still takes for a duplicate of the
// copy; the copy is gone, so the replay publishes the message again under
// an ID of its own: a replay that returns nil has queued the message
// (processed twice, which at-least-once permits, never lost).
func TestAReplayAfterAHalfwayOneWhoseCopyIsGoneQueuesTheMessage(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "halfwaygone", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	id, raw := deadLetterOf(t, q)
	c := replayHalfway(t, q, id, raw)
	if err := q.Ack(ctx, receiveOneOf(t, q, "the copy").Lease.Receipt); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(c.until))
	if err := q.ReplayDeadLetter(ctx, id); err != nil {
		t.Fatalf("replay after one that stopped halfway: %v", err)
	}
	if d := receiveOneOf(t, q, "the message replayed again"); d.Message.ID != id || d.Deliveries != 1 {
		t.Fatalf("received %s #%d, want %s #1", d.Message.ID, d.Deliveries, id)
	}
	if dls, err := q.DeadLetters(ctx, 10); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after the replay: %d, %v; want none", len(dls), err)
	}
}

// replayHalfway does what ReplayDeadLetter does for the record raw of
// dead letter id up to its publish, and stops there, as when its process
// dies: the claim (which ends within half a second) stays, and the copy
// is queued.
func replayHalfway(t *testing.T, q *Queue, id string, raw *jetstream.RawStreamMsg) deadClaim {
	t.Helper()
	ctx := context.Background()
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	c, err := q.claimDead(short, id, raw)
	if err != nil {
		t.Fatal(err)
	}
	enqueued, err := headerTime(raw.Header, hdrEnqueued)
	if err != nil {
		t.Fatal(err)
	}
	m := q.message(raw.Data, enqueued)
	m.Header.Set(hdrID, id)
	if _, err := q.s.js.PublishMsg(ctx, m, jetstream.WithMsgID(c.replayID), jetstream.WithExpectStream(q.n.work)); err != nil {
		t.Fatal(err)
	}
	return c
}

// receiveOneOf polls q until it leases one message.
func receiveOneOf(t *testing.T, q *Queue, what string) broker.DeliveryValue {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ds, err := q.Receive(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			return ds[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never delivered", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAReplayAfterAHalfwayOneThatRepublishedIsFoldedIntoItsCopy: a replay
// that stops between its publish and its delete of the record leaves a
// record whose later replay publishes the same Nats-Msg-Id, which the
// work stream folds into the copy it stores; a delete in that replay's
// place finishes it the same way, and finds the dead letter gone. That
// holds when the replay that stopped halfway had itself found an earlier
// replay's copy gone and published under a fresh Nats-Msg-Id: its claim
// names that ID, so the next replay or delete is folded into its copy,
// and the message is queued once.
func TestAReplayAfterAHalfwayOneThatRepublishedIsFoldedIntoItsCopy(t *testing.T) {
	for _, third := range []string{"replay", "delete"} {
		t.Run(third, func(t *testing.T) { replayAfterARepublishedHalfway(t, third) })
	}
}

func replayAfterARepublishedHalfway(t *testing.T, third string) {
	ctx := context.Background()
	q := openQueue(t, "republished", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	id, raw := deadLetterOf(t, q)

	// Replay 1 publishes its copy and stops; the copy is processed.
	c1 := replayHalfway(t, q, id, raw)
	if err := q.Ack(ctx, receiveOneOf(t, q, "replay 1's copy").Lease.Receipt); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(c1.until))

	// Replay 2 does all ReplayDeadLetter does up to its delete of the
	// record, and stops there (its process dies).
	rec, err := q.deadRecord(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	c2, err := q.claimDead(short, id, rec)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	enqueued, err := headerTime(rec.Header, hdrEnqueued)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	seq2, _, err := q.publishReplay(short, id, rec.Data, enqueued, &c2)
	cancel()
	if err != nil {
		t.Fatalf("replay 2's publish: %v", err)
	}
	time.Sleep(time.Until(c2.until))

	// Replay 3 (or a delete), after replay 2's claim ended.
	if third == "replay" {
		if err := q.ReplayDeadLetter(ctx, id); err != nil {
			t.Fatalf("replay 3: %v", err)
		}
	} else if err := q.DeleteDeadLetter(ctx, id); !errors.Is(err, broker.DeadLetterNotFound) {
		t.Fatalf("delete after replay 2 stopped halfway: %v, want DeadLetterNotFound", err)
	}
	var got []broker.DeliveryValue
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ds, err := q.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
	}
	if len(got) != 1 {
		t.Fatalf("after the %s the queue holds %d copies of %s, want 1: replay 2's copy (stream sequence %d) is stored and within the DedupWindow, yet the %s was not folded into it",
			third, len(got), id, seq2, third)
	}
	if dls, err := q.DeadLetters(ctx, 10); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after the %s: %d, %v; want none", third, len(dls), err)
	}
}

// TestAReplayWhoseClaimADeathReplacedQueuesNothing: a replay that finds an
// earlier replay's copy gone names a fresh Nats-Msg-Id in its claim before
// it publishes under it. When a new death of the message has replaced the
// claim meanwhile, that write fails: the replay queues nothing, says why,
// and leaves the new record as it is, to be replayed.
func TestAReplayWhoseClaimADeathReplacedQueuesNothing(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "claimlost", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	id, raw := deadLetterOf(t, q)
	c1 := replayHalfway(t, q, id, raw)
	if err := q.Ack(ctx, receiveOneOf(t, q, "the copy").Lease.Receipt); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(c1.until))

	rec, err := q.deadRecord(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := q.claimDead(ctx, id, rec)
	if err != nil {
		t.Fatal(err)
	}
	// A death of the message writes its record over the claim.
	death := deadCopy(raw)
	if _, err := q.s.js.PublishMsg(ctx, death); err != nil {
		t.Fatal(err)
	}
	enqueued, err := headerTime(rec.Header, hdrEnqueued)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.publishReplay(ctx, id, rec.Data, enqueued, &c2); !errors.Is(err, errClaimLost) {
		t.Fatalf("a replay whose claim a death replaced: %v, want errClaimLost", err)
	}
	if ds, err := q.Receive(ctx, 10); err != nil || len(ds) != 0 {
		t.Fatalf("after the replay whose claim was replaced: received %d, %v; want nothing", len(ds), err)
	}
	if after, err := q.deadRecord(ctx, id); err != nil || claimed(after.Header, time.Now()) || after.Header.Get(hdrClaimUntil) != "" {
		t.Fatalf("the new record after the failed replay: %v, %v; want it unclaimed", after, err)
	}
	if err := q.ReplayDeadLetter(ctx, id); err != nil {
		t.Fatalf("replay of the new record: %v", err)
	}
	if d := receiveOneOf(t, q, "the replayed message"); d.Message.ID != id || d.Deliveries != 1 {
		t.Fatalf("received %s #%d, want %s #1", d.Message.ID, d.Deliveries, id)
	}
}

// TestAReplayIsNotFoldedIntoACopyThatIsAlreadyDead: ReplayDeadLetter moves
// the dead letter back into the queue, visible at once, with its delivery
// count reset (broker.DeadLetterManager). A replay that stopped halfway
// left its copy, which another Store received and whose last lease
// lapsed: the copy is dead, though nats-server, which notices a
// redelivered message's lapse only at its consumer's next pull, still
// stores it. A later replay is not folded into that copy: it queues the
// message again, which is delivered as delivery 1, and the dead copy
// leaves no dead letter behind.
func TestAReplayIsNotFoldedIntoACopyThatIsAlreadyDead(t *testing.T) {
	ctx := context.Background()
	p := broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 2}
	srv := embeddedServer(t)
	qa, err := openStoreOn(t, srv, Options{}).Queue("deadcopy", p)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := openStoreOn(t, srv, Options{}).Queue("deadcopy", p)
	if err != nil {
		t.Fatal(err)
	}
	id, raw := deadLetterOf(t, qa)
	c := replayHalfway(t, qa, id, raw)

	// Store b takes the copy twice; its last lease lapses.
	d1 := receiveOneOf(t, qb, "the copy")
	if _, err := qb.Nack(ctx, d1.Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	d2 := receiveOneOf(t, qb, "the copy's redelivery")
	if d2.Deliveries != 2 {
		t.Fatalf("redelivery #%d, want #2", d2.Deliveries)
	}
	time.Sleep(time.Until(d2.Lease.ExpiresAt) + 100*time.Millisecond)
	time.Sleep(time.Until(c.until))

	if err := qa.ReplayDeadLetter(ctx, id); err != nil {
		t.Fatalf("replay: %v", err)
	}
	var got []broker.DeliveryValue
	for deadline := time.Now().Add(3 * time.Second); len(got) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got, err = qa.Receive(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0].Message.ID != id || got[0].Deliveries != 1 {
		dls, _ := qa.DeadLetters(ctx, 10)
		t.Fatalf("ReplayDeadLetter(%s) returned nil, but within 3 s the queue delivered %d messages (want %s as delivery #1) and holds %d dead letters %+v: the replay was folded into the dead copy",
			id, len(got), id, len(dls), dls)
	}
	// The dead copy's lapse, which that Receive's pull made the server
	// notice, names a copy the replay removed: its advisory, when it
	// comes, buries nothing.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := qa.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
		if dls, err := qa.DeadLetters(ctx, 10); err != nil || len(dls) != 0 {
			t.Fatalf("dead letters while the replayed message is leased: %+v, %v; want none", dls, err)
		}
	}
}
