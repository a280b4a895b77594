package broker

import "fmt"

// A nil *Store, *Queue or *Memory is what a caller holds that went on past
// the error of Open, Store.Queue or NewMemory. Every method of one returns
// an error wrapping QueueMisconfigured that says so, changing nothing, and
// those that return no error answer as for a store that holds nothing
// (Stats, Queues, Recovery and Name return zero values, Wake says to look
// now so that the Receive that follows reports the error): a panic would
// end the process from a call that was given nothing to act on.

// nilReceiver is the error of a method called on a nil *Store, *Queue or
// *Memory; typ names the type.
func nilReceiver(typ string) error {
	return fmt.Errorf("broker: a method of a nil *broker.%s was called (was the error of the call that made it ignored?): %w", typ, QueueMisconfigured)
}

// lookNow is the signal Wake returns from a nil *Queue or *Memory: closed,
// so that a consumer waiting on it calls Receive at once and meets the
// error.
var lookNow = func() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
