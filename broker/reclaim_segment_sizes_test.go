package broker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// manualOptions are a store's options with segments of seg bytes and no
// background maintenance: each test says when a pass runs.
func manualOptions(clock *fakeClock, seg int64) broker.Options {
	o := broker.Options{Now: clock.Now, SegmentBytes: seg}
	broker.ManualMaintenance(&o)
	return o
}

// The oldest segment is copied forward only when copying some run of
// sealed segments starting with it writes at most a quarter of the run's
// size; a larger live share is a real backlog, which copying would only
// move. Segments written before a reopen with larger segments keep their
// size: a run of them wholly live is not copied, however small it is
// beside Options.SegmentBytes.
func TestWhollyLiveSmallSegmentsAreNotCopiedAfterReopenWithLargerSegments(t *testing.T) {
	dir := fastDir(t)
	clock := newFakeClock()
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	s, err := broker.Open(dir, manualOptions(clock, broker.MinSegmentBytes))
	require.NoError(t, err)
	q, err := s.Queue("backlog", pol)
	require.NoError(t, err)
	for i := range 60 { // about four 16 KiB segments, every message live
		mustPublish(t, q, fmt.Sprintf("%04d-%s", i, strings.Repeat("b", 1000)))
	}
	require.NoError(t, s.Close())
	before, _ := segmentFiles(t, dir)

	s, err = broker.Open(dir, manualOptions(clock, 16*broker.MinSegmentBytes))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	q, err = s.Queue("backlog", pol)
	require.NoError(t, err)
	for i := range 20 { // past the old active segment, into a new large one
		mustPublish(t, q, fmt.Sprintf("more-%04d-%s", i, strings.Repeat("m", 1000)))
	}
	require.NoError(t, s.Maintain())
	st := s.Stats()
	t.Logf("segment files before the reopen %d; stats after: %+v", before, st)
	require.Zero(t, st.CopiedForward,
		"every record of the old 16 KiB segments is live (a backlog: all of their size), yet %d records were copied forward (%d bytes reclaimed by copying a wholly live run)", st.CopiedForward, st.BytesReclaimed)
}

// The other side of the same measure: after a reopen with smaller
// segments, old large segments whose live records are well under a
// quarter of their size (about 19%) are copied forward, and their
// acknowledged bytes come back, as copying them writes at most a quarter
// of the run's size.
func TestMostlyAckedLargeSegmentsAreCopiedAfterReopenWithSmallerSegments(t *testing.T) {
	dir := fastDir(t)
	clock := newFakeClock()
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	big := int64(4 * broker.MinSegmentBytes)
	s, err := broker.Open(dir, manualOptions(clock, big))
	require.NoError(t, err)
	live, err := s.Queue("live", pol)
	require.NoError(t, err)
	q, err := s.Queue("jobs", pol)
	require.NoError(t, err)
	body := strings.Repeat("b", 1000)
	for i := range 4 * 60 { // four 64 KiB segments: about 12 live messages in each, the rest acked
		if i%5 == 0 {
			mustPublish(t, live, fmt.Sprintf("%04d-%s", i, body))
			continue
		}
		mustPublish(t, q, fmt.Sprintf("%04d-%s", i, body))
		require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
	}
	require.NoError(t, s.Close())

	s, err = broker.Open(dir, manualOptions(clock, broker.MinSegmentBytes))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	q, err = s.Queue("jobs", pol)
	require.NoError(t, err)
	for i := range 40 { // into two new 16 KiB segments, all acked
		mustPublish(t, q, fmt.Sprintf("more-%04d-%s", i, body))
		require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
	}
	before := s.Stats()
	require.NoError(t, s.Maintain())
	st := s.Stats()
	t.Logf("before %+v\nafter %+v", before, st)
	require.Positive(t, st.CopiedForward,
		"old 64 KiB segments about 19%% live (LiveBytes %d of DiskBytes %d) were not copied forward: nothing reclaimed (%d bytes)", st.LiveBytes, st.DiskBytes, st.BytesReclaimed)
	require.GreaterOrEqual(t, st.BytesReclaimed, 4*big,
		"copying forward the live records of the old 64 KiB segments reclaims all four of them")
}
