package broker

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// scriptedReceive is a broker that is not a Waker whose Receives follow a
// script: 'F' fails (neither Closed nor a stopped broker), 'E' finds
// nothing, 'D' delivers what the fake holds. Past the script it finds
// nothing, and done is closed.
type scriptedReceive struct {
	plainBroker
	mu     sync.Mutex
	script string
	done   chan struct{}
}

func (s *scriptedReceive) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.script == "" {
		select {
		case <-s.done:
		default:
			close(s.done)
		}
		return nil, nil
	}
	step := s.script[0]
	s.script = s.script[1:]
	switch step {
	case 'F':
		return nil, errTransient
	case 'D':
		return s.plainBroker.Receive(ctx, max)
	}
	return nil, nil
}

// The wait after a failed Receive starts at PollInterval (here below the
// 1ms floor, so 1ms) and doubles with each failure in a row; a Receive
// that succeeds, empty or not, starts it again at the floor.
func TestConsumeStartsTheFailureBackoffAgainAfterAReceiveSucceeds(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("x"))
	b := &scriptedReceive{plainBroker: plainBroker{f}, script: "FFFEFDFF", done: make(chan struct{})}
	log, logs := newTestLogger()
	r := startConsume(t, b, ackAll, ConsumeOptions{PollInterval: time.Microsecond, Logger: log})
	select {
	case <-b.done:
	case <-time.After(eventually):
		t.Fatal("Consume did not get through the script")
	}
	r.stop(t)
	var waits []string
	for _, m := range regexp.MustCompile(`receive failed; retrying.* retry_in=(\S+)`).FindAllStringSubmatch(logs.String(), -1) {
		waits = append(waits, m[1])
	}
	require.Equal(t, []string{"1ms", "2ms", "4ms", "1ms", "1ms", "2ms"}, waits, logs.String())
	require.Equal(t, 1, f.count("ack"), "the delivery between the failures was handled")
}

// The wait after failed Receives grows to PollInterval or 1s, whichever
// is longer, and no further.
func TestConsumeFailureBackoffStopsAtPollIntervalOrASecond(t *testing.T) {
	for _, tc := range []struct {
		poll time.Duration
		want []time.Duration // after 0, 1, 2, ... failures in a row
	}{
		{time.Microsecond, []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}},
		{100 * time.Millisecond, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}},
		{3 * time.Second, []time.Duration{3 * time.Second, 3 * time.Second}},
	} {
		c := &consumer{poll: tc.poll}
		for n, want := range tc.want {
			c.failures = n
			require.Equal(t, want, c.failWait(), "PollInterval %v, %d failures in a row", tc.poll, n)
		}
		c.failures = 40
		require.Equal(t, max(tc.poll, time.Second), c.failWait(), "PollInterval %v, 40 failures in a row", tc.poll)
	}
}
