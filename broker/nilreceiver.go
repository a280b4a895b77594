package broker

import "fmt"

// A nil *Store, *Queue or *Memory is what a caller holds that went on past
// the error of Open, Store.Queue or NewMemory; a zero one (new(Queue), a
// struct field never set) was not made by them either, and has as little
// to act on. Every method of either returns an error wrapping
// QueueMisconfigured that says so, changing nothing, and those that
// return no error answer as for a store that holds nothing (Stats,
// Queues, Recovery and Name return zero values, Wake says to look now so
// that the Receive that follows reports the error): a panic would end the
// process from a call that was given nothing to act on.

// nilReceiver is the error of a method called on a nil or unmade *Store,
// *Queue or *Memory; typ names the type.
func nilReceiver(typ string) error {
	return fmt.Errorf("broker: a method of a nil *broker.%s, or of one its constructor did not make, was called (was the error of the call that made it ignored?): %w", typ, QueueMisconfigured)
}

// unmade reports whether s is nil or was not made by Open (a zero Store),
// whose methods then refuse as for a nil one.
func (s *Store) unmade() bool { return s == nil || s.over == nil }

// unmade reports whether q is nil or was not made by Store.Queue.
func (q *Queue) unmade() bool { return q == nil || q.s == nil }

// unmade reports whether q is nil or was not made by NewMemory.
func (q *Memory) unmade() bool { return q == nil || q.over == nil }

// lookNow is the signal Wake returns from a nil *Queue or *Memory: closed,
// so that a consumer waiting on it calls Receive at once and meets the
// error.
var lookNow = func() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
