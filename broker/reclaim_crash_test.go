package broker_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/recovery"
	"github.com/walbroker/walbroker/vfs"
)

// fastDir returns a fresh directory on tmpfs when the machine has one (the
// crash tests fdatasync a great deal and check logic, not the disk), else
// under t.TempDir.
func fastDir(t testing.TB) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "walbroker-test-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// copyTree copies the regular files of src into dst (created), leaving
// out the lock file.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	require.NoError(t, recovery.CopyTree(src, dst))
}

// reclaimWorld is what the crash tests expect of a store: the messages that
// must be there (by queue, ID → payload), and those acknowledged for good.
type reclaimWorld struct {
	live  map[string]map[string]string
	acked map[string]bool
	keyed map[string]string // dedup key of jobs → the original's ID
}

var (
	jobsPolicy  = policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024; p.DedupWindow = time.Hour })
	stuckPolicy = policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	dlqPolicy   = policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024; p.MaxDeliveries = 1 })
)

func reclaimOptions(clock *fakeClock, fs vfs.FS) broker.Options {
	o := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, FS: fs}
	broker.ManualMaintenance(&o)
	return o
}

// buildReclaimTemplate makes a store whose oldest segments are pinned by a
// few live records — messages nobody consumes, a lease held, dead letters
// and dedup keys of acknowledged messages — behind several segments of
// acknowledged churn, with nothing reclaimed yet.
func buildReclaimTemplate(t *testing.T, dir string, clock *fakeClock) *reclaimWorld {
	w := &reclaimWorld{live: map[string]map[string]string{"jobs": {}, "stuck": {}, "dlq": {}}, acked: map[string]bool{}, keyed: map[string]string{}}
	s, err := broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	jobs, err := s.Queue("jobs", jobsPolicy)
	require.NoError(t, err)
	stuck, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	dlq, err := s.Queue("dlq", dlqPolicy)
	require.NoError(t, err)
	for i := range 5 {
		p := fmt.Sprintf("stuck-%d", i)
		m := mustPublish(t, stuck, p)
		w.live["stuck"][m.ID] = p
	}
	for i := range 3 {
		k := fmt.Sprintf("k%d", i)
		m, err := jobs.PublishKeyed(ctx(t), k, []byte("keyed-"+k))
		require.NoError(t, err)
		w.keyed[k] = m.ID
	}
	ds := mustReceive(t, jobs, 3)
	require.Len(t, ds, 3)
	for _, d := range ds[:2] {
		require.NoError(t, jobs.Ack(ctx(t), d.Lease.Receipt))
		w.acked[d.Message.ID] = true
	}
	w.live["jobs"][ds[2].Message.ID] = string(ds[2].Message.Payload) // leased, held
	for i := range 2 {
		p := fmt.Sprintf("dead-%d", i)
		m := mustPublish(t, dlq, p)
		w.live["dlq"][m.ID] = p
	}
	for _, d := range mustReceive(t, dlq, 2) {
		_, err := dlq.Nack(ctx(t), d.Lease.Receipt, fmt.Errorf("no"))
		require.NoError(t, err)
	}
	require.NoError(t, churn(t, jobs, w, 300))
	return w
}

// churn publishes n messages of 200 bytes to q and acknowledges each.
func churn(t testing.TB, q *broker.Queue, w *reclaimWorld, n int) error {
	for i := range n {
		m, err := q.Publish(ctx(t), []byte(fmt.Sprintf("churn-%04d-%s", i, strings.Repeat("c", 190))))
		if err != nil {
			return err
		}
		w.live["jobs"][m.ID] = string(m.Payload)
		ds, err := q.Receive(ctx(t), 1)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := q.Ack(ctx(t), d.Lease.Receipt); err != nil {
				// An ack that failed may or may not have happened.
				delete(w.live["jobs"], d.Message.ID)
				return err
			}
			delete(w.live["jobs"], d.Message.ID)
			w.acked[d.Message.ID] = true
		}
	}
	return nil
}

// reclaimWorkload is what runs, and may crash, over the template: reclaim
// (checkpoint, copy forward, remove), more churn, and reclaim again. It
// stops at the first error.
func reclaimWorkload(t *testing.T, dir string, clock *fakeClock, fs vfs.FS, w *reclaimWorld) error {
	s, err := broker.Open(dir, reclaimOptions(clock, fs))
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	if err := s.Maintain(); err != nil {
		return err
	}
	jobs, err := s.Queue("jobs", jobsPolicy)
	if err != nil {
		return err
	}
	if err := churn(t, jobs, w, 60); err != nil {
		return err
	}
	return s.Maintain()
}

func (w *reclaimWorld) clone() *reclaimWorld {
	c := &reclaimWorld{live: map[string]map[string]string{}, acked: map[string]bool{}, keyed: w.keyed}
	for q, m := range w.live {
		c.live[q] = map[string]string{}
		for id, p := range m {
			c.live[q][id] = p
		}
	}
	for id := range w.acked {
		c.acked[id] = true
	}
	return c
}

// checkReclaimed opens a crash clone and checks that it opens, that the
// state it loads from its checkpoint is the state a rebuild from its log
// gives, that every message acknowledged as published and not as acked is
// there with its payload, that no acked one is, and that dedup keys still
// name their originals.
func checkReclaimed(t *testing.T, clone string, clock *fakeClock, w *reclaimWorld, what string) {
	t.Helper()
	rebuilt := clone + "-rebuilt"
	copyTree(t, clone, rebuilt)
	require.NoError(t, os.RemoveAll(filepath.Join(rebuilt, "index")))

	s, err := broker.Open(clone, reclaimOptions(clock, nil))
	require.NoError(t, err, what)
	fromCheckpoint := broker.Dump(s)
	r, err := broker.Open(rebuilt, reclaimOptions(clock, nil))
	require.NoError(t, err, what)
	requireSameState(t, broker.Dump(r), fromCheckpoint, what+": checkpoint and rebuild differ")
	require.NoError(t, r.Close())

	clock.Advance(time.Minute) // every lease lapses; still inside the dedup window
	defer clock.Advance(-time.Minute)
	for name, want := range w.live {
		var pol broker.PolicyValue
		switch name {
		case "jobs":
			pol = jobsPolicy
		case "stuck":
			pol = stuckPolicy
		default:
			pol = dlqPolicy
		}
		q, err := s.Queue(name, pol)
		require.NoError(t, err, what)
		got := map[string]string{}
		for {
			ds, err := q.Receive(ctx(t), 64)
			require.NoError(t, err, what)
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				got[d.Message.ID] = string(d.Message.Payload)
			}
		}
		dls, err := q.DeadLetters(ctx(t), 1000)
		require.NoError(t, err, what)
		for _, dl := range dls {
			got[dl.Message.ID] = string(dl.Message.Payload)
		}
		for id, p := range want {
			require.Equal(t, p, got[id], "%s: queue %s lost message %s", what, name, id)
		}
		for id := range got {
			require.False(t, w.acked[id], "%s: queue %s: acknowledged message %s came back", what, name, id)
		}
	}
	jobs, err := s.Queue("jobs", jobsPolicy)
	require.NoError(t, err)
	for k, id := range w.keyed {
		m, err := jobs.PublishKeyed(ctx(t), k, []byte("again"))
		require.NoError(t, err, what)
		require.Equal(t, id, m.ID, "%s: dedup key %s forgot its original", what, k)
	}
	require.NoError(t, s.Close())
}

// crashOptionsFor varies what a crash at operation k leaves of the
// directory root: the synced data only; every write, as a process crash
// leaves it; or half the unsynced blocks, at random, with the last write
// torn.
func crashOptionsFor(k int64, root string, rng *rand.Rand) vfs.CrashOptions {
	opts := vfs.CrashOptions{Root: root, Rand: rng}
	switch k % 3 {
	case 1:
		opts.KeepUnsyncedFraction, opts.TearLastWrite = 0.5, true
	case 2:
		opts.KeepUnsyncedFraction = 1 // every unsynced write stays (names not made durable still go)
	}
	return opts
}

// metadataStates are the ways a power loss may treat the unsynced changes
// of names and of sizes apart from the data (vfs.MetadataCrashStates). The
// crash tests check them beside the clones that keep a share of the data
// only.
var metadataStates = vfs.MetadataCrashStates()

// metadataCrashOptions returns the options of a clone of root in the i-th
// of the metadataStates (in turn, i taken modulo their number), its Rand
// seeded from seed, and a description of the state. A test draws seed from
// the Rand of a clone it already takes, so that the seeds of its other
// clones keep their meaning.
func metadataCrashOptions(i int64, root string, seed uint64) (vfs.CrashOptions, string) {
	ms := metadataStates[i%int64(len(metadataStates))]
	return ms.Options(root, rand.New(rand.NewPCG(seed, 0x6d657461))), ms.Name
}

// TestReclaimSurvivesACrashAtEveryStep crashes the reclaiming of old
// segments — checkpoint, copy forward, removal, each file operation of
// them — at every mutating file-system operation in turn, clones the
// directory to what the device held (synced data only; all written data, as
// a process crash leaves it; or a random share with the last write torn;
// at every eighth crash, also with unsynced names and sizes kept apart from
// the data), and checks the clone.
func TestReclaimSurvivesACrashAtEveryStep(t *testing.T) {
	root := fastDir(t)
	clock := newFakeClock()
	template := filepath.Join(root, "template")
	w := buildReclaimTemplate(t, template, clock)
	segsBefore, _ := filepath.Glob(filepath.Join(template, "*.seg"))

	dry := vfs.NewCrashFS(vfs.Default)
	dryDir := filepath.Join(root, "dry")
	copyTree(t, template, dryDir)
	dw := w.clone()
	require.NoError(t, reclaimWorkload(t, dryDir, clock, dry, dw))
	segsAfter, _ := filepath.Glob(filepath.Join(dryDir, "*.seg"))
	require.Less(t, len(segsAfter), len(segsBefore), "the workload reclaims segments")
	checkReclaimed(t, dryDir, clock, dw, "no crash")
	total := dry.Ops()
	t.Logf("reclaim workload: %d mutating operations; segments %d -> %d", total, len(segsBefore), len(segsAfter))

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 4))
	step := int64(1)
	if testing.Short() {
		step = 5
	}
	for k := rng.Int64N(step); k <= total; k += step {
		dir := filepath.Join(root, fmt.Sprintf("run-%d", k))
		copyTree(t, template, dir)
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		kw := w.clone()
		_ = reclaimWorkload(t, dir, clock, cfs, kw)
		opts := crashOptionsFor(k, dir, rand.New(rand.NewPCG(rng.Uint64(), 5)))
		clone := filepath.Join(root, fmt.Sprintf("clone-%d", k))
		require.NoError(t, cfs.CrashClone(clone, opts))
		what := fmt.Sprintf("crash after op %d of %d (keep %.1f)", k, total, opts.KeepUnsyncedFraction)
		if k%4 == 0 {
			// Crash the open of the clone too (its recovery, its
			// rebuild, its checkpoint), then check what that left.
			again := filepath.Join(root, fmt.Sprintf("again-%d", k))
			copyTree(t, clone, again)
			rfs := vfs.NewCrashFS(vfs.Default)
			rfs.CrashAfter(rng.Int64N(12))
			if s, err := broker.Open(again, reclaimOptions(clock, rfs)); err == nil {
				_ = s.Close()
			}
			clone2 := again + "-clone"
			require.NoError(t, rfs.CrashClone(clone2, vfs.CrashOptions{Root: again, Rand: rand.New(rand.NewPCG(rng.Uint64(), 6)), KeepUnsyncedFraction: 0.5}))
			checkReclaimed(t, clone2, clock, kw, what+", then during its open")
			for _, d := range []string{again, clone2, clone2 + "-rebuilt"} {
				require.NoError(t, os.RemoveAll(d))
			}
		}
		checkReclaimed(t, clone, clock, kw, what)
		if n := k / step; n%8 == 3 {
			// The same power loss with unsynced names and sizes kept
			// apart from the data; its Rand is drawn from the first
			// clone's, so that the seeds keep their meaning.
			mopts, state := metadataCrashOptions(n/8, dir, opts.Rand.Uint64())
			mclone := filepath.Join(root, fmt.Sprintf("metadata-clone-%d", k))
			require.NoError(t, cfs.CrashClone(mclone, mopts))
			checkReclaimed(t, mclone, clock, kw, fmt.Sprintf("crash after op %d of %d (%s)", k, total, state))
			for _, d := range []string{mclone, mclone + "-rebuilt"} {
				require.NoError(t, os.RemoveAll(d))
			}
		}
		for _, d := range []string{dir, clone, clone + "-rebuilt"} {
			require.NoError(t, os.RemoveAll(d))
		}
	}
}

// Table files of ranges whose messages are all acknowledged are removed at
// the next checkpoint, and the store opens the same without them.
func TestTableFilesOfAckedRangesAreRemoved(t *testing.T) {
	dir := fastDir(t)
	clock := newFakeClock()
	opts := reclaimOptions(clock, nil)
	opts.Sync = broker.SyncNone
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("jobs", jobsPolicy)
	require.NoError(t, err)
	const n = 70_200 // more than one table file's 65536 entries
	batch := make([][]byte, 300)
	for i := range batch {
		batch[i] = []byte("m")
	}
	for range n / len(batch) {
		_, err := q.PublishBatch(ctx(t), batch)
		require.NoError(t, err)
	}
	require.NoError(t, s.Maintain())
	tables, _ := filepath.Glob(filepath.Join(dir, "index", "tbl-*.idx"))
	require.Len(t, tables, 2, "the checkpoint wrote the entries of both ranges")
	before := s.Stats().IndexBytes

	acked := 0
	for acked < 66_000 {
		ds, err := q.Receive(ctx(t), 1000)
		require.NoError(t, err)
		for _, d := range ds {
			require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
		}
		acked += len(ds)
	}
	require.NoError(t, s.Maintain())
	tables, _ = filepath.Glob(filepath.Join(dir, "index", "tbl-*.idx"))
	require.Equal(t, []string{filepath.Join(dir, "index", "tbl-000000000001.idx")}, tables)
	require.Less(t, s.Stats().IndexBytes, before)
	want := broker.Dump(s)
	require.NoError(t, s.Close())

	s, err = broker.Open(dir, opts)
	require.NoError(t, err)
	requireSameState(t, want, broker.Dump(s), "reopened without the removed table file")
	require.Equal(t, n-acked, mustStats(t, s, "jobs").Ready)
	require.NoError(t, s.Close())
}

func mustStats(t testing.TB, s *broker.Store, name string) broker.QueueStats {
	q, err := s.Queue(name, jobsPolicy)
	require.NoError(t, err)
	return q.Stats()
}

// Store.Stats reports the files: segments and their bytes, the bytes live
// messages still need, the index's bytes, the last checkpoint, and what
// reclaiming removed and copied.
func TestStoreStatsReportReclamation(t *testing.T) {
	dir := fastDir(t)
	clock := newFakeClock()
	w := buildReclaimTemplate(t, dir, clock)
	s, err := broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer s.Close()
	before := s.Stats()
	require.NotEmpty(t, before.LastCheckpoint, "the checkpoint Open loaded")
	require.Zero(t, before.BytesReclaimed)
	require.Positive(t, before.IndexBytes)

	require.NoError(t, s.Maintain())
	st := s.Stats()
	require.Less(t, st.Segments, before.Segments)
	require.Equal(t, before.DiskBytes-st.DiskBytes, st.BytesReclaimed)
	require.Equal(t, int64(st.Segments)*broker.MinSegmentBytes, st.DiskBytes)
	require.Positive(t, st.CopiedForward)
	require.Positive(t, st.OwnRecords)
	require.GreaterOrEqual(t, st.Checkpoints, int64(2), "one before and one after copying forward")
	require.NotEmpty(t, st.LastCheckpoint)

	// Live bytes: the records of the live messages (5 stuck, 1 leased,
	// 2 dead letters, each under 100 bytes framed), and nothing acked.
	live := 0
	for _, m := range w.live {
		live += len(m)
	}
	require.Equal(t, 8, live)
	require.Positive(t, st.LiveBytes)
	require.LessOrEqual(t, st.LiveBytes, int64(live*100))
}

// StoreStats.OwnRecords counts, of Records, those the store wrote for
// itself, segment preambles among them: a rotation whose next segment
// cannot be made (here a full disk) writes no preamble, and OwnRecords
// must not count one. The log's writer asks for the preamble before it
// takes the next file, so the records are counted where the log writes
// them, not where the store hands them over.
func TestOwnRecordsCountsNoPreambleOfARotationThatFailed(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	dir := t.TempDir()
	s, err := broker.Open(dir, broker.Options{FS: ffs, SegmentBytes: broker.MinSegmentBytes, Sync: broker.SyncAll})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024})
	require.NoError(t, err)
	// Segment 2 is prepared already; segment 3 cannot be made.
	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: "0000000003.seg", Err: syscall.ENOSPC})
	payload := make([]byte, 512)
	var before broker.StoreStats
	for i := 0; ; i++ {
		require.Less(t, i, 1000, "the third segment was never needed")
		before = s.Stats()
		if _, err := q.Publish(t.Context(), payload); err != nil {
			break
		}
	}
	require.Positive(t, ffs.Injected(vfs.OpOpen), "the failed publish is the one whose rotation could not make segment 3")
	after := s.Stats()
	t.Logf("records %d -> %d, own %d -> %d", before.Records, after.Records, before.OwnRecords, after.OwnRecords)
	require.LessOrEqual(t, after.OwnRecords-before.OwnRecords, after.Records-before.Records,
		"OwnRecords grew by more than Records: it counts the preamble of a rotation that wrote nothing")
}
