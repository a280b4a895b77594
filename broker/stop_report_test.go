package broker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// queuesHandler is a slog.Handler that adds the store's queues to what it
// logs, as Options.Logger says a handler may: Store.Queues takes the
// store's lock.
type queuesHandler struct {
	s      func() *Store
	logged chan string
}

func (h queuesHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h queuesHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h queuesHandler) WithGroup(string) slog.Handler            { return h }
func (h queuesHandler) Handle(_ context.Context, r slog.Record) error {
	h.s().Queues()
	h.logged <- r.Message
	return nil
}

// TestAFailureMetAfterCloseIsLoggedOffTheCallersLocks: a call that was
// waiting for the log when Close ran (a declaration, holding the store's
// lock) may meet the failure of Close's last fdatasync after Close has
// shut the queues, so that no stop goroutine starts any more. Its failure
// was then logged on the caller's goroutine, under the caller's lock: a
// handler that read Store.Queues, as Options.Logger allows, waited for
// that lock for ever, and so did the call.
func TestAFailureMetAfterCloseIsLoggedOffTheCallersLocks(t *testing.T) {
	var s *Store
	h := queuesHandler{s: func() *Store { return s }, logged: make(chan string, 4)}
	s, err := Open(t.TempDir(), Options{Logger: slog.New(h)})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	returned := make(chan error, 1)
	go func() {
		// As declare's wait does, with s.mu held.
		s.mu.Lock()
		defer s.mu.Unlock()
		returned <- s.failure(errors.New("the last fdatasync failed"))
	}()
	select {
	case err := <-returned:
		require.ErrorContains(t, err, "the last fdatasync failed")
	case <-time.After(10 * time.Second):
		t.Fatal("the failing call still waits 10 s later: its failure is logged under its own lock")
	}
	for {
		select {
		case msg := <-h.logged:
			if strings.Contains(msg, "store failed") {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the failure was never logged")
		}
	}
}
