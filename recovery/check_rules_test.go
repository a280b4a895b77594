package recovery

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestEachJournalRuleReportsWhatBreaksIt breaks, one at a time, a rule
// that the workload's own calls check as they return (publish, dedup,
// delivery, settle, the janitor's dead letters), which no sound store and
// no other test ever broke: a rule no
// journal can fail would pass a store that breaks it. Each journal is the
// smallest one that breaks the rule, and the checker must name it.
func TestEachJournalRuleReportsWhatBreaksIt(t *testing.T) {
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	p, _ := Policy(QueueWork)
	vt := int64(p.VisibilityTimeout)
	ref := func(n int64, key string) string {
		return MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: n, Key: key})
	}
	batchRef := func(i int) string {
		return MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1, Index: i, Of: 2})
	}
	published := func(n int64, id, r, key string, enq int64) Entry {
		return Entry{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: n, IDs: []string{id}, Refs: []string{r}, Key: key,
			Enq: enq, T0: enq, T1: enq}
	}
	delivered := func(id, r string, del int, at int64) Entry {
		return Entry{Op: OpDelivered, Who: "con0", Queue: QueueWork, ID: id, Ref: r, Enq: base, Del: del, Exp: at + vt,
			Intent: IntentAck, T0: at, T1: at}
	}
	for _, tc := range []struct {
		name    string
		entries []Entry
		want    string
	}{
		{"EnqueuedAt outside the publish call", []Entry{
			{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{"a1"}, Refs: []string{ref(1, "")},
				Enq: base - ms, T0: base, T1: base + ms},
		}, "is not the broker clock during the publish"},
		{"one batch returning an ID twice", []Entry{
			{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{"a1", "a1"}, Refs: []string{batchRef(0), batchRef(1)},
				Enq: base, T0: base, T1: base},
		}, "one PublishBatch returned ID a1 twice"},
		{"a payload published under two IDs", []Entry{
			published(1, "a1", ref(1, ""), "", base),
			{Op: OpPublished, Who: "pub1", Queue: QueueWork, N: 1, IDs: []string{"a2"}, Refs: []string{ref(1, "")},
				Enq: base + ms, T0: base + ms, T1: base + ms},
		}, "published under two IDs"},
		{"a duplicate returning a message of another key", []Entry{
			published(1, "a1", ref(1, "pub0-k01"), "pub0-k01", base),
			{Op: OpDuplicate, Who: "pub0", Queue: QueueWork, N: 2, ID: "a1", Key: "pub0-k02", Enq: base, T0: base + ms, T1: base + ms},
		}, `returned as its original message a1, published with key "pub0-k01"`},
		{"a duplicate returning an original the key no longer names", []Entry{
			published(1, "a1", ref(1, "pub0-k01"), "pub0-k01", base),
			published(2, "a2", ref(2, "pub0-k01"), "pub0-k01", base+int64(DedupWindow)+ms),
			{Op: OpDuplicate, Who: "pub0", Queue: QueueWork, N: 3, ID: "a1", Key: "pub0-k01", Enq: base,
				T0: base + int64(DedupWindow) + 2*ms, T1: base + int64(DedupWindow) + 2*ms},
		}, "not the key's latest original a2"},
		{"an ack of a message never delivered", []Entry{
			published(1, "a1", ref(1, ""), "", base),
			{Op: OpAcked, Who: "con0", Queue: QueueWork, ID: "a9", Del: 1, T0: base + ms, T1: base + ms},
		}, "ack of a message never delivered"},
		{"an ack of an earlier delivery", []Entry{
			published(1, "a1", ref(1, ""), "", base),
			delivered("a1", ref(1, ""), 1, base+ms),
			delivered("a1", ref(1, ""), 2, base+2*ms+vt),
			{Op: OpAcked, Who: "con0", Queue: QueueWork, ID: "a1", Del: 1, T0: base + 3*ms + vt, T1: base + 3*ms + vt},
		}, "ack of delivery 1 returned nil, but delivery 2 had been handed out"},
		{"a settle refused as lapsed while its lease held", []Entry{
			published(1, "a1", ref(1, ""), "", base),
			delivered("a1", ref(1, ""), 1, base+ms),
			{Op: OpSettleFailed, Who: "con0", Queue: QueueWork, ID: "a1", Del: 1, Exp: base + ms + vt, T0: base + 2*ms, T1: base + 2*ms,
				Err: "Ack: broker: lease expired", Expired: true},
		}, "refused as lapsed, but the call ended"},
		{"a delivery before the retry delay a nack that returned asked for", []Entry{
			published(1, "a1", ref(1, ""), "", base),
			{Op: OpDelivered, Who: "con0", Queue: QueueWork, ID: "a1", Ref: ref(1, ""), Enq: base, Del: 1, Exp: base + ms + vt,
				Intent: IntentNack, T0: base + ms, T1: base + ms},
			{Op: OpNacked, Who: "con0", Queue: QueueWork, ID: "a1", Del: 1, Exp: base + 2*ms + int64(retryDelay(QueueWork, 1)),
				T0: base + 2*ms, T1: base + 2*ms},
			delivered("a1", ref(1, ""), 2, base+3*ms),
		}, "before its retry delay ended"},
		{"a poison message delivered twice to one process", func() []Entry {
			pp, _ := Policy(QueuePoison)
			pvt := int64(pp.VisibilityTimeout)
			r := MakeRef(Ref{Queue: QueuePoison, Cycle: 1, Who: "poison", N: 1})
			return []Entry{
				{Op: OpPublished, Who: "poison", Queue: QueuePoison, N: 1, IDs: []string{"p1"}, Refs: []string{r}, Enq: base, T0: base, T1: base},
				{Op: OpDelivered, Who: "poison", Queue: QueuePoison, ID: "p1", Ref: r, Enq: base, Del: 1, Exp: base + ms + pvt,
					Intent: IntentHold, T0: base + ms, T1: base + ms},
				{Op: OpDelivered, Who: "poison", Queue: QueuePoison, ID: "p1", Ref: r, Enq: base, Del: 2, Exp: base + 2*ms + 2*pvt,
					Intent: IntentHold, T0: base + 2*ms + pvt, T1: base + 2*ms + pvt},
			}
		}(), "a poison message delivered twice to one process"},
		{"a settle journaled as returned of a message never delivered", []Entry{
			{Op: OpReturned, Settle: OpAcked, Who: "con0", Queue: QueueWork, ID: "a9", Del: 1, T0: base, T1: base},
		}, "acked of a message never delivered (journaled as returned"},
		{"a settle journaled as returned of no known call", []Entry{
			published(1, "a1", ref(1, ""), "", base),
			delivered("a1", ref(1, ""), 1, base+ms),
			{Op: OpReturned, Settle: "shuffled", Who: "con0", Queue: QueueWork, ID: "a1", Del: 1, T0: base + 2*ms, T1: base + 2*ms},
		}, `a returned entry of an unknown call "shuffled"`},
		{"a lapse's dead letter before the last delivery the queue allows", []Entry{
			published(1, "a1", ref(1, ""), "", base),
			delivered("a1", ref(1, ""), 1, base+ms),
			{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: "a1", Ref: ref(1, ""), Enq: base, Del: 1, Reason: broker.ReasonLeaseExpired,
				Failed: base + ms + vt, T0: base + 2*ms + vt, T1: base + 2*ms + vt},
		}, "dead letter LEASE_EXPIRED with 1 deliveries; the queue allows"},
		{"a dead letter of a reason nothing gives", []Entry{
			published(1, "a1", ref(1, ""), "", base),
			delivered("a1", ref(1, ""), 1, base+ms),
			{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: "a1", Ref: ref(1, ""), Enq: base, Del: 1, Reason: "SHUFFLED",
				Failed: base + 2*ms, T0: base + 3*ms, T1: base + 3*ms},
		}, `dead letter with reason "SHUFFLED", which nothing in the workload gives`},
		{"a dead letter of another failure than the one that returned", []Entry{
			published(1, "a1", ref(1, ""), "", base),
			{Op: OpDelivered, Who: "con0", Queue: QueueWork, ID: "a1", Ref: ref(1, ""), Enq: base, Del: 1, Exp: base + ms + vt,
				Intent: IntentReject, T0: base + ms, T1: base + ms},
			{Op: OpRejected, Who: "con0", Queue: QueueWork, ID: "a1", Del: 1, T0: base + 2*ms, T1: base + 2*ms},
			{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: "a1", Ref: ref(1, ""), Enq: base, Del: 1, Reason: Reason(QueueWork, IntentNack),
				Code: workloadCode, Cause: workloadCause, Failed: base + 2*ms, T0: base + 3*ms, T1: base + 3*ms},
		}, "it was dead-lettered " + Reason(QueueWork, IntentReject) + " on delivery 1"},
		{"an entry of no known kind", []Entry{
			{Op: "shuffled", Who: "pub0", Queue: QueueWork},
		}, "unknown journal entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkerWithoutStores(t)
			c.AddCycle(1, append([]Entry{{Op: OpStart, Cycle: 1, Sync: "all"}}, tc.entries...))
			require.ErrorContains(t, c.Err(), tc.want)
		})
	}
}

// TestEachDrainRuleReportsWhatBreaksIt breaks, one at a time, a rule that
// a drain checks against the journal and that no sound store and no other
// test ever broke: the store shows a message in another queue than the
// one it was published to, with another valid payload than its own, a
// publish in flight at the kill twice, a dead letter of a message whose
// ack returned nil, and a queue nobody declared, or it does not open.
// Each store is sound; the journal is what says otherwise.
func TestEachDrainRuleReportsWhatBreaksIt(t *testing.T) {
	ctx := context.Background()
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	other := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 2})
	check := func(t *testing.T, dir string, entries []Entry, want string) {
		t.Helper()
		c := checkerWithoutStores(t)
		c.AddCycle(1, append([]Entry{{Op: OpStart, Cycle: 1, Sync: "all"}}, entries...))
		require.NoError(t, c.Err(), "the journal alone breaks nothing")
		require.ErrorContains(t, c.CheckDrain(dir), want)
	}
	publishedAs := func(m broker.MessageValue, queue, r string) Entry {
		enq := m.EnqueuedAt.UnixNano()
		return Entry{Op: OpPublished, Who: "pub0", Queue: queue, N: 1, IDs: []string{m.ID}, Refs: []string{r}, Enq: enq, T0: enq, T1: enq}
	}

	t.Run("in another queue", func(t *testing.T) {
		dir, ms := storeHolding(t, ref)
		check(t, dir, []Entry{publishedAs(ms[0], QueueFlow, ref)}, "drain: in queue work; it was published to flow")
	})
	t.Run("with another message's payload", func(t *testing.T) {
		dir, ms := storeHolding(t, other)
		check(t, dir, []Entry{publishedAs(ms[0], QueueWork, ref)}, "it was published with")
	})
	t.Run("a dead letter of a message acked", func(t *testing.T) {
		dir := t.TempDir()
		s, q := openQueueOf(t, dir, QueueWork)
		m, err := q.Publish(ctx, Payload(ref))
		require.NoError(t, err)
		t0 := time.Now().UnixNano()
		ds, err := q.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		t1 := time.Now().UnixNano()
		require.NoError(t, q.Reject(ctx, ds[0].Lease.Receipt, causeFor(QueueWork, IntentReject)))
		require.NoError(t, s.Close())
		check(t, dir, []Entry{
			publishedAs(m, QueueWork, ref),
			deliveredEntry("con0", QueueWork, ds[0], IntentAck, t0, t1),
			{Op: OpAcked, Who: "con0", Queue: QueueWork, ID: m.ID, Del: 1, T0: t1, T1: t1},
		}, "a dead letter after it was acked")
	})
	t.Run("a publish in flight at the kill enqueued twice", func(t *testing.T) {
		// pub0's first publish of cycle 1 never returned: the store may
		// hold it, once.
		dir, _ := storeHolding(t, ref, ref)
		check(t, dir, nil, "is also message")
	})
	t.Run("a store that does not open", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "store")
		require.NoError(t, os.WriteFile(file, nil, 0o600))
		check(t, file, nil, "the store does not open after the kill")
	})
	t.Run("a queue nobody declared", func(t *testing.T) {
		dir := t.TempDir()
		s, err := broker.Open(dir, broker.Options{SegmentBytes: SegmentBytes})
		require.NoError(t, err)
		p, _ := Policy(QueueWork)
		_, err = s.Queue("stray", p)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		check(t, dir, nil, `the store holds a queue "stray" nobody declared`)
	})
}
