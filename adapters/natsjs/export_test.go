package natsjs

import "context"

// SweepNow makes q sweep for deaths at once, as a notice of one would.
func (q *Queue) SweepNow(ctx context.Context) error {
	q.unburied.Store(true)
	return q.sweepDeaths(ctx)
}
