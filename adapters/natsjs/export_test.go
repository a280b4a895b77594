package natsjs

import "context"

// SweepNow makes q sweep for deaths at once, as a notice of one would.
func (q *Queue) SweepNow(ctx context.Context) error {
	q.unburied.Store(true)
	return q.sweepDeaths(ctx)
}

// HoldWakeSubscription makes hold run between a Wake's subscription and
// the server's confirmation of it, and returns what restores the default.
func HoldWakeSubscription(hold func()) (restore func()) {
	beforeWakeFlush = hold
	return func() { beforeWakeFlush = func() {} }
}

// AbandonGrace is how long a sweep leaves a message the consumer gave up
// on without an advisory before it buries it.
const AbandonGrace = abandonGrace
