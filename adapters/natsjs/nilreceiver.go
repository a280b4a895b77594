package natsjs

import (
	"fmt"

	"github.com/walbroker/walbroker/broker"
)

// A nil *Store or *Queue is what a caller holds that went on past the
// error of Open or Store.Queue. As with the file-backed store's (see
// broker/nilreceiver.go), every method of one returns an error wrapping
// broker.QueueMisconfigured that says so, changing nothing, and those that
// return no error answer as for a store that holds nothing (Queues and
// Name return zero values, Wake says to look now so that the Receive that
// follows reports the error): a panic would end the process from a call
// that was given nothing to act on.

// nilReceiver is the error of a method called on a nil *Store or *Queue;
// typ names the type.
func nilReceiver(typ string) error {
	return fmt.Errorf("natsjs: a method of a nil *natsjs.%s was called (was the error of the call that made it ignored?): %w", typ, broker.QueueMisconfigured)
}

// lookNow is the signal Wake returns from a nil *Queue: closed, so that a
// consumer waiting on it calls Receive at once and meets the error.
var lookNow = func() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
