package broker_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// Options.SyncInterval: zero means 100 ms, and a negative one is refused
// by Open (QueueMisconfigured, naming the field), however little below
// zero it is: a nanosecond is as negative as a millisecond.
func TestASyncIntervalOneNanosecondBelowZeroIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := broker.Open(dir, broker.Options{SyncInterval: -time.Nanosecond})
	if s != nil {
		s.Close()
	}
	require.ErrorIs(t, err, broker.QueueMisconfigured)
	require.ErrorContains(t, err, "Options.SyncInterval -1ns")
	require.NoDirExists(t, dir, "nothing was made")
}

// pollCounter is an empty broker that is not a Waker: Consume polls it.
// It records when each Receive came.
type pollCounter struct {
	mu       sync.Mutex
	receives []time.Time
}

func (b *pollCounter) Publish(context.Context, []byte) (broker.MessageValue, error) {
	return broker.MessageValue{}, errors.New("pollCounter: no Publish")
}

func (b *pollCounter) Receive(context.Context, int) ([]broker.DeliveryValue, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.receives = append(b.receives, time.Now())
	return nil, nil
}

func (b *pollCounter) Ack(context.Context, broker.ReceiptValue) error {
	return errors.New("pollCounter: no Ack")
}

func (b *pollCounter) Nack(context.Context, broker.ReceiptValue, error) (broker.NackValue, error) {
	return broker.NackValue{}, errors.New("pollCounter: no Nack")
}

func (b *pollCounter) times() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.receives)
}

// ConsumeOptions.PollInterval: "Zero means 100ms" — the wait after an
// empty Receive of a broker that is not a Waker. Four Receives of an
// empty broker take three such waits: at least 300ms (a timer never fires
// early), and far less than the three seconds a default of one second
// would take, or the 30ms of one of 10ms.
func TestConsumePollsABrokerThatIsNotAWakerEvery100msByDefault(t *testing.T) {
	b := &pollCounter{}
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- broker.Consume(ctx, b, func(context.Context, broker.DeliveryValue) error { return nil }, broker.ConsumeOptions{})
	}()
	require.Eventually(t, func() bool { return len(b.times()) >= 4 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	fourth := b.times()[3]
	took := fourth.Sub(start)
	require.GreaterOrEqual(t, took, 300*time.Millisecond, "three waits after empty Receives took %v: shorter than 100ms each", took)
	require.Less(t, took, 2*time.Second, "three waits after empty Receives took %v: about a second each, not 100ms", took)
}

// Options.Sync, SyncPublish: "every other event is written to the log
// file before its call returns (a process crash keeps it)"; SyncNone: "a
// process crash loses nothing that a call returned for". An Ack that
// returned before its record was written would be lost to a crash right
// after it returned, and the message delivered again. No crash is timed
// here: every write to a segment fails from the Ack on, and the Ack,
// which returns only once its record is written, must say so.
func TestAnAckUnderSyncPublishOrSyncNoneReturnsOnlyOnceItsRecordIsWritten(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncPublish, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			ffs := vfs.NewFaultFS(vfs.Default)
			e := newEnv(t, func(o *broker.Options) { o.FS = ffs; o.Sync = mode; o.SyncInterval = time.Hour })
			q := e.queue("jobs", policy())
			mustPublish(t, q, "a")
			d := mustReceiveOne(t, q)

			ffs.Inject(vfs.Rule{Op: vfs.OpWrite, NameContains: ".seg", Err: errNoWrite})
			err := q.Ack(ctx(t), d.Lease.Receipt)
			require.ErrorIs(t, err, errNoWrite, "the Ack returned before its record was written")
			require.Positive(t, ffs.Injected(vfs.OpWrite))
		})
	}
}

var errNoWrite = errors.New("no write to the log")
