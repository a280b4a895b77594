package broker

import (
	"sync/atomic"

	"github.com/walbroker/walbroker/wal"
)

// answer is a call whose counters move once its records are in the log: a
// publish answered without enqueuing anything (a duplicate, or one shed
// with QueueFull), and a settlement (Ack, Nack, Reject, a replay, and the
// acks a Receive carries), between its verdict, given under q.mu, and its
// count. Like a publish, it is counted under the lock that commits: by its
// call, back from its waits, or by a checkpoint's commit of it
// (commitAnswersLocked) if that comes first. So Close's frozen Stats, read
// under the lock after its checkpoint, count every call whose records the
// checkpoint holds, however late the call returns; and a call that returns
// after Close finds itself counted already.
type answer struct {
	tallies []tally
	pends   []*wal.Pending // the appends the call waits for before it answers
}

// tally is one counter an answer moves, and by how much.
type tally struct {
	counter *atomic.Int64
	n       int64
}

// answerLocked records a verdict given under q.mu, which the caller holds:
// it queues recs as unlockAndWait does, and returns the answer, whose pends
// are recs' appends followed by more (appends queued already that the call
// waits for too). The caller releases q.mu, waits for the answer's pends
// and settles it.
func (q *Queue) answerLocked(tallies []tally, recs [][]byte, more ...*wal.Pending) *answer {
	a := &answer{tallies: tallies, pends: append(q.enqueueLocked(recs), more...)}
	q.answering[a] = struct{}{}
	return a
}

// unlockWaitAndCount is unlockAndWait for a call whose counters move once
// its records are in the log: it queues recs, releases q.mu, which the
// caller holds, waits, and counts tallies unless a checkpoint did (see
// answer) or the wait failed.
func (q *Queue) unlockWaitAndCount(recs [][]byte, tallies ...tally) error {
	moving := tallies[:0:0]
	for _, t := range tallies {
		if t.n != 0 {
			moving = append(moving, t)
		}
	}
	if len(moving) == 0 {
		return q.unlockAndWait(recs) // (a Receive that acks nothing)
	}
	a := q.answerLocked(moving, recs)
	q.mu.Unlock()
	err := q.waitAll(a.pends)
	q.settle(a, err)
	return err
}

// settle counts a, whose call waited for its pends and met err, unless a
// checkpoint counted it already or err means the answer was not given.
func (q *Queue) settle(a *answer, err error) {
	if f := q.s.opts.answerWaited; f != nil {
		f()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, mine := q.answering[a]; !mine {
		return // a checkpoint counted it
	}
	delete(q.answering, a)
	if err == nil {
		a.count()
	}
}

// count moves a's counters.
func (a *answer) count() {
	for _, t := range a.tallies {
		t.counter.Add(t.n)
	}
}

// commitAnswersLocked counts every answer not yet counted, whose appends
// must be complete (a checkpoint's barrier waited for them). The caller
// holds q.mu.
func (q *Queue) commitAnswersLocked() error {
	for a := range q.answering {
		for _, p := range a.pends {
			if _, err := p.Wait(); err != nil {
				return q.s.failure(err)
			}
		}
		// Its call, back from its wait, finds it gone and counts nothing
		// (see settle).
		a.count()
		delete(q.answering, a)
	}
	return nil
}
