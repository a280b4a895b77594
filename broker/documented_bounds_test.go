package broker_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

func docPolicy() broker.PolicyValue {
	return broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1 << 10}
}

// TestCommitsCountsOnlyFdatasyncsThatMadeRecordsDurable: StoreStats.Commits
// are the "fdatasyncs of the active segment that made appended records
// durable". Under SyncAll every record is durable before its call
// returns, so a rotation's fdatasync of the seal makes no appended record
// durable; it is no commit.
func TestCommitsCountsOnlyFdatasyncsThatMadeRecordsDurable(t *testing.T) {
	opts := broker.Options{SegmentBytes: broker.MinSegmentBytes}
	broker.ManualMaintenance(&opts)
	s, err := broker.Open(filepath.Join(t.TempDir(), "store"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, err := s.Queue("jobs", docPolicy())
	if err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	const n = 40
	payload := make([]byte, 900)
	for range n { // one at a time: each waits for its own fdatasync
		if _, err := q.Publish(context.Background(), payload); err != nil {
			t.Fatal(err)
		}
	}
	after := s.Stats()
	rotations := after.Segments - before.Segments
	if rotations == 0 {
		t.Fatal("test setup: no rotation happened")
	}
	if got := after.Commits - before.Commits; got != n {
		t.Errorf("%d sequential SyncAll publishes, %d rotations: Commits grew by %d, want %d (one per publish: "+
			"the seal's fdatasync at each rotation made no appended record durable)", n, rotations, got, n)
	}
}

// TestCloseOfAStoreStoppedByAFullDiskReturnsNil: Store.Close of a store
// "stopped because the next segment could not be made (a full disk,
// usually ...)" returns nil once its files are closed, although the clean
// mark, a new file, cannot be written; and the store reopens with every
// message.
func TestCloseOfAStoreStoppedByAFullDiskReturnsNil(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	opts := broker.Options{SegmentBytes: broker.MinSegmentBytes, FS: ffs}
	broker.ManualMaintenance(&opts)
	dir := filepath.Join(t.TempDir(), "store")
	s, err := broker.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Queue("jobs", docPolicy())
	if err != nil {
		t.Fatal(err)
	}
	// The disk fills: the blocks the log already holds can be overwritten,
	// but nothing new gets a block (new segments, the CLEAN mark).
	// (A FaultFS names a file by the name it was opened with: segments 1
	// and 2, already made, were opened as .seg.tmp files.)
	full := func(name string) bool {
		base := filepath.Base(name)
		if base == "CLEAN" {
			return true
		}
		return strings.HasSuffix(base, ".tmp") && !strings.HasPrefix(base, "0000000001.") && !strings.HasPrefix(base, "0000000002.")
	}
	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, Match: full, Err: syscall.ENOSPC})
	ffs.Inject(vfs.Rule{Op: vfs.OpAllocate, Match: full, Err: syscall.ENOSPC})
	payload := make([]byte, 900)
	var perr error
	published := 0
	for i := 0; i < 200 && perr == nil; i++ {
		if _, perr = q.Publish(context.Background(), payload); perr == nil {
			published++
		}
	}
	if !errors.Is(perr, syscall.ENOSPC) {
		t.Fatalf("test setup: publishes did not meet the full disk: %v", perr)
	}
	if err := s.Err(); err == nil {
		t.Fatal("test setup: the store did not stop")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close of a store stopped because the next segment could not be made (full disk): want nil as documented, got %v", err)
	}
	s, err = broker.Open(dir, broker.Options{SegmentBytes: broker.MinSegmentBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, err = s.Queue("jobs", docPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Ready != published {
		t.Errorf("reopened with space: %d messages ready, want the %d published", st.Ready, published)
	}
}

// TestMemoryRefusesABatchTheStoreRefuses: Memory has "the file-backed
// [Queue]'s semantics — the same errors". A batch larger than one log
// segment of a store with the default SegmentBytes is refused by that
// store (InvalidBatchSize) whatever the queue holds, and by a Memory with
// the same policy: a test run against a Memory meets the refusal the
// program would meet against the store.
func TestMemoryRefusesABatchTheStoreRefuses(t *testing.T) {
	pol := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 64 << 10}
	payload := make([]byte, 64<<10)
	batch := make([][]byte, 1025) // 64 MiB and more: more than one 64 MiB segment holds (one payload, shared)
	for i := range batch {
		batch[i] = payload
	}

	opts := broker.Options{}
	broker.ManualMaintenance(&opts)
	s, err := broker.Open(filepath.Join(t.TempDir(), "store"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, err := s.Queue("jobs", pol)
	if err != nil {
		t.Fatal(err)
	}
	_, serr := q.PublishBatch(context.Background(), batch)
	if !errors.Is(serr, broker.InvalidBatchSize) {
		t.Fatalf("test setup: the store took the batch: %v", serr)
	}

	m, err := broker.NewMemory(pol, broker.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, merr := m.PublishBatch(context.Background(), batch)
	if !errors.Is(merr, broker.InvalidBatchSize) {
		t.Errorf("the same policy and batch: the store refuses it (%v), the Memory that promises the store's errors returns %v", serr, merr)
	}
}
