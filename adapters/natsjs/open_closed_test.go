package natsjs_test

import (
	"errors"
	"testing"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// TestOpenOnAClosedConnectionIsClosed: Open on a connection already closed
// is refused with broker.Closed, as every call on it is, not as a server
// without JetStream.
func TestOpenOnAClosedConnectionIsClosed(t *testing.T) {
	nc := connect(t, sharedServer(t).ClientURL())
	nc.Close()
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "OPENCLOSED"})
	if !errors.Is(err, broker.Closed) {
		t.Fatalf("Open on a closed connection: %v, want an error wrapping broker.Closed", err)
	}
	if st != nil {
		t.Fatalf("Open on a closed connection returned a Store with its error")
	}
}

// TestOpenWhoseConnectionClosesAsItOpensIsClosed: a connection that closes
// after Open asked the server, before Open listened for its closing, is
// not missed: Open is refused with broker.Closed, rather than returning a
// Store whose queues' wake signals would never close (a Consume idle on
// Wake would wait for good).
func TestOpenWhoseConnectionClosesAsItOpensIsClosed(t *testing.T) {
	nc := connect(t, sharedServer(t).ClientURL())
	t.Cleanup(natsjs.HoldOpen(func() { nc.Close() }))
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "OPENCLOSING"})
	if !errors.Is(err, broker.Closed) {
		if st != nil {
			st.Close()
		}
		t.Fatalf("Open whose connection closed as it opened: %v, want an error wrapping broker.Closed", err)
	}
}
