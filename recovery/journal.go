package recovery

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
)

// Op names what one journal [Entry] records. Every Op but the intents
// (OpReplaying, OpDeleting) and OpStart records a call that returned; an
// entry is appended only once its call has returned.
type Op string

// The journal's entries.
const (
	// OpStart opens every child's journal: its cycle, sync mode and hook.
	OpStart Op = "start"
	// OpPublished: Publish, PublishKeyed (a new message) or PublishBatch
	// returned nil. IDs and Refs hold one element per message.
	OpPublished Op = "published"
	// OpDuplicate: PublishKeyed returned the original of Key, ID.
	OpDuplicate Op = "duplicate"
	// OpDelivered: Receive (or Consume's handler) got ID on its Del-th
	// delivery, leased until Exp, and the consumer will next do Intent.
	OpDelivered Op = "delivered"
	// OpAcked: Ack of ID's delivery Del returned nil.
	OpAcked Op = "acked"
	// OpNacked: Nack returned nil; Exp is the NackValue's VisibleAt, Dead
	// its DeadLettered.
	OpNacked Op = "nacked"
	// OpRejected: Reject returned nil.
	OpRejected Op = "rejected"
	// OpExtended: Extend returned nil; Exp is the new lease's ExpiresAt.
	OpExtended Op = "extended"
	// OpSettleFailed: an Ack, Nack, Reject or Extend returned an error
	// (Err); Expired says it was LeaseExpired, and Exp is the lease's
	// expiry as the consumer knew it.
	OpSettleFailed Op = "settle-failed"
	// OpReplaying and OpDeleting are written before ReplayDeadLetter and
	// DeleteDeadLetter: their effect may happen without the confirmation
	// that follows (OpReplayed, OpDeleted). Del, Reason, Code, Cause and
	// FailedAt describe the dead letter as DeadLetters returned it.
	OpReplaying Op = "replaying"
	OpReplayed  Op = "replayed"
	OpDeleting  Op = "deleting"
	OpDeleted   Op = "deleted"
	// OpMaybe: a delivery, as OpDelivered, that a power loss may take
	// (under SyncPublish a lease is durable only once a later fdatasync
	// covers it): the consumer's Intent may have been carried out, but
	// neither the count nor the lease is certain. If it turns out
	// certain, OpDelivered follows.
	OpMaybe Op = "maybe"
	// OpReturned: an Ack, Nack, Reject or Extend returned nil (Settle
	// names which, as the Op its certain entry carries; the other fields
	// are that entry's) where a power loss may take its record (under
	// SyncPublish only a publish waits for an fdatasync). It is journaled
	// as the call returns: in the process that made it, its effect holds
	// in memory until the power fails, after which no call returns there;
	// the next process may not see it. If it turns out certain, the entry
	// of Settle follows.
	OpReturned Op = "returned"
	// OpFailed: a call the workload never expects to fail returned Err.
	// For a publish, N is the attempt, which may or may not have happened.
	OpFailed Op = "failed"
)

// Entry is one record of the workload's journal. Times are Unix
// nanoseconds of the wall clock, which is also the broker's clock in a
// child; T0 and T1 bracket the call, so the broker read its clock between
// them. A delivery that Consume received on the queue itself has T0 0:
// the handler sees it only after Receive returned, and when that Receive
// began is not known.
type Entry struct {
	Op     Op       `json:"op"`
	Who    string   `json:"who,omitempty"` // the goroutine: pub0, con1, flow, janitor, poison
	Queue  string   `json:"q,omitempty"`
	ID     string   `json:"id,omitempty"`
	IDs    []string `json:"ids,omitempty"`
	Ref    string   `json:"ref,omitempty"` // the payload's reference (see MakeRef)
	Refs   []string `json:"refs,omitempty"`
	Key    string   `json:"key,omitempty"`
	N      int64    `json:"n,omitempty"` // the publisher's attempt number
	Enq    int64    `json:"enq,omitempty"`
	Del    int      `json:"d,omitempty"`
	Exp    int64    `json:"exp,omitempty"`
	Intent Intent   `json:"intent,omitempty"`
	By     int64    `json:"by,omitempty"` // the Extend an extend intent will ask for, in ns
	Dead   bool     `json:"dead,omitempty"`
	Reason string   `json:"reason,omitempty"`
	Code   uint32   `json:"code,omitempty"`   // a dead letter's Code
	Cause  string   `json:"cause,omitempty"`  // a dead letter's Cause
	Failed int64    `json:"failed,omitempty"` // a dead letter's FailedAt
	T0     int64    `json:"t0,omitempty"`
	T1     int64    `json:"t1,omitempty"`
	Err    string   `json:"err,omitempty"`
	// Expired: the failed settle was refused with LeaseExpired.
	Expired bool `json:"expired,omitempty"`
	// Settle: the call an OpReturned entry records (OpAcked, OpNacked,
	// OpRejected or OpExtended).
	Settle Op `json:"settle,omitempty"`
	// Start fields.
	Cycle int    `json:"cycle,omitempty"`
	Sync  string `json:"sync,omitempty"`
	Hook  string `json:"hook,omitempty"`
	PID   int    `json:"pid,omitempty"`
}

// Journal frame: length (4 bytes, little-endian), CRC-32C of the body (4
// bytes), body (the entry as JSON).
const journalFrameHeader = 8

// maxJournalEntry bounds one entry's body; a larger length is a torn or
// damaged frame.
const maxJournalEntry = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Journal appends entries to a file outside the store, each call's entries
// written and fdatasynced before the call returns. One goroutine owns the
// file and commits every request queued while it was busy with one write
// and one fdatasync.
//
// A Journal is safe for concurrent use. It retains the file until Close.
type Journal struct {
	f    *os.File
	reqs chan journalRequest
	done chan struct{}

	// mu guards closed, and serialises sends on reqs with Close.
	mu     sync.RWMutex
	closed bool
}

type journalRequest struct {
	entries []Entry
	done    chan error
}

// CreateJournal creates the journal file at path (it must not exist) and
// starts its writer goroutine.
func CreateJournal(path string) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("recovery: create journal: %w", err)
	}
	j := &Journal{f: f, reqs: make(chan journalRequest, 64), done: make(chan struct{})}
	go j.loop()
	return j, nil
}

// Append writes entries and returns once they are fdatasynced. An error
// means they may or may not be in the journal.
func (j *Journal) Append(entries ...Entry) error {
	if len(entries) == 0 {
		return nil
	}
	done := make(chan error, 1)
	j.mu.RLock()
	if j.closed {
		j.mu.RUnlock()
		return errors.New("recovery: journal closed")
	}
	j.reqs <- journalRequest{entries: entries, done: done}
	j.mu.RUnlock()
	return <-done
}

func (j *Journal) loop() {
	defer close(j.done)
	var failed error
	for req := range j.reqs {
		batch := []journalRequest{req}
	more:
		for {
			select {
			case r, ok := <-j.reqs:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		err := failed
		if err == nil {
			err = j.commit(batch)
			// Like the log it checks, the journal never retries a failed
			// write or fdatasync.
			failed = err
		}
		for _, r := range batch {
			r.done <- err
		}
	}
}

func (j *Journal) commit(batch []journalRequest) error {
	var buf []byte
	for _, r := range batch {
		for i := range r.entries {
			var err error
			if buf, err = AppendJournalFrame(buf, &r.entries[i]); err != nil {
				return err
			}
		}
	}
	if _, err := j.f.Write(buf); err != nil {
		return fmt.Errorf("recovery: journal write: %w", err)
	}
	if err := syncData(j.f); err != nil {
		return fmt.Errorf("recovery: journal fdatasync: %w", err)
	}
	return nil
}

// Close waits for queued appends and closes the file.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	close(j.reqs)
	j.mu.Unlock()
	<-j.done
	return j.f.Close()
}

// AppendJournalFrame appends e, framed, to buf.
func AppendJournalFrame(buf []byte, e *Entry) ([]byte, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return buf, fmt.Errorf("recovery: encode journal entry: %w", err)
	}
	var hdr [journalFrameHeader]byte
	binary.LittleEndian.PutUint32(hdr[0:], uint32(len(body)))
	binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(body, castagnoli))
	return append(append(buf, hdr[:]...), body...), nil
}

// JournalTail describes how a journal ended.
type JournalTail struct {
	// TornBytes is the length of an incomplete or unverifiable last write
	// that was ignored: the process died while writing it, so nothing in it
	// had been acknowledged to its goroutine.
	TornBytes int
}

// DecodeJournal decodes the frames of a journal. It stops at the first
// frame that is short or fails its checksum: only the last write can be
// incomplete (each commit is one write, and a killed process writes
// nothing after it), so everything from there on is reported as torn. For
// the same reason a frame that verifies after it means the journal was
// damaged in the middle, which no kill does: that is an error, and so is
// a frame that verifies but does not decode.
func DecodeJournal(data []byte) ([]Entry, JournalTail, error) {
	var out []Entry
	off := 0
	for off < len(data) {
		n, ok := journalFrameAt(data, off)
		if !ok {
			for at := off + 1; at < len(data); at++ {
				if _, ok := journalFrameAt(data, at); ok {
					return out, JournalTail{}, fmt.Errorf("recovery: journal damaged: the frame at byte %d is short or fails its checksum, and a frame that verifies follows at byte %d", off, at)
				}
			}
			return out, JournalTail{TornBytes: len(data) - off}, nil
		}
		var e Entry
		if err := json.Unmarshal(data[off+journalFrameHeader:off+journalFrameHeader+n], &e); err != nil {
			return out, JournalTail{}, fmt.Errorf("recovery: journal entry at byte %d: %w", off, err)
		}
		out = append(out, e)
		off += journalFrameHeader + n
	}
	return out, JournalTail{}, nil
}

// journalFrameAt reports whether a whole frame that verifies starts at
// byte off of data, and the length of its body.
func journalFrameAt(data []byte, off int) (int, bool) {
	rest := data[off:]
	if len(rest) < journalFrameHeader {
		return 0, false
	}
	// Bounded before it becomes an int: a 32-bit int would take a length
	// of 2^31 or more for a negative one, which passed both bounds.
	length := binary.LittleEndian.Uint32(rest[0:])
	if length > maxJournalEntry || int(length) > len(rest)-journalFrameHeader {
		return 0, false
	}
	n := int(length)
	body := rest[journalFrameHeader : journalFrameHeader+n]
	return n, crc32.Checksum(body, castagnoli) == binary.LittleEndian.Uint32(rest[4:])
}

// ReadJournal reads and decodes the journal at path (see DecodeJournal).
func ReadJournal(path string) ([]Entry, JournalTail, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, JournalTail{}, fmt.Errorf("recovery: read journal: %w", err)
	}
	entries, tail, err := DecodeJournal(data)
	if err != nil {
		return entries, tail, fmt.Errorf("recovery: %s: %w", path, err)
	}
	return entries, tail, nil
}

// String renders the entry as one line of JSON, for reports.
func (e Entry) String() string {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Sprintf("%+v", e.Op)
	}
	return string(b)
}
