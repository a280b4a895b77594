package natsjs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// TestARacingCallFindsADeadLetterBeingReplayedGone: while a replay of a
// dead letter through one Store is publishing its message (held there by
// its connection), a replay or a delete of the same dead letter through
// another Store finds it gone (DeadLetterNotFound) and changes nothing;
// the first replay then succeeds, and the message is queued once. Before
// replays claimed their record, both replays read it, both published, and
// the loser's delete, finding the record gone, counted as success: two
// copies, two nil errors; and a delete there "removed for good" a message
// the replay queued.
func TestARacingCallFindsADeadLetterBeingReplayedGone(t *testing.T) {
	for _, c := range []struct {
		name string
		call func(*natsjs.Queue, context.Context, string) error
	}{
		{"replay", (*natsjs.Queue).ReplayDeadLetter},
		{"delete", (*natsjs.Queue).DeleteDeadLetter},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			gate := natsjs.NewWriteGate()
			a := openBackend(t)
			storeB, err := natsjs.Open(connect(t, sharedServer(t).ClientURL()), natsjs.Options{Prefix: a.prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { storeB.Close() })
			na := connect(t, sharedServer(t).ClientURL(), nats.SetCustomDialer(gate.Dialer()))
			storeA, err := natsjs.Open(na, natsjs.Options{Prefix: a.prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { storeA.Close() })
			qa, qb, q := mustQueue(t, storeA, "race", policy()), mustQueue(t, storeB, "race", policy()), mustQueue(t, a.Store, "race", policy())

			m, err := q.Publish(ctx, []byte("a"))
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Reject(ctx, receiveOneWithin(t, q, "the message").Lease.Receipt, nil); err != nil {
				t.Fatal(err)
			}
			gate.Arm(a.prefix + ".q.race ") // the replay's publish, after its claim
			errA := make(chan error, 1)
			go func() { errA <- qa.ReplayDeadLetter(ctx, m.ID) }()
			<-gate.Held()
			errB := c.call(qb, ctx, m.ID)
			gate.Release()
			if !errors.Is(errB, broker.DeadLetterNotFound) {
				t.Errorf("a %s while another Store's replay publishes: %v, want DeadLetterNotFound", c.name, errB)
			}
			if err := <-errA; err != nil {
				t.Fatalf("the replay that claimed the dead letter: %v", err)
			}
			if dls, err := q.DeadLetters(ctx, 10); err != nil || len(dls) != 0 {
				t.Fatalf("dead letters after the replay: %d, %v; want none", len(dls), err)
			}
			d := receiveOneWithin(t, q, "the replayed message")
			if d.Message.ID != m.ID || d.Deliveries != 1 {
				t.Fatalf("received %q #%d, want %q #1", d.Message.ID, d.Deliveries, m.ID)
			}
			time.Sleep(100 * time.Millisecond)
			if ds, err := q.Receive(ctx, 10); err != nil || len(ds) != 0 {
				t.Fatalf("after the replayed message: %d more, %v; want none", len(ds), err)
			}
		})
	}
}

// TestADeleteAfterAReplayTimedOutDoesNotRemoveWhatItMayQueue: a replay
// through one Store times out while its publish is still on its way to
// the server (held on its connection past the call's deadline, and so
// past its claim's end). A delete through another Store then cannot know
// whether that publish will be stored: it finishes the replay instead,
// under the same Nats-Msg-Id, and finds the dead letter gone
// (DeadLetterNotFound). When the held publish lands, the work stream
// folds it into the delete's copy: the message is queued once, and no
// dead letter is left. A delete that returned nil ("removed for good")
// while the replay's message was queued after it broke the promise that
// of racing replays and deletes one succeeds and the others queue
// nothing.
func TestADeleteAfterAReplayTimedOutDoesNotRemoveWhatItMayQueue(t *testing.T) {
	ctx := context.Background()
	gate := natsjs.NewWriteGate()
	b := openBackend(t)
	na := connect(t, sharedServer(t).ClientURL(), nats.SetCustomDialer(gate.Dialer()))
	storeA, err := natsjs.Open(na, natsjs.Options{Prefix: b.prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { storeA.Close() })
	qa, qb := mustQueue(t, storeA, "inflight", policy()), mustQueue(t, b.Store, "inflight", policy())

	m, err := qb.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.Reject(ctx, receiveOneWithin(t, qb, "the message").Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	gate.Arm(b.prefix + ".q.inflight ") // the replay's publish, after its claim
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	errA := make(chan error, 1)
	go func() { errA <- qa.ReplayDeadLetter(actx, m.ID) }()
	select {
	case <-gate.Held():
	case <-time.After(10 * time.Second):
		t.Fatal("the replay never published")
	}
	time.Sleep(time.Until(start.Add(1200 * time.Millisecond))) // the claim has ended
	errB := qb.DeleteDeadLetter(ctx, m.ID)
	gate.Release()
	replayErr := <-errA
	if !errors.Is(errB, broker.DeadLetterNotFound) {
		t.Fatalf("a delete after a replay timed out with its publish in flight: %v, want DeadLetterNotFound (the replay that may queue the message wins)", errB)
	}
	d := receiveOneWithin(t, qb, "the replayed message")
	if d.Message.ID != m.ID || d.Deliveries != 1 {
		t.Fatalf("received %q #%d, want %q #1", d.Message.ID, d.Deliveries, m.ID)
	}
	time.Sleep(200 * time.Millisecond) // the held publish has landed, folded
	if ds, err := qb.Receive(ctx, 10); err != nil || len(ds) != 0 {
		t.Fatalf("after the replayed message: %d more, %v; want none (the replay returned %v)", len(ds), err, replayErr)
	}
	if dls, err := qb.DeadLetters(ctx, 10); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after the delete: %d, %v; want none", len(dls), err)
	}
}
