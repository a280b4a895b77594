package broker

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/wal"
)

// maxEventFields bounds the bytes a publish event adds to its payload and
// key: kind, queue, sequence, instant, key length.
const maxEventFields = 64

// Store is one directory holding one write-ahead log shared by all its
// queues: one implementation for every queue, which differ only by name,
// policy and counters.
//
// A Store is safe for concurrent use. It retains its directory's lock until
// Close.
type Store struct {
	dir  string
	opts Options
	log  *wal.Log
	idx  *index.Index
	keys receiptKeys

	// mu guards queues and serialises declarations.
	mu     sync.Mutex
	queues map[string]*Queue

	closed atomic.Bool
	// failed holds the error that stopped the store: a failed append leaves
	// the in-memory state ahead of the log, so nothing may go on until the
	// store is reopened (fail-stop).
	failed atomic.Pointer[error]

	// nonceMu guards nonces, the generator of lease nonces.
	nonceMu sync.Mutex
	nonces  *mrand.ChaCha8
}

// Open opens the store in dir, creating the directory (0700) if it is
// missing, and rebuilds every queue by replaying the log. A second Open of
// the same directory, in this process or another, fails with Locked. A log
// that fails verification fails with Corrupt, naming the file and byte
// offset (see Options.Salvage).
func Open(dir string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l, err := wal.Open(dir, opts.walOptions())
	if err != nil {
		return nil, openError(dir, err)
	}
	s := &Store{dir: dir, opts: opts, log: l, idx: index.New(), queues: map[string]*Queue{}}
	if err := l.Iterate(0, s.idx.ApplyRecord); err != nil {
		_ = l.Close()
		return nil, openError(dir, err)
	}
	if s.idx.Secret == nil {
		secret := make([]byte, index.SecretSize)
		_, _ = rand.Read(secret)
		meta := index.Event{Kind: index.KindMeta, Secret: secret}
		if _, err := l.Append(meta.Append(nil)); err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("broker: open %s: %w", dir, err)
		}
		s.idx.Secret = secret
	}
	s.keys = newReceiptKeys(s.idx.Secret)
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	s.nonces = mrand.NewChaCha8(seed)
	if rec := l.Recovery(); rec.TornTail != nil || len(rec.Salvaged) > 0 || s.idx.Orphans > 0 {
		opts.Logger.Warn("broker: recovered", "dir", dir, "torn_tail", rec.TornTail != nil, "salvaged_spans", len(rec.Salvaged), "orphan_events", s.idx.Orphans)
	}
	return s, nil
}

func openError(dir string, err error) error {
	switch {
	case errors.Is(err, wal.ErrLocked):
		return fmt.Errorf("broker: open %s: %w: %w", dir, Locked, err)
	case errors.Is(err, wal.ErrCorrupt), errors.Is(err, index.ErrBadEvent):
		return fmt.Errorf("broker: open %s: %w: %w", dir, Corrupt, err)
	}
	return fmt.Errorf("broker: open %s: %w", dir, err)
}

// Queue returns the queue named name, declaring it with policy the first
// time. Calling it again with a different policy applies the new policy
// from then on (the change is written to the log). The same *Queue is
// returned for a name every time.
//
// A name is 1 to 64 characters of [A-Za-z0-9._-] not starting with '.';
// anything else is refused (QueueMisconfigured), as is a policy that fails
// Validate or whose MaxMessageBytes could not fit in one log segment.
func (s *Store) Queue(name string, policy PolicyValue) (*Queue, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := validQueueName(name); err != nil {
		return nil, err
	}
	if err := policy.Validate(); err != nil {
		return nil, fmt.Errorf("broker: queue %q: %w", name, err)
	}
	if limit := s.maxPayload(); policy.maxMessageBytes() > limit {
		return nil, fmt.Errorf("broker: queue %q: MaxMessageBytes %d exceeds what one log segment holds (%d; see Options.SegmentBytes): %w",
			name, policy.maxMessageBytes(), limit, QueueMisconfigured)
	}
	rec := policyRecord(policy)

	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		iq := s.idx.Queue(name)
		if iq == nil {
			id := s.idx.NextQueueID()
			if err := s.declare(id, name, rec); err != nil {
				return nil, err
			}
			iq = s.idx.Declare(id, name, rec)
		}
		q = newQueue(s, iq, policyValue(iq.Policy))
		s.queues[name] = q
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.iq.Policy != rec {
		if err := s.declare(q.iq.ID, name, rec); err != nil {
			return nil, err
		}
		s.idx.Declare(q.iq.ID, name, rec)
		q.policy = policy
	}
	return q, nil
}

// declare writes a queue's declaration and waits until it is durable.
func (s *Store) declare(id uint32, name string, p index.Policy) error {
	e := index.Event{Kind: index.KindDeclare, Queue: id, Name: name, Policy: p}
	_, err := s.wait(s.log.Enqueue(true, e.Append(nil)))
	return err
}

// maxPayload is the largest payload one publish record can carry.
func (s *Store) maxPayload() int {
	seg := s.opts.SegmentBytes
	if seg == 0 {
		seg = wal.DefaultSegmentBytes
	}
	// Less the segment header, the record's frame header, room for the
	// seal frame, and the publish event's own fields (a key at most).
	return int(seg) - segment.HeaderSize - 2*segment.Size(0) - maxEventFields - maxKeyBytes
}

func validQueueName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("broker: queue name %q %s: %w", name, why, QueueMisconfigured)
	}
	if len(name) == 0 || len(name) > 64 {
		return bad(fmt.Sprintf("has %d bytes, want 1 to 64", len(name)))
	}
	if name[0] == '.' {
		return bad("starts with '.'")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return bad(fmt.Sprintf("has %q at byte %d; allowed are A-Z a-z 0-9 . _ -", c, i))
		}
	}
	return nil
}

// Queues returns the names of every queue the store holds, sorted.
func (s *Store) Queues() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := s.idx.Queues()
	slices.Sort(names)
	return names
}

// StoreStats describes the store's log.
type StoreStats struct {
	Segments             int     // segment files
	DiskBytes            int64   // their total size
	Commits              int64   // fdatasyncs since open
	Records              int64   // events appended since open
	MeanRecordsPerCommit float64 // Records / Commits
	MaxRecordsPerCommit  int64
}

// Stats returns the store's figures.
func (s *Store) Stats() StoreStats {
	w := s.log.Stats()
	st := StoreStats{
		Segments:            w.Segments,
		DiskBytes:           w.DiskBytes,
		Commits:             w.Syncs,
		Records:             w.Records,
		MaxRecordsPerCommit: w.MaxRecordsPerSync,
	}
	if w.Syncs > 0 {
		st.MeanRecordsPerCommit = float64(w.Records) / float64(w.Syncs)
	}
	return st
}

// Close makes everything durable and releases the directory. Calls queued
// before Close complete; later ones, on the store or any of its queues,
// fail with Closed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return fmt.Errorf("broker: store %s: %w", s.dir, Closed)
	}
	if err := s.log.Close(); err != nil {
		return fmt.Errorf("broker: close %s: %w", s.dir, err)
	}
	return nil
}

// usable returns the error every call gets once the store is closed or has
// failed.
func (s *Store) usable() error {
	if s.closed.Load() {
		return fmt.Errorf("broker: store %s: %w", s.dir, Closed)
	}
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// wait waits for a queued append. Any failure stops the store: the index
// already holds the change the log could not take.
func (s *Store) wait(p *wal.Pending) ([]wal.Position, error) {
	pos, err := p.Wait()
	if err != nil {
		return nil, s.failure(err)
	}
	return pos, nil
}

// failure turns an error of the log into the caller's error, and stops the
// store unless the log was merely closed.
func (s *Store) failure(err error) error {
	if errors.Is(err, wal.ErrClosed) {
		return fmt.Errorf("broker: store %s: %w", s.dir, Closed)
	}
	failure := fmt.Errorf("broker: store %s failed and must be reopened: %w", s.dir, err)
	if s.failed.CompareAndSwap(nil, &failure) {
		s.opts.Logger.Error("broker: store failed; close and reopen it", "dir", s.dir, "err", err)
	}
	return *s.failed.Load()
}

// nonce returns a random lease nonce.
func (s *Store) nonce() uint64 {
	s.nonceMu.Lock()
	defer s.nonceMu.Unlock()
	return s.nonces.Uint64()
}

// now reads the broker clock in Unix nanoseconds.
func (s *Store) now() int64 { return s.opts.Now().UnixNano() }

// deadline returns now + d, or false when that instant cannot be recorded
// (past year 2262 in Unix nanoseconds).
func deadline(now int64, d time.Duration) (int64, bool) {
	if d > 0 && now > math.MaxInt64-int64(d) {
		return 0, false
	}
	return now + int64(d), true
}

func policyRecord(p PolicyValue) index.Policy {
	return index.Policy{
		VisibilityTimeout: int64(p.VisibilityTimeout),
		RetryDelay:        int64(p.RetryDelay),
		MaxRetryDelay:     int64(p.MaxRetryDelay),
		MaxDeliveries:     int64(p.MaxDeliveries),
		MaxMessageBytes:   int64(p.MaxMessageBytes),
		Capacity:          int64(p.Capacity),
		DedupWindow:       int64(p.DedupWindow),
	}
}

func policyValue(p index.Policy) PolicyValue {
	return PolicyValue{
		VisibilityTimeout: time.Duration(p.VisibilityTimeout),
		RetryDelay:        time.Duration(p.RetryDelay),
		MaxRetryDelay:     time.Duration(p.MaxRetryDelay),
		MaxDeliveries:     int(p.MaxDeliveries),
		MaxMessageBytes:   int(p.MaxMessageBytes),
		Capacity:          int(p.Capacity),
		DedupWindow:       time.Duration(p.DedupWindow),
	}
}
