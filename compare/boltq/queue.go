// Package boltq is a minimal durable queue on bbolt, for comparison with
// walbroker (see package compare).
//
// The database is opened with bbolt's defaults, fsync on (NoSync false):
// every write transaction returns once its pages and then its meta page
// are on the device. Publish, Receive and Ack go through db.Batch, bbolt's
// own coalescing of concurrent updates into one transaction, which is this
// queue's only group commit: concurrent calls of all three share one
// transaction and its two fdatasyncs. PublishBatch, a transaction of its
// own already, is one db.Update.
//
// db.Batch may run a call's function more than once: when another
// function of the batch fails, the transaction is rolled back and the
// rest run again in a new one, and the failed one alone after them. Each
// function here is safe to rerun: it only reads and writes the
// transaction, rebuilding its result on every run, and the in-memory
// state is changed by the caller, before db.Batch and after it returns
// (undone when it returns an error, which every call of a batch whose
// commit fails gets).
//
// # Buckets
//
// Bucket "messages" maps each message's ID, 8 bytes big-endian, to its
// payload; IDs come from the bucket's sequence (NextSequence), which is
// stored with the bucket, so no ID is ever given twice. Bucket "leases"
// maps the ID of each leased message to its lease's expiry, Unix
// nanoseconds as 8 bytes big-endian.
//
// Which messages are ready and which are leased is kept in memory (package
// claim) and rebuilt by Open from a scan of both buckets: a message whose
// lease names an expiry that has passed is ready again. A lease is never
// stored without its message: Receive reads a message and writes its
// lease in one run of its function, Ack deletes both in one, and the
// functions of a batch run one after another in its transaction, as bbolt
// runs write transactions one at a time. (pebbleq's Receive reads outside the batch
// that writes its leases, so an Ack racing it can leave a lease behind;
// see its package documentation.)
package boltq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/walbroker/walbroker/compare"
	"github.com/walbroker/walbroker/compare/internal/claim"
	"github.com/walbroker/walbroker/compare/internal/gate"
	bolt "go.etcd.io/bbolt"
)

// FileName is the name of the database file Open uses in its directory.
const FileName = "queue.bolt"

// DefaultLease is the lease a Receive grants when Options.Lease is zero.
const DefaultLease = time.Minute

// MaxLease is the longest Options.Lease Open accepts: 100 years, walbroker's
// broker.MaxDeadlineOffset. A lease's expiry is stored as Unix nanoseconds,
// whose int64 ends in April 2262; now + MaxLease still fits for any now
// before 2162.
const MaxLease = 100 * 365 * 24 * time.Hour

var (
	messagesBucket = []byte("messages")
	leasesBucket   = []byte("leases")
)

// Options configures Open. The zero value is valid.
type Options struct {
	// Now is the clock lease expiries are measured on. Nil means time.Now.
	Now func() time.Time
	// Lease is how long a Receive hides a message from every other
	// Receive. Zero means DefaultLease; negative, or above MaxLease, is
	// refused.
	Lease time.Duration
	// MaxBatchDelay is how long a db.Batch waits for more calls to join
	// it before it commits (bbolt's DB.MaxBatchDelay). Zero keeps bbolt's
	// default, 10 ms, which every call of a lone producer or consumer
	// waits out; negative means no wait: a batch commits as soon as it
	// can, carrying only the calls that arrived before it started.
	MaxBatchDelay time.Duration
}

// Queue is a durable queue in one bbolt file. It implements compare.Queue
// and is safe for concurrent use. It retains nothing its callers pass.
type Queue struct {
	db     *bolt.DB
	lease  time.Duration
	claims *claim.Table

	// gate keeps db from being closed under a call.
	gate gate.Gate
}

var _ compare.Queue = (*Queue)(nil)

// Open opens the queue in dir/FileName, creating dir and the file if
// needed, as pebbleq.Open creates its directory (each name it creates made
// durable, the file's and the directories'), and rebuilds its ready
// and leased sets. It waits at most a second for another process's lock
// on the file.
func Open(dir string, opts Options) (*Queue, error) {
	switch {
	case opts.Lease < 0:
		return nil, fmt.Errorf("boltq: Lease %v is negative", opts.Lease)
	case opts.Lease > MaxLease:
		return nil, fmt.Errorf("boltq: Lease %v exceeds MaxLease %v", opts.Lease, MaxLease)
	case opts.Lease == 0:
		opts.Lease = DefaultLease
	}
	// The directories Open makes, deepest first: each one's name is made
	// durable in its parent, as Pebble does for its own (bbolt syncs only
	// the file).
	var made []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("boltq: creating %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("boltq: opening %s: %w", path, err)
	}
	// The file's name, then the name of each directory made, in its parent.
	synced := []string{dir}
	for _, d := range made {
		synced = append(synced, filepath.Dir(d))
	}
	for _, d := range synced {
		if err := syncDir(d); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("boltq: syncing %s: %w", d, err)
		}
	}
	switch {
	case opts.MaxBatchDelay < 0:
		db.MaxBatchDelay = 0
	case opts.MaxBatchDelay > 0:
		db.MaxBatchDelay = opts.MaxBatchDelay
	}
	q := &Queue{db: db, lease: opts.Lease, claims: claim.New(opts.Now)}
	if err := q.load(); err != nil {
		return nil, errors.Join(fmt.Errorf("boltq: loading %s: %w", path, err), db.Close())
	}
	return q, nil
}

// load creates the buckets when they are missing and scans them into
// q.claims.
func (q *Queue) load() error {
	err := q.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{messagesBucket, leasesBucket} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("creating bucket %q: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return q.db.View(func(tx *bolt.Tx) error {
		leases := make(map[uint64]time.Time)
		err := tx.Bucket(leasesBucket).ForEach(func(k, v []byte) error {
			if len(k) != 8 || len(v) != 8 {
				return fmt.Errorf("lease %x holds %d bytes, want an 8-byte key and value", k, len(v))
			}
			leases[binary.BigEndian.Uint64(k)] = time.Unix(0, int64(binary.BigEndian.Uint64(v)))
			return nil
		})
		if err != nil {
			return err
		}
		return tx.Bucket(messagesBucket).ForEach(func(k, _ []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("message key %x is %d bytes, want 8", k, len(k))
			}
			id := binary.BigEndian.Uint64(k)
			q.claims.Load(id, leases[id])
			return nil
		})
	})
}

// Publish stores payload under the bucket's next sequence number in a
// db.Batch, which commits it together with the concurrent Publish,
// Receive and Ack calls that joined the same batch.
func (q *Queue) Publish(ctx context.Context, payload []byte) (uint64, error) {
	if err := q.gate.Enter(ctx); err != nil {
		return 0, err
	}
	defer q.gate.Leave()
	var id uint64
	// db.Batch may run the function more than once, each time in a new
	// transaction after the last one was rolled back: id is the value of
	// the run that committed.
	err := q.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(messagesBucket)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		id = seq
		return b.Put(key(seq), payload)
	})
	if err != nil {
		return 0, fmt.Errorf("boltq: publishing: %w", err)
	}
	q.claims.Ready(id)
	return id, nil
}

// PublishBatch stores payloads under consecutive sequence numbers in one
// db.Update.
func (q *Queue) PublishBatch(ctx context.Context, payloads [][]byte) ([]uint64, error) {
	if err := q.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer q.gate.Leave()
	if len(payloads) == 0 {
		return nil, nil
	}
	ids := make([]uint64, len(payloads))
	err := q.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(messagesBucket)
		for i, p := range payloads {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			ids[i] = seq
			if err := b.Put(key(seq), p); err != nil {
				return fmt.Errorf("message %d: %w", seq, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("boltq: publishing %d messages: %w", len(payloads), err)
	}
	q.claims.Ready(ids...)
	return ids, nil
}

// Receive claims up to max of the oldest ready messages and, in a
// db.Batch, reads them and writes their leases.
func (q *Queue) Receive(ctx context.Context, max int) ([]compare.Message, error) {
	if max < 1 {
		return nil, fmt.Errorf("boltq: receive max %d: %w", max, compare.ErrInvalidMax)
	}
	if err := q.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer q.gate.Leave()
	ids, expiry := q.claims.Claim(max, q.lease)
	if len(ids) == 0 {
		return nil, nil
	}
	value := make([]byte, 8)
	binary.BigEndian.PutUint64(value, uint64(expiry.UnixNano()))
	var msgs []compare.Message
	// db.Batch may run the function more than once, each time in a new
	// transaction after the last one was rolled back: msgs is rebuilt on
	// every run, and the run that committed is the one returned.
	err := q.db.Batch(func(tx *bolt.Tx) error {
		msgs = make([]compare.Message, 0, len(ids))
		messages, leases := tx.Bucket(messagesBucket), tx.Bucket(leasesBucket)
		for _, id := range ids {
			k := key(id)
			payload := messages.Get(k)
			if payload == nil {
				// Acknowledged by the holder of an earlier lease after
				// it lapsed: there is nothing left to lease.
				continue
			}
			// payload lives in the memory map only while tx is open.
			msgs = append(msgs, compare.Message{ID: id, Payload: append([]byte(nil), payload...)})
			if err := leases.Put(k, value); err != nil {
				return fmt.Errorf("lease of message %d: %w", id, err)
			}
		}
		return nil
	})
	if err != nil {
		q.claims.Unclaim(ids, expiry)
		return nil, fmt.Errorf("boltq: leasing messages %d to %d: %w", ids[0], ids[len(ids)-1], err)
	}
	return msgs, nil
}

// Ack deletes the messages and leases of ids in a db.Batch. The deletions
// are the same on every run of its function.
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
		return fmt.Errorf("boltq: ack: %w", err)
	}
	err = q.db.Batch(func(tx *bolt.Tx) error {
		messages, leases := tx.Bucket(messagesBucket), tx.Bucket(leasesBucket)
		for _, id := range ids {
			k := key(id)
			if err := errors.Join(messages.Delete(k), leases.Delete(k)); err != nil {
				return fmt.Errorf("message %d: %w", id, err)
			}
		}
		return nil
	})
	if err != nil {
		q.claims.Restore(ids, expiries)
		return fmt.Errorf("boltq: acknowledging %d messages: %w", len(ids), err)
	}
	return nil
}

// Close waits for the calls in flight and closes the database.
func (q *Queue) Close() error {
	return q.gate.Close(func() error {
		if err := q.db.Close(); err != nil {
			return fmt.Errorf("boltq: closing: %w", err)
		}
		return nil
	})
}

// key returns the bucket key of message id.
func key(id uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, id)
	return k
}

// syncDir fsyncs directory dir, making the names in it durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
