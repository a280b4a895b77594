package broker_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// counters returns the counters of st, gauges zeroed.
func counters(st broker.QueueStats) broker.QueueStats {
	st.Ready, st.Leased, st.Delayed, st.DeadLetters, st.OldestReady = 0, 0, 0, 0, time.Time{}
	return st
}

func TestStatsCounters(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.Capacity = 5; p.MaxDeliveries = 2; p.RetryDelay = 0 }))

	mustPublish(t, q, "a")
	_, err := q.PublishBatch(ctx(t), [][]byte{nil, nil})
	require.NoError(t, err)
	_, err = q.PublishKeyed(ctx(t), "k", nil)
	require.NoError(t, err)
	require.Equal(t, broker.QueueStats{Published: 4}, counters(q.Stats()), "Published counts messages")

	_, err = q.PublishKeyed(ctx(t), "k", nil)
	require.NoError(t, err)
	require.Equal(t, broker.QueueStats{Published: 4, Duplicates: 1}, counters(q.Stats()), "a duplicate counts only in Duplicates")

	mustPublish(t, q, "fills")
	_, err = q.PublishBatch(ctx(t), [][]byte{nil, nil})
	requireErrorIs(t, err, broker.QueueFull)
	_, err = q.PublishKeyed(ctx(t), "new key", nil)
	requireErrorIs(t, err, broker.QueueFull)
	require.Equal(t, broker.QueueStats{Published: 5, Duplicates: 1, Shed: 2}, counters(q.Stats()), "a shed publish counts only in Shed")

	ds := mustReceive(t, q, 5) // Delivered 5
	require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt))
	mustNack(t, q, ds[1].Lease.Receipt, nil)
	require.NoError(t, q.Reject(ctx(t), ds[2].Lease.Receipt, nil))
	again := mustReceiveOne(t, q) // Delivered 6: ds[1] redelivered
	require.Equal(t, ds[1].Message.ID, again.Message.ID)
	require.True(t, mustNack(t, q, again.Lease.Receipt, nil).DeadLettered)
	require.NoError(t, q.ReplayDeadLetter(ctx(t), again.Message.ID))
	require.Equal(t, broker.QueueStats{
		Published: 5, Duplicates: 1, Shed: 2,
		Delivered: 6, Acked: 1, Nacked: 2, Rejected: 1, DeadLettered: 2, Replayed: 1,
	}, counters(q.Stats()), "Nacked includes the nack that dead-lettered; DeadLettered counts every way in")

	// Failed calls count nothing.
	requireErrorIs(t, q.Ack(ctx(t), ds[0].Lease.Receipt), broker.LeaseExpired)
	requireErrorIs(t, q.ReplayDeadLetter(ctx(t), "nope"), broker.DeadLetterNotFound)
	_, err = q.Receive(ctx(t), 0)
	requireErrorIs(t, err, broker.InvalidBatchSize)
	require.Equal(t, int64(1), q.Stats().Acked)
	require.Equal(t, int64(6), q.Stats().Delivered)

	e.reopen()
	q = e.queue("jobs", policy(func(p *broker.PolicyValue) { p.Capacity = 5; p.MaxDeliveries = 2; p.RetryDelay = 0 }))
	require.Equal(t, broker.QueueStats{}, counters(q.Stats()), "counters count since open")
}

func TestStatsCountLeaseExhaustionAsDeadLettered(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Set(d.Lease.ExpiresAt.Add(-time.Nanosecond))
	st := q.Stats()
	require.Equal(t, [3]int{1, 0, 0}, [3]int{st.Leased, st.DeadLetters, int(st.DeadLettered)},
		"a lease on the last delivery is Leased until it lapses, not yet a dead letter")
	e.clock.Set(d.Lease.ExpiresAt)
	require.Len(t, mustDeadLetters(t, q), 1)
	st = q.Stats()
	require.Equal(t, 1, st.DeadLetters)
	require.Equal(t, int64(1), st.DeadLettered)
	require.Equal(t, int64(0), st.Nacked+st.Rejected)
}

// Stats is one snapshot as of the broker clock: once the DeadLetters gauge
// counts a message whose last lease lapsed, the DeadLettered counter must
// count it too, not only after some later call happens to sweep it.
func TestDeadLetteredCounterAgreesWithGauge(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Set(d.Lease.ExpiresAt)
	st := q.Stats()
	require.Equal(t, 1, st.DeadLetters)
	require.Equal(t, int64(1), st.DeadLettered, "the gauge says one message was moved to the dead-letter store")
}

func TestStatsGauges(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Minute }))
	gauges := func() [4]int {
		st := q.Stats()
		return [4]int{st.Ready, st.Leased, st.Delayed, st.DeadLetters}
	}
	for range 4 {
		mustPublish(t, q, "m")
	}
	require.Equal(t, [4]int{4, 0, 0, 0}, gauges())
	ds := mustReceive(t, q, 3)
	require.Equal(t, [4]int{1, 3, 0, 0}, gauges())
	mustNack(t, q, ds[0].Lease.Receipt, nil)
	require.NoError(t, q.Reject(ctx(t), ds[1].Lease.Receipt, nil))
	require.Equal(t, [4]int{1, 1, 1, 1}, gauges(), "ready, leased, delayed, dead")
	e.clock.Advance(30 * time.Second) // ds[2]'s lease lapses
	require.Equal(t, [4]int{2, 0, 1, 1}, gauges(), "a lapsed lease is Ready, not Leased")
	e.clock.Advance(30 * time.Second) // the retry delay ends
	require.Equal(t, [4]int{3, 0, 0, 1}, gauges())
	e.reopen()
	q = e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Minute }))
	require.Equal(t, [4]int{3, 0, 0, 1}, gauges(), "gauges are state, rebuilt by a restart")
}

// TestOldestReadyIsTheEnqueueTimeOfTheNextMessageReceiveHandsOut: the
// gauge a lag alert watches follows the queue's order (oldest EnqueuedAt
// among the messages receivable now), leaves leased and delayed messages
// out, is zero when nothing is receivable, and is the same in the file
// store (across a restart too) and in Memory.
func TestOldestReadyIsTheEnqueueTimeOfTheNextMessageReceiveHandsOut(t *testing.T) {
	e := newEnv(t)
	pol := policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Minute })
	for name, b := range e.storeAndMemory(pol) {
		t.Run(name, func(t *testing.T) {
			oldest := func() time.Time { return b.Stats().OldestReady }
			require.True(t, oldest().IsZero(), "an empty queue")
			publish := func() broker.MessageValue {
				m, err := b.Publish(ctx(t), []byte("m"))
				require.NoError(t, err)
				e.clock.Advance(time.Second)
				return m
			}
			a, c := publish(), publish()
			requireSameInstant(t, a.EnqueuedAt, oldest())
			ds, err := b.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Equal(t, a.ID, ds[0].Message.ID)
			requireSameInstant(t, c.EnqueuedAt, oldest(), "a leased message is not ready")
			_, err = b.Nack(ctx(t), ds[0].Lease.Receipt, nil)
			require.NoError(t, err)
			requireSameInstant(t, c.EnqueuedAt, oldest(), "nor is a delayed one")
			e.clock.Advance(time.Minute)
			requireSameInstant(t, a.EnqueuedAt, oldest(), "its retry delay over, the older message is next again")
			_, err = b.Receive(ctx(t), 2)
			require.NoError(t, err)
			require.True(t, oldest().IsZero(), "every message leased")
			e.clock.Advance(30 * time.Second) // the leases lapse
			requireSameInstant(t, a.EnqueuedAt, oldest())
		})
	}
	// The file store's ready messages come back from its index at a
	// restart.
	e.reopen()
	q := e.queue("jobs", pol)
	require.Equal(t, 2, q.Stats().Ready)
	ds := mustReceive(t, q, 1)
	requireSameInstant(t, ds[0].Message.EnqueuedAt.Add(time.Second), q.Stats().OldestReady)
}

func TestStoreStatsUnderConcurrentPublishers(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	before := e.s.Stats()
	const publishers, each = 32, 40
	var wg sync.WaitGroup
	for range publishers {
		wg.Go(func() {
			for range each {
				if _, err := q.Publish(t.Context(), []byte("payload")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := e.s.Stats()
	t.Logf("store stats: %+v", st)
	require.GreaterOrEqual(t, st.Records-before.Records, int64(publishers*each))
	require.Greater(t, st.Commits, before.Commits)
	require.GreaterOrEqual(t, st.Segments, 1)
	require.Greater(t, st.DiskBytes, int64(0))
	require.InDelta(t, float64(st.Records)/float64(st.Commits), st.MeanRecordsPerCommit, 1e-9)
	require.Greater(t, st.MeanRecordsPerCommit, 1.0, "group commit: concurrent publishers share fdatasyncs")
	require.Greater(t, st.MaxRecordsPerCommit, int64(1))
	require.LessOrEqual(t, st.Commits-before.Commits, int64(publishers*each), "never more than one fdatasync per publish")
	require.Equal(t, publishers*each, q.Stats().Ready)
}

func TestStoreStatsCountSegmentsAndDiskBytes(t *testing.T) {
	const seg = 64 << 10
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = seg })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 4 << 10 }))
	payload := strings.Repeat("x", 4<<10)
	for range 40 { // 160 KiB of payload: at least three segments
		mustPublish(t, q, payload)
	}
	st := e.s.Stats()
	require.GreaterOrEqual(t, st.Segments, 3)
	require.GreaterOrEqual(t, st.Records, int64(40))
	require.GreaterOrEqual(t, st.Commits, int64(40), "SyncAll: each sequential publish waits for its own fdatasync")

	segs, onDisk := segmentFiles(t, e.dir)
	require.Equal(t, segs, st.Segments, "Segments counts the segment files")
	require.Equal(t, onDisk, st.DiskBytes, "DiskBytes is their total size")
}

// segmentFiles returns how many log segment files dir holds and their
// total size.
func segmentFiles(t *testing.T, dir string) (n int, size int64) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, de := range entries {
		if strings.HasSuffix(de.Name(), ".seg") {
			fi, err := os.Stat(filepath.Join(dir, de.Name()))
			require.NoError(t, err)
			size += fi.Size()
			n++
		}
	}
	return n, size
}

// After Close, StoreStats still describes the files the store left: an
// operator logging them at shutdown reads the directory as it is, not
// zeros beside a LiveBytes that the files no longer seem to hold.
func TestStoreStatsAfterCloseDescribeTheFilesCloseLeft(t *testing.T) {
	const seg = 64 << 10
	// No background round: Close's checkpoint is the only one after before.
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = seg })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 4 << 10 }))
	for range 40 {
		mustPublish(t, q, strings.Repeat("x", 4<<10))
	}
	s := e.s
	before := s.Stats()
	e.close()
	st := s.Stats()
	segs, onDisk := segmentFiles(t, e.dir)
	require.GreaterOrEqual(t, segs, 3)
	require.Equal(t, segs, st.Segments, "Segments after Close")
	require.Equal(t, onDisk, st.DiskBytes, "DiskBytes after Close")
	require.Equal(t, indexFileBytes(t, e.dir), st.IndexBytes, "IndexBytes after Close: Close's checkpoint included")
	require.Equal(t, before.LiveBytes, st.LiveBytes, "nothing was acked")
	require.LessOrEqual(t, st.LiveBytes, st.DiskBytes)
	require.Equal(t, before.Checkpoints+1, st.Checkpoints, "Close's checkpoint is counted")
	require.GreaterOrEqual(t, st.Records, before.Records)
	require.Equal(t, st, s.Stats(), "a closed store's figures do not move")
}

// What StoreStats tells an operator to plan for holds: the directory's
// files outside the log (the segment being prepared, retired ones kept for
// reuse) never take more than three segments beyond DiskBytes and
// IndexBytes, while the store grows, is drained and reclaims, and after
// Close.
func TestTheDirectoryFitsTheStatsPlan(t *testing.T) {
	const seg = broker.MinSegmentBytes
	// Maintenance runs when the test says (Maintain), so that no copy
	// forward rotates the log between Stats and the look at the files.
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = seg; broker.ManualMaintenance(o) })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 2 << 10 }))
	payload := strings.Repeat("x", 2<<10)
	// The store's preparer renames files in the background (a spare
	// recycled into the next segment's temporary file) while the walk
	// runs: a file listed and gone before its size is read makes the walk
	// start again, so that every total is of one listing.
	used := func() (log, index int64) {
		t.Helper()
		for try := 0; ; try++ {
			log, index = 0, 0
			err := filepath.WalkDir(e.dir, func(path string, de fs.DirEntry, err error) error {
				if err != nil || de.IsDir() {
					return err
				}
				fi, err := de.Info()
				if err != nil {
					return err
				}
				switch {
				case filepath.Base(filepath.Dir(path)) == "index":
					index += fi.Size()
				case de.Name() == "LOCK":
					// A line naming the holder; not the log's.
				default:
					log += fi.Size()
				}
				return nil
			})
			if errors.Is(err, fs.ErrNotExist) && try < 100 {
				continue
			}
			require.NoError(t, err)
			return log, index
		}
	}
	check := func(what string, st broker.StoreStats) {
		t.Helper()
		log, _ := used()
		require.LessOrEqual(t, log, st.DiskBytes+3*seg, "%s: files beside the log's segments (%d bytes on disk, DiskBytes %d)", what, log, st.DiskBytes)
	}
	sawSpare := false
	for round := range 6 {
		for range 30 {
			mustPublish(t, q, payload)
		}
		check(fmt.Sprintf("round %d, grown", round), e.s.Stats())
		for {
			ds := mustReceive(t, q, 10)
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
			}
		}
		require.NoError(t, e.s.Maintain())
		check(fmt.Sprintf("round %d, drained and reclaimed", round), e.s.Stats())
		names, err := filepath.Glob(filepath.Join(e.dir, "spare-*"))
		require.NoError(t, err)
		sawSpare = sawSpare || len(names) > 0
	}
	require.True(t, sawSpare, "the test reclaimed no segment into a spare")
	st := e.s.Stats()
	e.close()
	log, index := used()
	require.LessOrEqual(t, log, st.DiskBytes+3*seg, "after Close")
	require.Positive(t, index)
}

// Every method is safe for concurrent use: publishers and consumers racing
// on one queue lose nothing, deliver nothing twice while its lease holds,
// and the counters add up.
func TestConcurrentUseKeepsEveryMessage(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncPublish })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 0; p.MaxDeliveries = 100 }))
	const publishers, each, consumers = 4, 50, 4
	var (
		mu      sync.Mutex
		acked   = map[string]int{}
		holders = map[string]bool{} // messages whose lease a consumer holds now
		wg      sync.WaitGroup
	)
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				if i%10 == 0 {
					if _, err := q.PublishBatch(t.Context(), [][]byte{[]byte("b1"), []byte("b2")}); err != nil {
						t.Error(err)
					}
				}
				if _, err := q.PublishKeyed(t.Context(), fmt.Sprintf("p%d-%d", p, i%25), nil); err != nil {
					t.Error(err)
				}
			}
		})
	}
	want := publishers * (each/10*2 + 25)
	for c := range consumers {
		wg.Go(func() {
			for n := 0; ; n++ {
				mu.Lock()
				done := len(acked) == want
				mu.Unlock()
				if done || t.Failed() {
					return
				}
				ds, err := q.Receive(t.Context(), 3)
				if err != nil {
					t.Error(err)
					return
				}
				for _, d := range ds {
					mu.Lock()
					if holders[d.Message.ID] {
						t.Errorf("%s delivered while another consumer holds its lease", d.Message.ID)
					}
					holders[d.Message.ID] = true
					mu.Unlock()
					settle := func() error { return q.Ack(t.Context(), d.Lease.Receipt) }
					if (n+c)%4 == 0 {
						settle = func() error { _, err := q.Nack(t.Context(), d.Lease.Receipt, nil); return err }
					}
					mu.Lock()
					delete(holders, d.Message.ID)
					mu.Unlock()
					if err := settle(); err != nil {
						t.Error(err)
					} else if (n+c)%4 != 0 {
						mu.Lock()
						acked[d.Message.ID]++
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, acked, want)
	for id, n := range acked {
		require.Equal(t, 1, n, "%s acked once", id)
	}
	st := q.Stats()
	require.Equal(t, [4]int{0, 0, 0, 0}, [4]int{st.Ready, st.Leased, st.Delayed, st.DeadLetters})
	require.Equal(t, int64(want), st.Published)
	require.Equal(t, int64(publishers*each-publishers*25), st.Duplicates)
	require.Equal(t, st.Acked+st.Nacked, st.Delivered)
	require.Equal(t, int64(want), st.Acked)
}

// After Close, a queue's figures are those of the store Close left, as
// StoreStats are: the store observes no time once closed, so a lease that
// lapses, or a retry delay that ends, on the clock after Close changes
// nothing it reports (the next Open sees them), and OldestReady still
// names the oldest message Close left receivable, though the index it was
// read from is closed.
func TestQueueStatsAfterCloseAreThoseCloseLeft(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	first := mustPublish(t, q, "a")
	e.clock.Advance(time.Millisecond)
	mustPublish(t, q, "b")
	mustPublish(t, q, "c")
	d := mustReceiveOne(t, q) // "a": leased for 30 s
	require.Equal(t, first.ID, d.Message.ID)
	_, err := q.Nack(ctx(t), d.Lease.Receipt, nil)
	require.NoError(t, err)
	mustReceiveOne(t, q) // "b"
	before := q.Stats()
	require.Equal(t, 1, before.Leased)
	require.Equal(t, 1, before.Delayed, "a waits for its retry delay")
	require.Equal(t, 1, before.Ready)
	require.False(t, before.OldestReady.IsZero())

	e.close()
	require.Equal(t, before, q.Stats(), "Stats right after Close")
	e.clock.Advance(time.Hour) // the lease and the retry delay end
	require.Equal(t, before, q.Stats(), "a closed queue's figures do not move with the clock")
}

// Stats called while Close runs return figures of the open store or those
// Close left: Close closes the index's table last, and a Stats that read
// the table's size after that counted none of its files. The race is met
// by chance, so the test closes many stores under a reader.
func TestStoreStatsRacingCloseNeverReadTheClosedTable(t *testing.T) {
	rounds := 100
	if testing.Short() {
		rounds = 20
	}
	for range rounds {
		e := newEnv(t, broker.ManualMaintenance)
		q := e.queue("jobs", policy())
		mustPublish(t, q, "a")
		s := e.s
		require.NoError(t, s.Maintain()) // the table's entries on disk
		before := s.Stats().IndexBytes
		stop := make(chan struct{})
		var seen []int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				seen = append(seen, s.Stats().IndexBytes)
			}
		})
		e.close()
		close(stop)
		wg.Wait()
		final := s.Stats().IndexBytes
		require.Positive(t, final)
		for _, b := range seen {
			// Close's checkpoint rewrites the index; nothing it does
			// takes it below the smaller of its sizes before and after.
			require.GreaterOrEqual(t, b, min(before, final), "IndexBytes read by a Stats racing Close (before %d, after %d)", before, final)
		}
	}
}

// Records less OwnRecords is what the callers' calls appended (walbench
// reads it so): the secret a new store's Open writes is the store's own
// record, and a store no caller has touched reports none of the callers'.
func TestANewStoreCountsItsSecretAsItsOwnRecord(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncAll, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.Sync = mode })
			st := e.s.Stats()
			require.Positive(t, st.Records, "Open of a new directory appended the store's secret")
			require.Equal(t, st.Records, st.OwnRecords,
				"no call was made: every record of the new store is one it wrote for itself (%+v)", st)
		})
	}
}
