package broker

import (
	"fmt"
	"slices"
	"strings"
)

// ManualMaintenance keeps a store from checkpointing and reclaiming in the
// background: the test calls Maintain.
func ManualMaintenance(o *Options) { o.manualMaintenance = true }

// ReplaySpill makes a replay write its table entries out whenever n of
// them are held.
func ReplaySpill(n int) func(*Options) { return func(o *Options) { o.replaySpill = n } }

// Maintain writes a checkpoint and reclaims what it can, now.
func (s *Store) Maintain() error { return s.maintain(true) }

// Dump renders every queue's state as of the broker clock (see
// index.Queue.Dump).
func Dump(s *Store) string {
	s.mu.Lock()
	names := make([]string, 0, len(s.queues))
	for n := range s.queues {
		names = append(names, n)
	}
	s.mu.Unlock()
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		s.mu.Lock()
		q := s.queues[n]
		s.mu.Unlock()
		q.mu.Lock()
		b.WriteString(q.iq.Dump(s.opts.Now().UnixNano()))
		q.mu.Unlock()
	}
	return b.String()
}

// ActiveMessages is the count of q's messages held on the heap rather than
// in the index's stream (see index.Queue.Active).
func ActiveMessages(q *Queue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.iq.Active()
}

// MessageSeq is the sequence number a message ID names.
func MessageSeq(id string) (uint64, bool) { return parseMessageID(id) }

// MemoryHeld is the count of messages q holds, payloads included: every
// one not acknowledged and not a deleted dead letter.
func MemoryHeld(q *Memory) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.st.msgs)
}

// StateDiff lists the lines that differ between two Dumps (see stateDiff).
var StateDiff = stateDiff

// DeclaredMaxDeliveries is the MaxDeliveries the index holds for queue
// name, read without making a handle on it (which would act on it; see
// Store.Queue).
func DeclaredMaxDeliveries(s *Store, name string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	iq := s.idx.Queue(name)
	if iq == nil {
		return 0, false
	}
	return iq.Policy.MaxDeliveries, true
}

// AnswerWaited makes every duplicate or shed publish call f once its waits
// for the log are over, before it is counted.
func AnswerWaited(f func()) func(*Options) { return func(o *Options) { o.answerWaited = f } }

// VerifyIndex checks the store's index against itself (index.Index.Verify:
// every count against what it counts) and that no segment below the log's
// first is still counted as used, with every queue stopped, as a
// checkpoint stops them (their locks in number order).
func VerifyIndex(s *Store) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, unlock := s.stopQueuesLocked()
	defer unlock()
	if err := s.idx.Verify(); err != nil {
		return err
	}
	first := s.log.Stats().FirstSegment
	for seg := range s.idx.SegmentUses() {
		if seg < first {
			return fmt.Errorf("segment %d is counted as used, and the log begins at segment %d", seg, first)
		}
	}
	return nil
}

// CopyMark names the file that marks a backup's copy not yet opened.
const CopyMark = copyMark

// CopyJump is how far a copy's first Open moves the next message sequence.
const CopyJump = copyJump
