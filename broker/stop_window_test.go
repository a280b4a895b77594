package broker_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// blockingHandler is a slog.Handler that blocks the goroutine logging
// a record whose message contains match until release is closed, as a
// handler writing to a slow or stalled sink does. Options.Logger's handler
// is the caller's code: the store must not depend on it returning quickly
// to keep its own promises.
type blockingHandler struct {
	match   string
	entered chan struct{}
	once    *sync.Once
	release chan struct{}
}

func (h blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h blockingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h blockingHandler) WithGroup(string) slog.Handler            { return h }
func (h blockingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.once.Do(func() { close(h.entered) })
		<-h.release
	}
	return nil
}

// Queue.Wake's signal is closed "for good when the store closes or stops:
// then it is closed already, nothing is Scheduled, and Wake leaves the
// queue's state alone". So from the instant a failed fdatasync has
// stopped the store (the Publish that met it returned the failure, and
// Err reports it), even while the logger's handler, the caller's code,
// still holds the failure's record: a consumer using the Waker contract
// (not Consume, which also watches the store's end) would otherwise wait
// on a signal nothing closes for as long as the handler takes. (Wake used
// to look at the queue's shut flag alone, which the stop set only after
// the handler returned.)
func TestWakeOfAStoppedStoreIsClosedAndSchedulesNothingBeforeItsQueuesAreShut(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	h := blockingHandler{match: "store failed", entered: make(chan struct{}), once: new(sync.Once), release: make(chan struct{})}
	s, err := broker.Open(t.TempDir(), broker.Options{FS: ffs, Logger: slog.New(h), SegmentBytes: broker.MinSegmentBytes * 4})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(h.release) }) }
	defer release()

	q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024})
	require.NoError(t, err)
	_, err = q.Publish(context.Background(), []byte("ready"))
	require.NoError(t, err)

	ffs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: ".seg"})
	_, err = q.Publish(context.Background(), []byte("fails"))
	require.Error(t, err, "the fdatasync of the publish failed")
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the store's failure was never logged")
	}
	require.Error(t, s.Err(), "the store stopped for good")

	w := q.Wake()
	signalClosed := false
	select {
	case <-w.Signal:
		signalClosed = true
	default:
	}
	require.True(t, signalClosed && !w.Scheduled,
		"Wake of a store that stopped (Err: %v) must hand out a closed signal and schedule nothing; got signal closed=%v, Scheduled=%v, In=%v",
		s.Err(), signalClosed, w.Scheduled, w.In)
}

// Close's checkpoint commits a publish that was in flight when it began
// (the message is in the checkpoint, and the Publish returns nil), and
// Close then freezes the queue's figures (freezeQueueStats) for good
// ("Once the store is closed, they are those Close left, and do not
// move"): they count the message in Published as well as in Ready, even
// when Close freezes them before the Publish is back from its wait (it
// used to count itself only then, after its last unlock). Here the publish carries one large payload (its
// copy for the returned MessageValue takes milliseconds) and the store
// lives on tmpfs where there is one (Close's own fdatasyncs then take
// microseconds, so that Close reaches the freeze first); a vfs hook holds
// the log's writer after it wrote the publish until Close has begun. On a
// slower disk the window is reached less often, and the counts must hold
// all the same.
func TestStatsAfterCloseCountAPublishCloseCommitted(t *testing.T) {
	const big = 12 << 20
	failed := -1
	const rounds = 5
	for round := 0; round < rounds; round++ {
		dir := filepath.Join(fastDir(t), "store")
		ffs := vfs.NewFaultFS(vfs.Default)
		s, err := broker.Open(dir, broker.Options{FS: ffs, Sync: broker.SyncAll, SegmentBytes: 16 << 20})
		require.NoError(t, err)
		q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: big})
		require.NoError(t, err)
		_, err = q.Publish(context.Background(), []byte("before"))
		require.NoError(t, err)

		var armed atomic.Bool
		armed.Store(true)
		written, release := make(chan struct{}), make(chan struct{})
		ffs.Observe(func(e vfs.Event) {
			if e.Op == vfs.OpWrite && e.Len >= big && strings.Contains(filepath.Base(e.Name), ".seg") && armed.CompareAndSwap(true, false) {
				close(written)
				<-release // the writer holds the publish until Close has begun
			}
		})
		pubErr := make(chan error, 1)
		go func() {
			_, err := q.Publish(context.Background(), make([]byte, big))
			pubErr <- err
		}()
		select {
		case <-written:
		case <-time.After(20 * time.Second):
			t.Fatal("the log never wrote the large publish")
		}
		closeErr := make(chan error, 1)
		go func() { closeErr <- s.Close() }()
		for s.Err() == nil {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(5 * time.Millisecond) // Close's checkpoint takes the queue and queues its barrier
		close(release)
		require.NoError(t, <-closeErr)
		require.NoError(t, <-pubErr, "the publish in flight when Close began")
		st := q.Stats()
		if st.Ready != 2 {
			t.Fatalf("round %d: expected both messages ready in the closed store's figures, got %+v", round, st)
		}
		if st.Published != 2 {
			failed = round
			t.Logf("round %d: Close's frozen Stats: Ready %d but Published %d", round, st.Ready, st.Published)
			break
		}
	}
	if failed >= 0 {
		t.Fatalf("in round %d of at most %d a Publish that returned nil, and whose message Close's checkpoint committed (Ready counts it), is missing from the closed queue's Published for good: expected Published 2, as Ready", failed, rounds)
	}
}
