package broker_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/brokertest"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// failingRotationFS fails, once armed, the first rename of a prepared
// segment into place: the rotation that needed it fails having written
// nothing, as when the next segment cannot be made (a full disk). With
// held set, that rename closes held and waits for release before it
// fails, in the log's writer goroutine.
type failingRotationFS struct {
	vfs.FS
	armed   atomic.Bool
	fired   atomic.Bool
	err     error
	held    chan struct{}
	release chan struct{}
}

func (f *failingRotationFS) Rename(oldname, newname string) error {
	if f.armed.Load() && strings.HasSuffix(oldname, ".seg.tmp") && f.fired.CompareAndSwap(false, true) {
		if f.held != nil {
			close(f.held)
			<-f.release
		}
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: f.err}
	}
	return f.FS.Rename(oldname, newname)
}

func (f *failingRotationFS) CheckDir(dir string) error { return vfs.CheckDir(f.FS, dir) }

// stallInFailure is an injected error whose Is method holds the first
// goroutine that classifies it in Store.failure (the call that met the
// log's failure, on its way to stopping the store) until released.
type stallInFailure struct {
	hit     atomic.Bool
	stalled chan struct{}
	release chan struct{}
}

func (e *stallInFailure) Error() string { return "injected: rename of the next segment failed" }

func (e *stallInFailure) Is(target error) bool {
	if target == wal.ErrClosed && strings.Contains(string(debug.Stack()), "(*Store).failure") && e.hit.CompareAndSwap(false, true) {
		close(e.stalled)
		<-e.release
	}
	return false
}

// rotateFailStore opens a store of the smallest segments over fs, with
// maintenance left to the test, and publishes n messages to "jobs".
func rotateFailStore(t *testing.T, dir string, fs vfs.FS, n int) (*broker.Store, *broker.Queue, *brokertest.Clock) {
	t.Helper()
	clock := brokertest.NewClock(t0)
	opts := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, FS: fs}
	broker.ManualMaintenance(&opts)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 512})
	require.NoError(t, err)
	for range n / 100 {
		batch := make([][]byte, 100)
		for i := range batch {
			batch[i] = []byte("payload")
		}
		_, err := q.PublishBatch(context.Background(), batch)
		require.NoError(t, err)
	}
	return s, q, clock
}

// requireCheckpointIsTheLogs closes s, reopens dir from its checkpoint,
// then from its log alone (the index removed), and requires the same
// state of both: the checkpoint holds nothing the log did not take.
func requireCheckpointIsTheLogs(t *testing.T, s *broker.Store, dir string, clock *brokertest.Clock) {
	t.Helper()
	_ = s.Close()
	opts := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes}
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	fromCheckpoint := broker.Dump(s)
	require.NoError(t, s.Close())
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
	s, err = broker.Open(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	if fromLog := broker.Dump(s); fromCheckpoint != fromLog {
		t.Errorf("the checkpoint holds a state the log does not:\n%s", broker.StateDiff(fromLog, fromCheckpoint))
	}
}

// TestARotationFailureStopsTheStoreBeforeAnyOtherCallOrCheckpointGoesOn:
// "The broker stops the store at any error of the log but ErrClosed, a
// failure to prepare the next segment included: the index already holds
// the change the log could not take" (DESIGN "Failures"), and a
// checkpoint holds "exactly the log's durable prefix" (maintain.go). The
// log stops itself at a failed rotation before it releases the batch that
// needed the new segment (wal.Options.StopOnRotationFailure), so the store
// is stopped for everyone from that moment, not only once the call that
// met the failure gets to Store.failure.
//
// In the first two cases that call (an Ack, a Receive, whose record needed
// the new segment) is held just before Store.failure sets the store
// failed: a Publish begun meanwhile fails, saying the store failed and
// must be reopened, and a checkpoint begun meanwhile writes nothing. In
// the third, a checkpoint that began before the failure (its every queue
// stopped, its barrier queued behind the failing batch) writes nothing
// either. Before the fix, the Publish returned nil and the checkpoints
// were written holding the Ack or the lease the log refused: reopened
// from the checkpoint the message was gone (or leased), rebuilt from the
// log alone it was still leased (or ready).
func TestARotationFailureStopsTheStoreBeforeAnyOtherCallOrCheckpointGoesOn(t *testing.T) {
	const n = 1200
	c := context.Background()
	for _, tc := range []struct {
		name string
		// prepare readies the queue; op makes the i-th call.
		prepare func(t *testing.T, q *broker.Queue) []broker.DeliveryValue
		op      func(q *broker.Queue, ds []broker.DeliveryValue, i int) error
	}{
		{
			name: "an Ack",
			prepare: func(t *testing.T, q *broker.Queue) []broker.DeliveryValue {
				ds, err := q.Receive(c, n)
				require.NoError(t, err)
				require.Len(t, ds, n)
				return ds
			},
			op: func(q *broker.Queue, ds []broker.DeliveryValue, i int) error { return q.Ack(c, ds[i].Lease.Receipt) },
		},
		{
			name:    "a Receive",
			prepare: func(*testing.T, *broker.Queue) []broker.DeliveryValue { return nil },
			op: func(q *broker.Queue, _ []broker.DeliveryValue, _ int) error {
				_, err := q.Receive(c, 1)
				return err
			},
		},
	} {
		t.Run(tc.name+" held on its way to stopping the store", func(t *testing.T) {
			dir := t.TempDir()
			stall := &stallInFailure{stalled: make(chan struct{}), release: make(chan struct{})}
			fs := &failingRotationFS{FS: vfs.Default, err: stall}
			s, q, clock := rotateFailStore(t, dir, fs, n)
			ds := tc.prepare(t, q)

			fs.armed.Store(true)
			done := make(chan error, 1)
			go func() {
				for i := range n {
					if err := tc.op(q, ds, i); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			select {
			case <-stall.stalled:
			case err := <-done:
				t.Fatalf("test setup: no call met the rotation failure (%v)", err)
			}
			// The call that met the failure is held on its way to
			// stopping the store: nothing else may go on meanwhile.
			_, pubErr := q.Publish(c, []byte("after the failure"))
			ckptErr := s.Maintain()
			close(stall.release)
			err := <-done
			require.Error(t, err)
			require.ErrorContains(t, err, "failed and must be reopened")
			t.Logf("the failed call: %v; a checkpoint begun after it: %v", err, ckptErr)
			if pubErr == nil {
				t.Errorf("a Publish begun after a call met the log's failure returned nil: the store had not stopped")
			} else {
				require.ErrorContains(t, pubErr, "failed and must be reopened")
			}
			requireCheckpointIsTheLogs(t, s, dir, clock)
		})
	}

	t.Run("a checkpoint waiting on its barrier meanwhile", func(t *testing.T) {
		dir := t.TempDir()
		fs := &failingRotationFS{FS: vfs.Default, err: syscall.EIO, held: make(chan struct{}), release: make(chan struct{})}
		s, q, clock := rotateFailStore(t, dir, fs, n)
		ds, err := q.Receive(c, n)
		require.NoError(t, err)

		fs.armed.Store(true)
		done := make(chan error, 1)
		go func() {
			for _, d := range ds {
				if err := q.Ack(c, d.Lease.Receipt); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		select {
		case <-fs.held:
		case err := <-done:
			t.Fatalf("test setup: no Ack needed the next segment (%v)", err)
		}
		// The writer is in the failing rotation, an Ack waiting on it.
		// A checkpoint stops every queue and queues its barrier.
		ckpt := make(chan error, 1)
		go func() { ckpt <- s.Maintain() }()
		// Once it holds the store's lock (it does until its barrier
		// returns), a Queues call waits for it. A probe that has not
		// returned after 100 ms is not proof of that on a loaded machine
		// (it may not have run yet): released before the checkpoint took
		// the lock, the Ack fails first and the checkpoint, begun on a
		// failed store, returns nil. So the probe must also be seen parked
		// on a mutex inside Store.Queues.
		for parked := false; !parked; {
			probe := make(chan struct{})
			go func() { s.Queues(); close(probe) }()
			wait := time.After(100 * time.Millisecond)
		poll:
			for {
				select {
				case <-probe:
					time.Sleep(time.Millisecond)
					break poll
				case <-wait:
					wait = time.After(time.Millisecond)
					if parked = queuesWaitsForALock(); parked {
						break poll
					}
				}
			}
		}
		close(fs.release)
		require.ErrorIs(t, <-done, syscall.EIO, "the Ack that needed the next segment")
		if ckptErr := <-ckpt; ckptErr == nil {
			t.Errorf("a checkpoint whose barrier completed after the failure returned nil")
		} else {
			require.ErrorContains(t, ckptErr, "failed and must be reopened")
		}
		requireCheckpointIsTheLogs(t, s, dir, clock)
	})
}

// queuesWaitsForALock reports whether a goroutine is parked on a mutex
// inside Store.Queues: its lock is held by someone else.
func queuesWaitsForALock() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[sync.Mutex.Lock") && strings.Contains(g, "broker.(*Store).Queues(") {
			return true
		}
	}
	return false
}
