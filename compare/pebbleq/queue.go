// Package pebbleq is a minimal durable queue on Pebble, for comparison
// with walbroker (see package compare).
//
// Every write is a Pebble batch committed with pebble.Sync: it returns
// once the write-ahead log holding it has been fdatasynced. Concurrent
// synced commits share that fdatasync in Pebble's commit pipeline, which
// is this queue's only group commit.
//
// # Keys
//
// A message is stored under 'm' followed by its ID as 8 bytes big-endian,
// so that the keys sort in publishing order; its value is the payload. A
// leased message also has a lease record under 'l' followed by the same 8
// bytes, whose value is the lease's expiry, Unix nanoseconds as 8 bytes
// big-endian.
//
//   - Publish is one Set of a message record under the next ID.
//   - PublishBatch is one batch of Sets.
//   - Receive claims the oldest ready IDs in memory, reads their payloads,
//     and writes their lease records in one batch.
//   - Ack deletes the message records and lease records in one batch.
//
// Which messages are ready and which are leased is kept in memory (package
// claim) and rebuilt by Open from a scan of both key ranges: a message
// whose lease record names an expiry that has passed is ready again.
//
// A lease record can outlive its message. Receive reads a payload outside
// the batch that writes its lease, and an Ack names a message, not a
// lease: after a lapse, the first holder's Ack can end a second Receive's
// lease and delete the message between that Receive's read and its
// batch, which then writes a lease record for a message that is gone.
// While the queue is open the record is inert: in memory the message is
// gone, neither ready nor leased, and no ID is given twice. Open deletes
// every such record before it gives out an ID, since a record left in
// place would lease the next message to take its ID (see below) until the
// old expiry.
//
// IDs count up from the highest message stored when the queue opened, so
// the ID of a message acknowledged before a reopen may be given again
// after it. bbolt's bucket sequence (package boltq) does not have that
// limit; walbroker never reissues an ID.
package pebbleq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/walbroker/walbroker/compare"
	"github.com/walbroker/walbroker/compare/internal/claim"
	"github.com/walbroker/walbroker/compare/internal/gate"
)

// Key prefixes, as described in the package documentation.
const (
	messagePrefix = 'm'
	leasePrefix   = 'l'
	keyLen        = 9
)

// DefaultLease is the lease a Receive grants when Options.Lease is zero.
const DefaultLease = time.Minute

// MaxLease is the longest Options.Lease Open accepts: 100 years, walbroker's
// broker.MaxDeadlineOffset. A lease's expiry is stored as Unix nanoseconds,
// whose int64 ends in April 2262; now + MaxLease still fits for any now
// before 2162.
const MaxLease = 100 * 365 * 24 * time.Hour

// Options configures Open. The zero value is valid.
type Options struct {
	// Now is the clock lease expiries are measured on. Nil means time.Now.
	Now func() time.Time
	// Lease is how long a Receive hides a message from every other
	// Receive. Zero means DefaultLease; negative, or above MaxLease, is
	// refused.
	Lease time.Duration
	// Logger receives Pebble's log. Nil drops its informational lines
	// (a few per open, about the WAL it replayed) and sends its errors
	// to the standard library's log, as Pebble's default logger does.
	Logger pebble.Logger
}

// quietLogger is the Logger Open uses when Options.Logger is nil.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(format string, args ...any) {
	pebble.DefaultLogger.Errorf(format, args...)
}

// Fatalf is how Pebble reports a broken invariant of its own; like
// Pebble's default logger, it ends the process.
func (quietLogger) Fatalf(format string, args ...any) {
	pebble.DefaultLogger.Fatalf(format, args...)
}

// Queue is a durable queue in one Pebble database. It implements
// compare.Queue and is safe for concurrent use. It retains nothing its
// callers pass.
type Queue struct {
	db     *pebble.DB
	lease  time.Duration
	claims *claim.Table
	// lastID is the highest ID given out; Publish adds to it.
	lastID atomic.Uint64

	// gate keeps db from being closed under a call.
	gate gate.Gate
}

var _ compare.Queue = (*Queue)(nil)

// Open opens (creating it if needed) the queue whose Pebble database is
// the directory dir, and rebuilds its ready and leased sets.
func Open(dir string, opts Options) (*Queue, error) {
	switch {
	case opts.Lease < 0:
		return nil, fmt.Errorf("pebbleq: Lease %v is negative", opts.Lease)
	case opts.Lease > MaxLease:
		return nil, fmt.Errorf("pebbleq: Lease %v exceeds MaxLease %v", opts.Lease, MaxLease)
	case opts.Lease == 0:
		opts.Lease = DefaultLease
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger{}
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("pebbleq: opening %s: %w", dir, err)
	}
	q := &Queue{db: db, lease: opts.Lease, claims: claim.New(opts.Now)}
	if err := q.load(); err != nil {
		return nil, errors.Join(fmt.Errorf("pebbleq: loading %s: %w", dir, err), db.Close())
	}
	return q, nil
}

// load scans the lease records, then the message records, into q.claims,
// sets q.lastID to the highest message ID found, and deletes the lease
// records whose message is gone, in one synced batch.
func (q *Queue) load() error {
	leases := make(map[uint64]time.Time)
	err := q.scan(leasePrefix, func(id uint64, value []byte) error {
		if len(value) != 8 {
			return fmt.Errorf("lease record of message %d holds %d bytes, want 8", id, len(value))
		}
		leases[id] = time.Unix(0, int64(binary.BigEndian.Uint64(value)))
		return nil
	})
	if err != nil {
		return err
	}
	err = q.scan(messagePrefix, func(id uint64, _ []byte) error {
		q.claims.Load(id, leases[id])
		delete(leases, id)
		q.lastID.Store(max(q.lastID.Load(), id))
		return nil
	})
	if err != nil || len(leases) == 0 {
		return err
	}
	// What is left in leases has no message (see the package
	// documentation); its ID may be given again from now on.
	b := q.db.NewBatch()
	defer b.Close()
	for id := range leases {
		if err := b.Delete(key(leasePrefix, id), nil); err != nil {
			return fmt.Errorf("batching the deletion of the lease record of gone message %d: %w", id, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("deleting %d lease records of gone messages: %w", len(leases), err)
	}
	return nil
}

// scan calls fn with the ID and value of every record under prefix, in
// key order. value is valid only during the call.
func (q *Queue) scan(prefix byte, fn func(id uint64, value []byte) error) error {
	it, err := q.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != keyLen {
			return errors.Join(fmt.Errorf("key %x is %d bytes, want %d", k, len(k), keyLen), it.Close())
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return errors.Join(fmt.Errorf("reading key %x: %w", k, err), it.Close())
		}
		if err := fn(binary.BigEndian.Uint64(k[1:]), v); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	return it.Close()
}

// Publish stores payload under the next ID with one synced Set.
func (q *Queue) Publish(ctx context.Context, payload []byte) (uint64, error) {
	if err := q.gate.Enter(ctx); err != nil {
		return 0, err
	}
	defer q.gate.Leave()
	id := q.lastID.Add(1)
	if err := q.db.Set(key(messagePrefix, id), payload, pebble.Sync); err != nil {
		return 0, fmt.Errorf("pebbleq: publishing message %d: %w", id, err)
	}
	q.claims.Ready(id)
	return id, nil
}

// PublishBatch stores payloads under consecutive IDs in one synced batch.
func (q *Queue) PublishBatch(ctx context.Context, payloads [][]byte) ([]uint64, error) {
	if err := q.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer q.gate.Leave()
	if len(payloads) == 0 {
		return nil, nil
	}
	first := q.lastID.Add(uint64(len(payloads))) - uint64(len(payloads)) + 1
	b := q.db.NewBatch()
	defer b.Close()
	ids := make([]uint64, len(payloads))
	for i, p := range payloads {
		ids[i] = first + uint64(i)
		if err := b.Set(key(messagePrefix, ids[i]), p, nil); err != nil {
			return nil, fmt.Errorf("pebbleq: batching message %d: %w", ids[i], err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return nil, fmt.Errorf("pebbleq: publishing messages %d to %d: %w", first, ids[len(ids)-1], err)
	}
	q.claims.Ready(ids...)
	return ids, nil
}

// Receive claims up to max of the oldest ready messages, reads them, and
// writes their lease records in one synced batch.
func (q *Queue) Receive(ctx context.Context, max int) ([]compare.Message, error) {
	if max < 1 {
		return nil, fmt.Errorf("pebbleq: receive max %d: %w", max, compare.ErrInvalidMax)
	}
	if err := q.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer q.gate.Leave()
	ids, expiry := q.claims.Claim(max, q.lease)
	if len(ids) == 0 {
		return nil, nil
	}
	msgs := make([]compare.Message, 0, len(ids))
	b := q.db.NewBatch()
	defer b.Close()
	var value [8]byte
	binary.BigEndian.PutUint64(value[:], uint64(expiry.UnixNano()))
	for _, id := range ids {
		payload, closer, err := q.db.Get(key(messagePrefix, id))
		if errors.Is(err, pebble.ErrNotFound) {
			// Acknowledged by the holder of an earlier lease after it
			// lapsed: there is nothing left to lease.
			continue
		}
		if err != nil {
			q.claims.Unclaim(ids, expiry)
			return nil, fmt.Errorf("pebbleq: reading message %d: %w", id, err)
		}
		msgs = append(msgs, compare.Message{ID: id, Payload: append([]byte(nil), payload...)})
		if err := closer.Close(); err != nil {
			q.claims.Unclaim(ids, expiry)
			return nil, fmt.Errorf("pebbleq: reading message %d: %w", id, err)
		}
		if err := b.Set(key(leasePrefix, id), value[:], nil); err != nil {
			q.claims.Unclaim(ids, expiry)
			return nil, fmt.Errorf("pebbleq: batching the lease of message %d: %w", id, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		q.claims.Unclaim(ids, expiry)
		return nil, fmt.Errorf("pebbleq: leasing messages %d to %d: %w", ids[0], ids[len(ids)-1], err)
	}
	return msgs, nil
}

// Ack deletes the message and lease records of ids in one synced batch.
func (q *Queue) Ack(ctx context.Context, ids []uint64) error {
	if err := q.gate.Enter(ctx); err != nil {
		return err
	}
	defer q.gate.Leave()
	if len(ids) == 0 {
		return nil
	}
	expiries, err := q.claims.Release(ids)
	if err != nil {
		return fmt.Errorf("pebbleq: ack: %w", err)
	}
	b := q.db.NewBatch()
	defer b.Close()
	for _, id := range ids {
		if err := errors.Join(b.Delete(key(messagePrefix, id), nil), b.Delete(key(leasePrefix, id), nil)); err != nil {
			q.claims.Restore(ids, expiries)
			return fmt.Errorf("pebbleq: batching the ack of message %d: %w", id, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		q.claims.Restore(ids, expiries)
		return fmt.Errorf("pebbleq: acknowledging %d messages: %w", len(ids), err)
	}
	return nil
}

// Close waits for the calls in flight and closes the database.
func (q *Queue) Close() error {
	return q.gate.Close(func() error {
		if err := q.db.Close(); err != nil {
			return fmt.Errorf("pebbleq: closing: %w", err)
		}
		return nil
	})
}

// key returns the record key of message id under prefix.
func key(prefix byte, id uint64) []byte {
	k := make([]byte, keyLen)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}
