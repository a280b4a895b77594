package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/brokertest"
)

// The brokers of this module as the conformance suite sees them. Both
// keep every promise of the port, on the suite's clock.
var (
	fileStoreFactory = brokertest.Factory{
		Name: "filestore",
		Caps: brokertest.Capabilities{
			LeaseExtender: true, Rejecter: true, DeadLetterReader: true, DeadLetterManager: true, Waker: true,
			Keyed: true, Batch: true, Capacity: true, Clock: true, ExactExpiry: true, OldestFirst: true, ReplayOnce: true, Closer: true,
		},
		Open: openFileStore,
	}
	memoryFactory = brokertest.Factory{
		Name: "memory",
		Caps: brokertest.Capabilities{
			LeaseExtender: true, Rejecter: true, DeadLetterReader: true, DeadLetterManager: true, Waker: true,
			Keyed: true, Batch: true, Capacity: true, Clock: true, ExactExpiry: true, OldestFirst: true, ReplayOnce: true, Closer: true,
		},
		Open: openMemory,
	}
)

// fileBackend is a Store as a brokertest.Backend.
type fileBackend struct{ s *broker.Store }

func (b fileBackend) Queue(name string, p broker.PolicyValue) (broker.Broker, error) {
	q, err := b.s.Queue(name, p)
	if err != nil {
		return nil, err
	}
	return q, nil
}

func (b fileBackend) Close() error { return b.s.Close() }

// openFileStore opens a store in a fresh directory. The suite is about the
// port, not the disk: SyncNone keeps it fast, and segments of 2 MiB still
// hold a DefaultMaxMessageBytes payload.
func openFileStore(t *testing.T, now func() time.Time) brokertest.Backend {
	s, err := broker.Open(t.TempDir(), broker.Options{Now: now, Sync: broker.SyncNone, SegmentBytes: testSegmentBytes})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, broker.Closed) {
			t.Errorf("Close: %v", err)
		}
	})
	return fileBackend{s}
}

// memoryBackend is a set of Memory queues as a brokertest.Backend.
type memoryBackend struct {
	now    func() time.Time
	queues map[string]*broker.Memory
}

func (b *memoryBackend) Queue(name string, p broker.PolicyValue) (broker.Broker, error) {
	q, err := broker.NewMemory(p, broker.MemoryOptions{Now: b.now})
	if err != nil {
		return nil, err
	}
	b.queues[name] = q
	return q, nil
}

func (b *memoryBackend) Close() error {
	for _, q := range b.queues {
		if err := q.Close(); err != nil {
			return err
		}
	}
	return nil
}

func openMemory(t *testing.T, now func() time.Time) brokertest.Backend {
	b := &memoryBackend{now: now, queues: map[string]*broker.Memory{}}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestConformanceFileStore(t *testing.T) { brokertest.Run(t, fileStoreFactory) }

func TestConformanceMemory(t *testing.T) { brokertest.Run(t, memoryFactory) }

// The README's capability table says what the declarations above say.
func TestConformanceReadmeTable(t *testing.T) {
	brokertest.CheckReadme(t, "../README.md", fileStoreFactory)
	brokertest.CheckReadme(t, "../README.md", memoryFactory)
}
