package natsjs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
