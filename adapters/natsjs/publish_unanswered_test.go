package natsjs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// TestAPublishThatGotNoAnswerSaysItMayBeStored: a Publish or PublishKeyed
// whose request gets no answer (here its context ends as the message is
// sent) cannot know whether the server stored the message, or will: its
// error says so, and what a retry does, and wraps the context's error. It
// used to read "publish: context canceled", which a caller could take for
// a message not stored.
func TestAPublishThatGotNoAnswerSaysItMayBeStored(t *testing.T) {
	b := openBackend(t)
	q := mustQueue(t, b.Store, "unanswered", policy())
	for _, c := range []struct {
		name    string
		publish func(ctx context.Context) error
		want    []string
	}{
		{"Publish", func(ctx context.Context) error {
			_, err := q.Publish(ctx, []byte("a"))
			return err
		}, []string{"may or may not have stored it", "a retry may store it twice"}},
		{"PublishKeyed", func(ctx context.Context) error {
			_, err := q.PublishKeyed(ctx, "k", []byte("a"))
			return err
		}, []string{"may or may not have stored it", "a retry with the same key within the DedupWindow is answered with the original"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			defer natsjs.HoldPublish(cancel)()
			err := c.publish(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%s that got no answer: %v, want Canceled", c.name, err)
			}
			for _, want := range c.want {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("%s that got no answer: %q does not say %q", c.name, err, want)
				}
			}
			if errors.Is(err, broker.Closed) || errors.Is(err, broker.QueueFull) {
				t.Fatalf("%s that got no answer: %q says the server refused it", c.name, err)
			}
		})
	}
}

// TestAKeyedPublishWhoseWaitForARacingPublishEndsSaysItMayBeStored: a
// PublishKeyed the server answers "in process" (another publish of the
// key is being stored, as a replicated stream answers until its replicas
// agreed; here the answer is made up) waits for that one and asks again.
// When its context ends while it waits, its error says so, that the
// server may or may not have stored the key's message by that publish,
// and what a retry does, and wraps the context's error. It used to be the
// server's bare answer, "duplicate message id is in process", which says
// neither.
func TestAKeyedPublishWhoseWaitForARacingPublishEndsSaysItMayBeStored(t *testing.T) {
	b := openBackend(t)
	q := mustQueue(t, b.Store, "racing", policy())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer natsjs.SendPublishThrough(func(func() (*jetstream.PubAck, error)) (*jetstream.PubAck, error) {
		cancel()
		return nil, &jetstream.APIError{Code: 400, ErrorCode: 10158, Description: "duplicate message id is in process"}
	})()
	_, err := q.PublishKeyed(ctx, "k", []byte("a"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("PublishKeyed whose wait for a racing publish ended: %v, want Canceled", err)
	}
	for _, want := range []string{
		"another publish of the key",
		"in process",
		"may or may not have stored the key's message",
		"a retry with the same key within the DedupWindow is answered with the original",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("PublishKeyed whose wait for a racing publish ended: %q does not say %q", err, want)
		}
	}
	if errors.Is(err, broker.Closed) || errors.Is(err, broker.QueueFull) {
		t.Fatalf("PublishKeyed whose wait for a racing publish ended: %q says the server refused it", err)
	}
}

// TestAKeyedPublishWhoseKeyClaimFailsSaysTheMessageWasNotSent: a
// PublishKeyed first claims its key's record, and publishes the message
// only once it holds it. When the claim fails (here its context ends
// before it is sent), the message was never sent: the error says so,
// rather than "publish: context canceled", which reads like the unanswered
// publish of the message itself, and wraps the context's error. Nothing
// is enqueued, and a retry claims the key afresh.
func TestAKeyedPublishWhoseKeyClaimFailsSaysTheMessageWasNotSent(t *testing.T) {
	b := openBackend(t)
	q := mustQueue(t, b.Store, "orders", policy())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restore := natsjs.HoldKeyClaim(func(int) { cancel() })
	defer restore()
	_, err := q.PublishKeyed(ctx, "k", []byte("a"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("PublishKeyed whose key claim failed: %v, want Canceled", err)
	}
	for _, want := range []string{"claim", "dedup key", "the message was not sent"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("PublishKeyed whose key claim failed: %q does not say %q", err, want)
		}
	}
	restore() // the retry claims the key as the first publish of it
	m, err := q.PublishKeyed(context.Background(), "k", []byte("a"))
	if err != nil || m.Payload == nil {
		t.Fatalf("PublishKeyed again after a failed key claim: %+v, %v; want the key's first message", m, err)
	}
	receiveN(t, q, 1)
}
