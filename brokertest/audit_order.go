package brokertest

import (
	"time"
)

// orderCases: Receive's order, where the groups above check it only with
// messages a broker could hand out in the right order by mistake.
var orderCases = []testCase{
	{name: "ReceiveOrdersAMessagePublishedAfterTheClockSteppedBackBetweenOlderAndNewerOnes", needs: []string{"Clock", "OldestFirst"}, run: func(e *env) {
		// EnqueuedAt "is the ordering key a FIFO implementation sorts on".
		// ReceiveSortsOnEnqueuedAtEvenWhenTheClockStepsBack publishes two
		// messages, where handing the stepped-back one out first is right
		// whether the broker sorts or simply prefers the messages it
		// accepted out of order. Here one of those lies between two
		// published in order: it comes second, after the older one it was
		// published after, not first.
		q := e.queue(e.policy())
		oldest := e.publish(q, "at t0")
		e.set(t0.Add(2 * time.Hour))
		newest := e.publish(q, "at t0+2h")
		e.set(t0.Add(time.Hour)) // the clock steps back
		middle := e.publish(q, "at t0+1h, published last")
		var got []string
		for range 3 {
			got = append(got, ids(e.receive(q, 1))...)
		}
		if want := []string{oldest.ID, middle.ID, newest.ID}; !equalStrings(got, want) {
			e.Fatalf("received %v, want %v: oldest EnqueuedAt first", got, want)
		}
		e.none(q, "all three are leased")
	}},
}
