package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/wal"
)

// DeadLetters returns up to max dead letters, oldest FailedAt first, without
// removing them; see DeadLetterReader. There is no cursor: a call returns
// the oldest ones again, so reading past them takes a larger max
// (Stats().DeadLetters counts them all), or replaying or deleting those
// read.
func (q *Queue) DeadLetters(ctx context.Context, max int) ([]DeadLetterValue, error) {
	if q.unmade() {
		return nil, nilReceiver("Queue")
	}
	if max <= 0 {
		return nil, fmt.Errorf("broker: queue %s: DeadLetters max %d must be positive: %w", q.name, max, InvalidBatchSize)
	}
	if err := q.begin(ctx); err != nil {
		return nil, err
	}
	type dead struct {
		dl  DeadLetterValue
		pos wal.Position
		seq uint64
	}
	q.mu.Lock()
	now, err := q.s.nowOpen()
	if err != nil {
		q.mu.Unlock()
		return nil, err
	}
	recs := q.sweepLocked(now, nil)
	var list []dead
	for _, m := range q.iq.DeadLetters(max) {
		list = append(list, dead{pos: m.Pos, seq: m.Seq, dl: DeadLetterValue{
			FailedAt:   time.Unix(0, m.FailedAt),
			Reason:     m.Reason,
			Cause:      m.Cause,
			Code:       m.Code,
			Deliveries: int(m.Deliveries),
			Message:    MessageValue{ID: messageID(m.Seq), EnqueuedAt: time.Unix(0, m.EnqueuedAt)},
		}})
	}
	q.s.maint.removeMu.RLock() // the positions taken stay readable
	defer q.s.maint.removeMu.RUnlock()
	if err := q.unlockAndWait(recs); err != nil {
		return nil, err
	}
	out := make([]DeadLetterValue, len(list))
	for i, d := range list {
		p, err := q.payload(d.pos, d.seq)
		if err != nil {
			return nil, err
		}
		d.dl.Message.Payload = p
		out[i] = d.dl
	}
	return out, nil
}

// ReplayDeadLetter moves dead letter id (its Message.ID, as DeadLetters
// returns it) back into the queue, receivable at once, with its delivery count
// reset; it keeps its ID, payload and EnqueuedAt, so Receive hands it out
// before every message enqueued after it, by EnqueuedAt (replaying a backlog
// of dead letters puts it ahead of new work). It closes the Wake signal.
// Replays of one dead letter racing each other queue it once: one returns nil,
// the others DeadLetterNotFound. A queue at its Capacity refuses it
// (QueueFull, not counted as shed) and the dead letter stays as it was. See
// DeadLetterManager.
func (q *Queue) ReplayDeadLetter(ctx context.Context, id string) error {
	if q.unmade() {
		return nilReceiver("Queue")
	}
	return q.changeDeadLetter(ctx, id, index.KindReplay)
}

// DeleteDeadLetter removes dead letter id (its Message.ID) for good; see
// DeadLetterManager. No call returns it again, but deleting is not erasing:
// its payload's bytes stay in the log's segment files, and in every Backup
// taken before. Reclaiming a segment (once no live record needs it) does
// not erase it either: the log keeps up to two removed segment files as
// spares, renamed, for later segments to reuse, and their old bytes stay
// until new records overwrite them. A program that must erase payloads
// encrypts them with a key it can destroy.
func (q *Queue) DeleteDeadLetter(ctx context.Context, id string) error {
	if q.unmade() {
		return nilReceiver("Queue")
	}
	return q.changeDeadLetter(ctx, id, index.KindDelete)
}

func (q *Queue) changeDeadLetter(ctx context.Context, id string, kind index.Kind) error {
	if err := q.begin(ctx); err != nil {
		return err
	}
	q.mu.Lock()
	now, err := q.s.nowOpen()
	if err != nil {
		q.mu.Unlock()
		return err
	}
	recs := q.sweepLocked(now, nil)
	seq, ok := parseMessageID(id)
	var m *index.Message
	if ok {
		m = q.iq.Get(seq)
	}
	if m == nil || m.State != index.Dead {
		if err := q.unlockAndWait(recs); err != nil {
			return err
		}
		return fmt.Errorf("broker: queue %s: dead letter %.64q: %w", q.name, id, DeadLetterNotFound)
	}
	if c := q.policy.Capacity; kind == index.KindReplay && c > 0 && q.iq.Live() >= c {
		// (The sweep above: leases lapsed for good stop holding capacity.)
		live := q.iq.Live()
		if err := q.unlockAndWait(recs); err != nil {
			return err
		}
		return fmt.Errorf("broker: queue %s holds %d of %d messages, dead letter %s does not fit: %w", q.name, live, c, id, QueueFull)
	}
	e := index.Event{Kind: kind, Queue: q.id, Seq: seq}
	q.iq.Apply(0, &e)
	recs = append(recs, e.Append(nil))
	if kind == index.KindReplay {
		q.wakeLocked()
		q.settledLocked(&q.stats.replayed, 1)
	}
	return q.unlockAndWait(recs)
}
