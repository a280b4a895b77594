package broker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// A long-lived store whose consumers keep up keeps its disk bounded, however
// much passes through it: with a dead letter kept for ever, a message
// nobody receives, and every publish keyed (each key remembered for the
// queue's DedupWindow), the log stays a few segments long and the index a
// few files, while fifty segments' worth of events go through it. What
// lives is copied forward; nothing it needs is lost (the dead letter, the
// old message and the keys still inside the window are all there after a
// reopen).
func TestASteadyStoreKeepsItsDiskBounded(t *testing.T) {
	const seg = broker.MinSegmentBytes
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = seg; broker.ManualMaintenance(o) })
	const window = time.Minute
	jobs := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1 << 10; p.DedupWindow = window }))
	small := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1 << 10 })
	idle := e.queue("idle", small)
	kept := mustPublish(t, idle, "never received")
	dead := mustPublish(t, jobs, "kept as a dead letter")
	d := mustReceiveOne(t, jobs)
	require.Equal(t, dead.ID, d.Message.ID)
	require.NoError(t, jobs.Reject(ctx(t), d.Lease.Receipt, broker.DoNotRetry(fmt.Errorf("bad input"))))

	payload := []byte(strings.Repeat("p", 700))
	const rounds = 1200 // about 50 segments of 16 KiB: a publish, a lease and an ack each
	maxSegments, maxIndex, maxDir, firstIndex := 0, int64(0), int64(0), int64(0)
	var written int64
	for i := range rounds {
		m, err := jobs.PublishKeyed(ctx(t), fmt.Sprint("key-", i), payload)
		require.NoError(t, err)
		require.NotNil(t, m.Payload, "round %d: a new key enqueues", i)
		got := mustReceiveOne(t, jobs)
		require.Equal(t, m.ID, got.Message.ID)
		require.NoError(t, jobs.Ack(ctx(t), got.Lease.Receipt))
		e.clock.Advance(time.Second) // a key is forgotten 60 rounds after its publish
		if i%20 == 19 {
			require.NoError(t, e.s.Maintain())
			st := e.s.Stats()
			if i >= rounds/4 { // after the first window: keys are forgotten as fast as made
				if firstIndex == 0 {
					firstIndex = st.IndexBytes
				}
				maxSegments = max(maxSegments, st.Segments)
				maxIndex = max(maxIndex, st.IndexBytes)
				u, err := dirSizes(e.dir)
				require.NoError(t, err)
				maxDir = max(maxDir, u.total())
			}
			written = st.Records
		}
	}
	st := e.s.Stats()
	t.Logf("steady: at most %d segments of %d bytes, %d index bytes (%d at first), %d bytes in the directory; %d records written, %d copied forward, %d bytes reclaimed",
		maxSegments, seg, maxIndex, firstIndex, maxDir, written, st.CopiedForward, st.BytesReclaimed)
	require.Greater(t, written*int64(len(payload))/3, int64(40*seg), "the run wrote at least 40 segments' worth")
	require.Positive(t, st.CopiedForward, "the dead letter, the idle message and the keys were copied forward")
	require.Positive(t, st.BytesReclaimed)
	// After a maintenance pass the log is its active segment and what
	// copying has not caught up with (a window's keys, copied forward
	// without their messages, fit in one); beside it, the segment being
	// prepared and the spares (TestTheDirectoryFitsTheStatsPlan). The
	// index keeps its table file and a checkpoint of what lives.
	require.LessOrEqual(t, maxSegments, 3, "segments in the log once it is steady")
	require.LessOrEqual(t, maxIndex, firstIndex+16<<10, "index bytes once the store is steady")
	require.LessOrEqual(t, maxDir, int64(6*seg)+maxIndex, "bytes in the store's directory once it is steady")

	// Nothing live was lost to the reclamation: after a reopen the old
	// message, the dead letter and the keys of the last minute are there,
	// and a key older than the window enqueues again.
	e.reopen()
	idle = e.queue("idle", small)
	jobs = e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1 << 10; p.DedupWindow = window }))
	got := mustReceiveOne(t, idle)
	require.Equal(t, kept.ID, got.Message.ID)
	require.Equal(t, "never received", string(got.Message.Payload))
	dls, err := jobs.DeadLetters(ctx(t), 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, dead.ID, dls[0].Message.ID)
	require.Equal(t, "kept as a dead letter", string(dls[0].Message.Payload))
	dup, err := jobs.PublishKeyed(ctx(t), fmt.Sprint("key-", rounds-10), payload)
	require.NoError(t, err)
	require.Nil(t, dup.Payload, "a key of the last minute is still remembered")
	fresh, err := jobs.PublishKeyed(ctx(t), fmt.Sprint("key-", rounds-200), payload)
	require.NoError(t, err)
	require.NotNil(t, fresh.Payload, "a key older than the window is forgotten")
}
