package broker

import (
	"sync/atomic"

	"github.com/walbroker/walbroker/wal"
)

// answer is a publish answered without enqueuing anything (a duplicate, or
// one shed with QueueFull), between its verdict, given under q.mu, and its
// count. Like a publish, it is counted under the lock that commits: by its
// call, back from its waits, or by a checkpoint's commit of it
// (commitAnswersLocked) if that comes first. So Close's frozen Stats, read
// under the lock after its checkpoint, count every answer given before
// Close, however late its call returns; and a call that returns after Close
// finds itself counted already.
type answer struct {
	counter *atomic.Int64  // the queue's duplicates or shed
	pends   []*wal.Pending // the appends the call waits for before it answers
}

// answerLocked records a verdict given under q.mu, which the caller holds:
// it queues recs as unlockAndWait does, and returns the answer, whose pends
// are recs' appends followed by more (appends queued already that the call
// waits for too). The caller releases q.mu, waits for the answer's pends
// and settles it.
func (q *Queue) answerLocked(counter *atomic.Int64, recs [][]byte, more ...*wal.Pending) *answer {
	a := &answer{counter: counter, pends: append(q.enqueueLocked(recs), more...)}
	q.answering[a] = struct{}{}
	return a
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
		a.counter.Add(1)
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
		a.counter.Add(1)
		delete(q.answering, a)
	}
	return nil
}
