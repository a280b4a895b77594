package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// The broker workloads run the store of package broker as an application
// would, each on a new store of its own in a new subdirectory: producers
// publishing, consumers draining a backlog, both at once.

// hangTimeout is how long the broker may go without progress (no call in
// flight returning, no commit made, no record written) when a measurement
// ends, and how long it gets to return from Close. Longer means it hung:
// walbench says so and exits rather than wait forever. See inFlight.
const hangTimeout = 20 * time.Second

// storeProgress is a count that grows while s works: its commits and
// records.
func storeProgress(s *broker.Store) func() int64 {
	return func() int64 {
		st := s.Stats()
		return st.Commits + st.Records
	}
}

// orHangTimeout is d, or hangTimeout when d is zero.
func orHangTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return hangTimeout
	}
	return d
}

// benchQueue is the name of the one queue of every store walbench opens.
const benchQueue = "bench"

// queuePolicy is the queue's policy for a store opened with o: leases
// long enough that no message is delivered twice during a measurement,
// and o.maxDeliveries deliveries (0: 5). A store refuses a queue whose
// largest message would not fit in one of its segments: with segments of
// less than twice the default bound, the bound is the workload's message
// size.
func queuePolicy(o storeOptions) broker.PolicyValue {
	p := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: cmp.Or(o.maxDeliveries, 5)}
	if effectiveSegmentBytes(o.segmentBytes) < 2*broker.DefaultMaxMessageBytes {
		p.MaxMessageBytes = max(o.size, 1)
	}
	return p
}

// effectiveSegmentBytes is the segment size a store opened with n uses.
func effectiveSegmentBytes(n int64) int64 {
	if n == 0 {
		return wal.DefaultSegmentBytes
	}
	return n
}

// benchStore is the new store of one workload, in its own directory, with
// its queue.
type benchStore struct {
	what fmt.Stringer // the workload, for errors
	hang time.Duration
	dir  string // "" if not made
	s    *broker.Store
	q    *broker.Queue
	// leaveOpen: release does not close the store, which hung.
	leaveOpen bool
}

// storeOptions is what a benchStore is opened with.
type storeOptions struct {
	sync         broker.SyncMode
	segmentBytes int64 // 0: the default
	size         int   // of the messages: the queue's bound may need it
	fs           vfs.FS
	// maxDeliveries is the queue's MaxDeliveries; 0: 5.
	maxDeliveries int
}

// openStore opens a new store in a new subdirectory of parent, and
// declares its queue. The caller defers release, also after an error; the
// error returned is prefixed with what.
func openStore(what fmt.Stringer, hang time.Duration, parent, pattern string, o storeOptions) (st *benchStore, err error) {
	st = &benchStore{what: what, hang: orHangTimeout(hang)}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%v: %w", what, err)
		}
	}()
	st.dir, err = os.MkdirTemp(parent, pattern)
	if err != nil {
		st.dir = ""
		return st, err
	}
	st.s, err = broker.Open(st.dir, broker.Options{Sync: o.sync, SegmentBytes: o.segmentBytes, FS: o.fs})
	if err != nil {
		st.s = nil
		return st, fmt.Errorf("broker.Open: %w", err)
	}
	st.q, err = st.s.Queue(benchQueue, queuePolicy(o))
	if err != nil {
		return st, fmt.Errorf("store.Queue: %w", err)
	}
	return st, nil
}

// release closes the store, unless it hung, and removes its directory,
// joining what fails to *err.
func (st *benchStore) release(err *error) {
	if st.s != nil && !st.leaveOpen {
		cerr := closeWithin(st.s, st.hang, st.what)
		if *err != nil && errors.Is(cerr, wal.ErrPoisoned) {
			cerr = nil // the failure again: the failed call already said it
		}
		*err = errors.Join(*err, cerr)
	}
	if st.dir != "" {
		if rerr := os.RemoveAll(st.dir); rerr != nil {
			*err = errors.Join(*err, fmt.Errorf("%v: remove store directory: %w", st.what, rerr))
		}
	}
}

// randomPayload returns n random bytes, the same for the same seed:
// nothing below may compress, skip or dedupe them.
func randomPayload(n int, seed uint64) []byte {
	p := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, 2))
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// fillBatch is how many messages one PublishBatch of a prefill carries,
// unless they do not fit in one log segment.
const fillBatch = 256

// fillQueue publishes n payloads of size bytes to q, in batches of
// fillBatch, or fewer when a batch does not fit in one log segment, and
// adds each batch to *done. It stops early, without an error, when ctx
// ends.
func fillQueue(ctx context.Context, q *broker.Queue, n, size int, done *atomic.Int64) error {
	payload := randomPayload(size, 0)
	batch := make([][]byte, fillBatch)
	for i := range batch {
		batch[i] = payload
	}
	for n > 0 {
		if ctx.Err() != nil {
			return nil
		}
		k := min(n, len(batch))
		_, err := q.PublishBatch(context.Background(), batch[:k])
		if errors.Is(err, broker.InvalidBatchSize) && k > 1 {
			batch = batch[:k/2]
			continue
		}
		if err != nil {
			return fmt.Errorf("PublishBatch of %d: %w", k, err)
		}
		n -= k
		if done != nil {
			done.Add(int64(k))
		}
	}
	return nil
}

// parseSync reads a broker sync mode as String writes it.
func parseSync(s string) (broker.SyncMode, error) {
	for _, m := range []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("sync mode %q: want all, publish or none", s)
}

// durable reports whether a Publish under the sync mode named s returns
// only once an fdatasync covers it.
func durable(s string) bool {
	return s == broker.SyncAll.String() || s == broker.SyncPublish.String()
}

// callerRecords is the number of records the store's callers appended
// between two readings of its Stats: Records less OwnRecords. Stats reads
// the two apart, so a window in which little or nothing was written can
// count an own record (a sequence reservation, under SyncNone) in one and
// not yet in the other; such a window appended none, not a negative
// number, which report would refuse.
func callerRecords(before, after broker.StoreStats) int64 {
	return max(0, (after.Records-after.OwnRecords)-(before.Records-before.OwnRecords))
}
