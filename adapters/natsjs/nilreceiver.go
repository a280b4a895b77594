package natsjs

import (
	"fmt"

	"github.com/walbroker/walbroker/broker"
)

// A nil *Store or *Queue is what a caller holds that went on past the
// error of Open or Store.Queue; a zero one (new(Queue), a struct field
// never set) was not made by them either, and has as little to act on. As
// with the file-backed store's (see broker/nilreceiver.go), every method
// of either returns an error wrapping broker.QueueMisconfigured that says
// so, changing nothing, and those that return no error answer as for a
// store that holds nothing (Queues and Name return zero values, Wake says
// to look now so that the Receive that follows reports the error): a panic
// would end the process from a call that was given nothing to act on.

// nilReceiver is the error of a method called on a nil or unmade *Store
// or *Queue; typ names the type.
func nilReceiver(typ string) error {
	return fmt.Errorf("natsjs: a method of a nil *natsjs.%s, or of one its constructor did not make, was called (was the error of the call that made it ignored?): %w", typ, broker.QueueMisconfigured)
}

// unmade reports whether s is nil or was not made by Open (a zero Store,
// without the JetStream handle every Open sets).
func (s *Store) unmade() bool { return s == nil || s.js == nil }

// unmade reports whether q is nil or was not made by Store.Queue (a zero
// Queue, without the Store every Store.Queue sets).
func (q *Queue) unmade() bool { return q == nil || q.s == nil }

// lookNow is the signal Wake returns from a nil or unmade *Queue: closed, so that a
// consumer waiting on it calls Receive at once and meets the error.
var lookNow = func() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
