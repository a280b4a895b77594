package natsjs

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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

// HoldKeyClaim makes hold run before each attempt of a keyed publish to
// claim its key's record, and returns what restores the default.
func HoldKeyClaim(hold func(round int)) (restore func()) {
	beforeKeyClaim = hold
	return func() { beforeKeyClaim = func(int) {} }
}

// AbandonGrace is how long a sweep leaves a message the consumer gave up
// on without an advisory before it buries it.
const AbandonGrace = abandonGrace

// Unburied reports whether q was told of a death (or failed a sweep) and
// has not swept for it since.
func (q *Queue) Unburied() bool { return q.unburied.Load() }

// HoldAfterPull makes hold run after each pull of a Receive, before it
// records what the pull leased, and returns what restores the default.
func HoldAfterPull(hold func()) (restore func()) {
	afterPull = hold
	return func() { afterPull = func() {} }
}

// HoldAfterTell makes hold run after each acknowledgement a call sends to
// the server (Ack, Nack, Extend, ...), and returns what restores the
// default.
func HoldAfterTell(hold func()) (restore func()) {
	afterTell = hold
	return func() { afterTell = func() {} }
}

// FailWakeSubscription makes every wake subscription fail with err, and
// returns what restores the default.
func FailWakeSubscription(err error) (restore func()) {
	wakeSubscribeFault = func() error { return err }
	return func() { wakeSubscribeFault = func() error { return nil } }
}

// LiftBatchBound lets each Queue made from now on have n atomic batches
// open at once, and returns what restores the default.
func LiftBatchBound(n int) (restore func()) {
	old := batchesInFlight
	batchesInFlight = n
	return func() { batchesInFlight = old }
}

// HoldOpen makes hold run in Open after its request to the server, before
// it listens for the connection's closing, and returns what restores the
// default.
func HoldOpen(hold func()) (restore func()) {
	afterAccountInfo = hold
	return func() { afterAccountInfo = func() {} }
}

// TakeBatchSlot takes one of q's open-batch tokens, as a batch in flight
// would, and returns what gives it back.
func TakeBatchSlot(q *Queue) (release func()) {
	q.batches <- struct{}{}
	return func() { <-q.batches }
}

// HoldBatchCommit makes hold run before each batch sends its commit, and
// returns what restores the default.
func HoldBatchCommit(hold func()) (restore func()) {
	return SendBatchCommitThrough(func(send func() (*nats.Msg, error)) (*nats.Msg, error) {
		hold()
		return send()
	})
}

// SendBatchCommitThrough makes each batch hand through the sending of its
// commit (send, which returns the server's answer), and returns what
// restores the default: through may send it or not, and return the
// answer or an error in its place.
func SendBatchCommitThrough(through func(send func() (*nats.Msg, error)) (*nats.Msg, error)) (restore func()) {
	old := sendBatchCommit
	sendBatchCommit = through
	return func() { sendBatchCommit = old }
}

// HoldPublish makes hold run before each Publish and PublishKeyed sends
// its message, and returns what restores the default.
func HoldPublish(hold func()) (restore func()) {
	return SendPublishThrough(func(send func() (*jetstream.PubAck, error)) (*jetstream.PubAck, error) {
		hold()
		return send()
	})
}

// SendPublishThrough makes each Publish and PublishKeyed hand through the
// sending of its message (send, which returns the server's answer), and
// returns what restores the default: through may send it or not, and
// return the answer or another in its place.
func SendPublishThrough(through func(send func() (*jetstream.PubAck, error)) (*jetstream.PubAck, error)) (restore func()) {
	old := sendPublish
	sendPublish = through
	return func() { sendPublish = old }
}

// AbandonedBatchKept is how long a Queue keeps the token of an abandoned
// batch whose abandon got no answer, on the Store's clock.
const AbandonedBatchKept = serverBatchTimeout + abandonMargin

// SetClock makes s measure how long its Queues keep the tokens of
// abandoned batches by now instead of time.Now. Call it before s is used.
func SetClock(s *Store, now func() time.Time) { s.clock = now }

// SendBatchAbandonThrough makes each abandoned batch hand through the
// sending of its abandon (send), and returns what restores the default:
// through may send it or not, and return an error in its place.
func SendBatchAbandonThrough(through func(send func() error) error) (restore func()) {
	old := sendBatchAbandon
	sendBatchAbandon = through
	return func() { sendBatchAbandon = old }
}

// HoldBatchRetry makes hold run each time the server refused a batch for
// want of room, before the batch is sent again, and returns what
// restores the default.
func HoldBatchRetry(hold func()) (restore func()) {
	beforeBatchRetry = hold
	return func() { beforeBatchRetry = func() {} }
}

// SendTellThrough makes each acknowledgement a call sends to the server
// (body: "+ACK", "-NAK ...", "+WPI", "+TERM") hand through its sending
// (send, which returns the error of the server's answer), and returns
// what restores the default: through may send it or not, and return
// another error in its place.
func SendTellThrough(through func(body string, send func() error) error) (restore func()) {
	old := sendTell
	sendTell = through
	return func() { sendTell = old }
}
