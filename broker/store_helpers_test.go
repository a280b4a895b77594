package broker_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/brokertest"
)

// t0 is where every fake clock starts.
var t0 = time.Unix(1_700_000_000, 0)

// testSegmentBytes keeps segment files small (each is written in full when
// it is prepared) while still holding a DefaultMaxMessageBytes payload.
const testSegmentBytes = 2 << 20

// fakeClock is the conformance suite's controllable clock: the broker's
// own tests drive the store with it too.
type fakeClock = brokertest.Clock

func newFakeClock() *fakeClock { return brokertest.NewClock(t0) }

// fullBroker is what both brokers offer, as the file-backed queue and
// Memory do.
type fullBroker interface {
	broker.Broker
	broker.LeaseExtender
	broker.Rejecter
	broker.DeadLetterManager
	broker.DeadLetterReader
	broker.Waker
	PublishKeyed(ctx context.Context, key string, payload []byte) (broker.MessageValue, error)
	PublishBatch(ctx context.Context, payloads [][]byte) ([]broker.MessageValue, error)
	Stats() broker.QueueStats
}

// env is one store directory with a fake clock, opened and reopened by the
// test. The store still open when the test ends is closed.
type env struct {
	t     testing.TB
	dir   string
	clock *fakeClock
	opts  broker.Options
	s     *broker.Store
	lostB string // corruptLog: the ID of the message whose record it damaged
}

// newEnv opens a store in a fresh directory with a fake clock; mods adjust
// its Options before the first Open.
func newEnv(t testing.TB, mods ...func(*broker.Options)) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), clock: newFakeClock()}
	e.opts = broker.Options{Now: e.clock.Now, SegmentBytes: testSegmentBytes}
	for _, m := range mods {
		m(&e.opts)
	}
	t.Cleanup(func() {
		if e.s != nil {
			_ = e.s.Close()
		}
	})
	e.open()
	return e
}

func (e *env) open() *broker.Store {
	e.t.Helper()
	s, err := broker.Open(e.dir, e.opts)
	require.NoError(e.t, err)
	e.s = s
	return s
}

func (e *env) close() {
	e.t.Helper()
	require.NoError(e.t, e.s.Close())
	e.s = nil
}

// reopen closes the store cleanly and opens it again with the same options.
func (e *env) reopen() *broker.Store {
	e.t.Helper()
	e.close()
	return e.open()
}

func (e *env) queue(name string, p broker.PolicyValue) *broker.Queue {
	e.t.Helper()
	q, err := e.s.Queue(name, p)
	require.NoError(e.t, err)
	return q
}

// memory returns an in-memory broker with the usual policy, on e's clock,
// to hold beside the store; it is closed when the test ends.
func (e *env) memory() *broker.Memory {
	e.t.Helper()
	return e.memoryWith(policy())
}

// memoryWith is memory under pol.
func (e *env) memoryWith(pol broker.PolicyValue) *broker.Memory {
	e.t.Helper()
	mem, err := broker.NewMemory(pol, broker.MemoryOptions{Now: e.clock.Now})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = mem.Close() })
	return mem
}

// storeAndMemory returns, under the names "store" and "memory", the
// queue "jobs" of e's store and a Memory on e's clock, both under pol,
// for a test that holds both brokers to one promise.
func (e *env) storeAndMemory(pol broker.PolicyValue) map[string]fullBroker {
	e.t.Helper()
	return map[string]fullBroker{"store": e.queue("jobs", pol), "memory": e.memoryWith(pol)}
}

// policy is the tests' usual policy: a 30 s lease, three deliveries, a 1 s
// retry delay; mods adjust it.
func policy(mods ...func(*broker.PolicyValue)) broker.PolicyValue {
	p := broker.PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 3, RetryDelay: time.Second}
	for _, m := range mods {
		m(&p)
	}
	return p
}

func ctx(t testing.TB) context.Context { return t.Context() }

func mustPublish(t testing.TB, q *broker.Queue, payload string) broker.MessageValue {
	t.Helper()
	m, err := q.Publish(ctx(t), []byte(payload))
	require.NoError(t, err)
	return m
}

func mustReceive(t testing.TB, q *broker.Queue, max int) []broker.DeliveryValue {
	t.Helper()
	ds, err := q.Receive(ctx(t), max)
	require.NoError(t, err)
	return ds
}

func mustReceiveOne(t testing.TB, q *broker.Queue) broker.DeliveryValue {
	t.Helper()
	ds := mustReceive(t, q, 1)
	require.Len(t, ds, 1, "expected one receivable message")
	return ds[0]
}

// requireNoneReceivable asserts that Receive finds nothing right now.
func requireNoneReceivable(t testing.TB, q *broker.Queue, msgAndArgs ...any) {
	t.Helper()
	ds, err := q.Receive(ctx(t), 100)
	require.NoError(t, err)
	require.Empty(t, ds, msgAndArgs...)
}

func mustDeadLetters(t testing.TB, q *broker.Queue) []broker.DeadLetterValue {
	t.Helper()
	dls, err := q.DeadLetters(ctx(t), 1000)
	require.NoError(t, err)
	return dls
}

func mustNack(t testing.TB, q *broker.Queue, r broker.ReceiptValue, cause error) broker.NackValue {
	t.Helper()
	nv, err := q.Nack(ctx(t), r, cause)
	require.NoError(t, err)
	return nv
}

// requireErrorIs asserts that err wraps sentinel and that its text
// mentions each of mentions (what was wrong).
func requireErrorIs(t testing.TB, err, sentinel error, mentions ...string) {
	t.Helper()
	require.Error(t, err)
	require.Truef(t, errors.Is(err, sentinel), "error %q does not wrap %v", err, sentinel)
	for _, m := range mentions {
		require.Containsf(t, err.Error(), m, "error text should name %q", m)
	}
}

// requireSameInstant compares instants, ignoring location and monotonic
// readings.
func requireSameInstant(t testing.TB, want, got time.Time, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, want.UnixNano(), got.UnixNano(), msgAndArgs...)
}

// ids returns the message IDs of deliveries.
func ids(ds []broker.DeliveryValue) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Message.ID
	}
	return out
}

// deadIDs returns the message IDs of dead letters.
func deadIDs(dls []broker.DeadLetterValue) []string {
	out := make([]string, len(dls))
	for i, d := range dls {
		out[i] = d.Message.ID
	}
	return out
}

// Causes of every shape the classified-cause rule distinguishes, defined
// here (not with broker.Error) where a user's own type is the point.

// codeOnly carries only a code.
type codeOnly struct {
	code uint32
	text string
}

func (e codeOnly) Error() string { return e.text }
func (e codeOnly) Code() uint32  { return e.code }

// publicOnly carries only a public text.
type publicOnly struct{ public, text string }

func (e publicOnly) Error() string  { return e.text }
func (e publicOnly) Public() string { return e.public }

// userClassified is a user's own classified error that does not import
// broker's Error type.
type userClassified struct{ reason, public, private string }

func (e userClassified) Error() string  { return e.reason + ": " + e.private }
func (e userClassified) Reason() string { return e.reason }
func (e userClassified) Code() uint32   { return 0x2A000001 }
func (e userClassified) Public() string { return e.public }

// openEnvAt opens a store in dir (a power-loss clone, say) with a fresh fake
// clock at t0 and the tests' usual options.
func openEnvAt(t testing.TB, dir string) *env {
	t.Helper()
	e := &env{t: t, dir: dir, clock: newFakeClock()}
	e.opts = broker.Options{Now: e.clock.Now, SegmentBytes: testSegmentBytes}
	t.Cleanup(func() {
		if e.s != nil {
			_ = e.s.Close()
		}
	})
	e.open()
	return e
}

// envSeed is the seed a randomized test runs with: the integer in the
// environment variable name when it is set (to replay a run), else the
// clock's.
func envSeed(t testing.TB, name string) int64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return time.Now().UnixNano()
	}
	seed, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, "%s", name)
	return seed
}

// envCount is how much a randomized test does (steps, seconds): the
// integer in the environment variable name when it is set, else def, or
// short with -short.
func envCount(t testing.TB, name string, def, short int) int {
	t.Helper()
	if s := os.Getenv(name); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "%s", name)
		return n
	}
	if testing.Short() {
		return short
	}
	return def
}
