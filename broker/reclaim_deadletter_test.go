package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// rejectAll publishes n messages of payload to q and rejects each with
// cause, making n dead letters.
func rejectAll(t *testing.T, q *broker.Queue, n int, payload string, cause error) {
	t.Helper()
	for range n {
		mustPublish(t, q, payload)
		require.NoError(t, q.Reject(ctx(t), mustReceiveOne(t, q).Lease.Receipt, cause))
	}
}

// maintainOnce runs one maintenance pass and fails the test as soon as it
// has copied more than bound records forward without returning (the
// verdict reads a counter, not the time it took). A pass still copying
// then is ended by closing the store, which stops reclamation.
func maintainOnce(t *testing.T, e *env, bound int64) {
	t.Helper()
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = e.s.Maintain()
	}()
	t.Cleanup(func() {
		_ = e.s.Close()
		<-done
	})
	for {
		select {
		case <-done:
			require.NoError(t, err)
			require.LessOrEqual(t, e.s.Stats().CopiedForward, bound, "records copied forward by one pass")
			return
		default:
		}
		if st := e.s.Stats(); st.CopiedForward > bound {
			t.Fatalf("one maintenance pass, with no call in between, has copied %d records forward (at most %d expected) and has not returned: %d checkpoints, %d bytes reclaimed",
				st.CopiedForward, bound, st.Checkpoints, st.BytesReclaimed)
		}
		time.Sleep(time.Millisecond) // (polls a counter; the verdict does not depend on timing)
	}
}

// longCause is a dead letter's cause with a public text well inside
// MaxPublicBytes: an ordinary explanation, 810 bytes long.
var longCause = broker.NewError("DOWNSTREAM_REFUSED", 1, strings.Repeat("the downstream refused it. ", 30), "")

// A store full of dead letters with small payloads and long public causes
// does not set reclamation copying them forward for ever. Copying a dead
// letter writes its publish and its dead-letter event, reason and public
// cause included; counted by its publish alone, a segment of copied dead
// letters looked about 3% live, was copied again into a segment that
// looked the same, and one maintenance pass never returned (here, 1,464
// checkpoints and 43,920 records copied after 5 s), Backup waiting on it.
// Counted by all a copy writes, such a segment is wholly live and stays.
// Nothing is published, received or settled between the passes.
func TestOneMaintenancePassEndsWithDeadLettersOfLongCauses(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 64 }))
	const dead = 60 // their records (publish and dead letter) take about five 16 KiB segments
	rejectAll(t, q, dead, "x", longCause)
	// Copying every dead letter forward once writes two records each;
	// allow two full rounds in a pass.
	maintainOnce(t, e, 2*2*dead)
	require.Len(t, mustDeadLetters(t, q), dead)
	copied := e.s.Stats().CopiedForward
	require.NoError(t, e.s.Maintain())
	require.Equal(t, copied, e.s.Stats().CopiedForward, "a second pass finds nothing worth copying")
}

// Dead letters with long causes among acknowledged traffic are copied
// forward, so that the segments around them go, and their copies are not
// copied again: each copy of a segment costs at most a quarter of what it
// frees, reason and public cause counted, and the segments the copies fill
// are wholly live. Every dead letter keeps its reason and public cause.
func TestDeadLettersAmongAckedTrafficAreCopiedForwardOnce(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	const dead = 40
	filler := strings.Repeat("f", 1000)
	for range dead {
		for range 10 { // about 10 KiB acknowledged around each dead letter
			mustPublish(t, q, filler)
			require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
		}
		rejectAll(t, q, 1, "x", longCause)
	}
	before := e.s.Stats()
	maintainOnce(t, e, 2*dead) // a publish and a dead-letter event each, at most once
	st := e.s.Stats()
	require.Positive(t, st.CopiedForward, "the dead letters were worth copying")
	require.Less(t, st.DiskBytes, before.DiskBytes/4, "the acknowledged traffic's segments went")
	require.NoError(t, e.s.Maintain())
	require.Equal(t, st.CopiedForward, e.s.Stats().CopiedForward, "a second pass finds nothing worth copying")

	dls := mustDeadLetters(t, q)
	require.Len(t, dls, dead)
	for _, dl := range dls {
		require.Equal(t, "DOWNSTREAM_REFUSED", dl.Reason)
		require.Equal(t, longCause.Public(), dl.Cause)
		require.Equal(t, "x", string(dl.Message.Payload))
	}
}

// StoreStats.LiveBytes counts the records live messages still need, dead
// letters included: a dead letter's dead-letter event, whose reason and
// public cause exist nowhere else and which reclamation copies forward
// with its publish, and a leased message's lease. Counting publish
// records alone, 40 dead letters with a 1,000-byte public cause each
// reported a few hundred live bytes. The count is the same from the
// checkpoint a reopen loads and from an index rebuilt from the log.
func TestLiveBytesCountsTheDeadLettersRecords(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", policy())
	public := strings.Repeat("p", 1000)
	const dead = 40
	rejectAll(t, q, dead, "x", broker.NewError("REFUSED", 1, public, ""))
	require.Len(t, mustDeadLetters(t, q), dead)
	live := e.s.Stats().LiveBytes
	require.GreaterOrEqual(t, live, int64(dead*len(public)), "the live dead letters' records hold at least their public causes")

	mustPublish(t, q, "y")
	mustReceiveOne(t, q) // leased: its lease too
	leased := e.s.Stats().LiveBytes
	require.Greater(t, leased, live+20, "a leased message needs its publish and its lease")

	e.reopen()
	require.Equal(t, leased, e.s.Stats().LiveBytes, "from the checkpoint")
	e.close()
	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	e.open()
	require.Equal(t, leased, e.s.Stats().LiveBytes, "from an index rebuilt from the log")
}
