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
// queued the message yet); once the claim is released, as a replay that
// failed releases it, a delete removes it.
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
	q.releaseDead(ctx, id, c)
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
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	c, err := q.claimDead(short, id, raw) // a claim that ends with its call
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
