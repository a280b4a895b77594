package broker_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/recovery"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// crashClone returns a copy of e's directory as a power loss now would
// leave it: no Close, no clean mark, only what was synced.
func crashClone(t *testing.T, e *env, cfs *vfs.CrashFS) string {
	t.Helper()
	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: e.dir}))
	return clone
}

// TestALogEndingBeforeItsCheckpointIsRefused: a checkpoint's position was
// durable when it was written (its barrier synced it), so a log that ends
// before it after a crash has lost synced records — here its last segment
// is gone, which the log alone cannot tell from a log that never reached
// it (it starts that segment afresh after the sealed one before). Open
// refuses it with Corrupt, naming where the log now ends, rather than
// rebuilding without those records; Salvage opens what is left.
func TestALogEndingBeforeItsCheckpointIsRefused(t *testing.T) {
	cfs := vfs.NewCrashFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) {
		o.FS, o.SegmentBytes = cfs, broker.MinSegmentBytes
	})
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	q := e.queue("jobs", pol)
	for i := 0; e.s.Stats().Segments < 3; i++ {
		mustPublish(t, q, fmt.Sprintf("%04d%s", i, bytes.Repeat([]byte("x"), 500)))
	}
	mustPublish(t, q, "in the last segment")
	require.NoError(t, e.s.Maintain()) // a checkpoint at the log's end, in segment 3
	dir := crashClone(t, e, cfs)
	require.NoError(t, os.Remove(filepath.Join(dir, "0000000003.seg")))

	opts := broker.Options{SegmentBytes: broker.MinSegmentBytes}
	_, err := broker.Open(dir, opts)
	requireErrorIs(t, err, broker.Corrupt, "0000000003.seg", "synced records are gone")

	opts.Salvage = true
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.Recovery().IndexRebuilt, "the checkpoint describes records that are gone")
	q2, err := s.Queue("jobs", pol)
	require.NoError(t, err)
	for _, d := range receiveAll(t, q2) {
		require.NotEqual(t, "in the last segment", string(d.Message.Payload))
	}
}

// TestACheckpointBeforeTheLogsFirstSegmentIsNotUsed: a checkpoint whose
// position lies in a segment no longer in the directory (removed by hand:
// the store removes segments only below its last checkpoint) describes
// records that are gone. Open does not load it; it rebuilds from the log
// it finds, and every message it then holds can be read.
func TestACheckpointBeforeTheLogsFirstSegmentIsNotUsed(t *testing.T) {
	cfs := vfs.NewCrashFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) {
		o.FS, o.SegmentBytes = cfs, broker.MinSegmentBytes
	})
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	mustPublish(t, q, "first")
	require.NoError(t, e.s.Maintain()) // a checkpoint in segment 1
	for i := 0; e.s.Stats().Segments < 4; i++ {
		mustPublish(t, q, fmt.Sprintf("%04d%s", i, bytes.Repeat([]byte("y"), 500)))
	}
	dir := crashClone(t, e, cfs)
	require.NoError(t, os.Remove(filepath.Join(dir, "0000000001.seg")))

	s, err := broker.Open(dir, broker.Options{SegmentBytes: broker.MinSegmentBytes})
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.Recovery().IndexRebuilt, "the checkpoint names a segment that is gone")
	q2, err := s.Queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	require.NoError(t, err)
	receiveAll(t, q2)
}

// receiveAll receives every message q holds, requiring each to be
// readable and as many as its Stats count ready (at least one).
func receiveAll(t *testing.T, q *broker.Queue) []broker.DeliveryValue {
	t.Helper()
	ready := q.Stats().Ready
	require.Positive(t, ready)
	var all []broker.DeliveryValue
	for {
		ds, err := q.Receive(ctx(t), 100)
		require.NoError(t, err, "every message the store holds can be read")
		if len(ds) == 0 {
			break
		}
		all = append(all, ds...)
	}
	require.Len(t, all, ready)
	return all
}

// TestACheckpointWhoseMarkerCannotBeReadFailsOpenAndIsKept: when the index
// directory's SUSPECT marker cannot be looked for (an I/O error, not its
// absence), the store cannot tell whether it found damage after its last
// checkpoint. It once trusted the checkpoint, and skipped verifying the
// log it covered; then it rebuilt the index from the log, which removes
// the checkpoint, and with it what only the checkpoint knows (the
// messages a later Salvage names lost: see open_transient_test.go). Open
// now fails naming the marker and the cause, and removes nothing: once
// the marker reads, the store opens from its checkpoint with every
// message.
func TestACheckpointWhoseMarkerCannotBeReadFailsOpenAndIsKept(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS = ffs })
	q := e.queue("jobs", policy())
	mustPublish(t, q, "one")
	mustPublish(t, q, "two")
	e.close() // with a checkpoint

	e.open()
	require.False(t, e.s.Recovery().IndexRebuilt, "the store starts from its checkpoint")
	e.close()
	before := treeFiles(t, e.dir)

	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: "SUSPECT", Err: syscall.EIO})
	_, err := broker.Open(e.dir, e.opts)
	require.NotZero(t, ffs.Injected(vfs.OpOpen))
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, filepath.Join("index", "SUSPECT"))
	require.Equal(t, before, treeFiles(t, e.dir), "a failed Open removed or added files")

	ffs.Clear()
	e.open()
	require.False(t, e.s.Recovery().IndexRebuilt, "the checkpoint is still there")
	var got []string
	for _, d := range receiveAll(t, e.queue("jobs", policy())) {
		got = append(got, string(d.Message.Payload))
	}
	require.ElementsMatch(t, []string{"one", "two"}, got)
}

// treeFiles lists the files under dir, each with its size.
func treeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, fmt.Sprintf("%s %d", rel, fi.Size()))
		return nil
	}))
	return out
}

// storeWith makes a store in a fresh directory holding queue name with
// the messages payloads, closed (with a checkpoint), and returns it with
// the IDs of its messages.
func storeWith(t *testing.T, name string, pol broker.PolicyValue, payloads []string, mods ...func(*broker.Options)) (*env, []string) {
	t.Helper()
	e := newEnv(t, mods...)
	q := e.queue(name, pol)
	var ids []string
	for _, p := range payloads {
		ids = append(ids, mustPublish(t, q, p).ID)
	}
	e.close()
	return e, ids
}

// swapIndex replaces the index directory of dir by a copy of from's.
func swapIndex(t *testing.T, from, dir string) {
	t.Helper()
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
	require.NoError(t, recovery.CopyTree(filepath.Join(from, "index"), filepath.Join(dir, "index")))
}

// requireOwnState opens e's store with a logger and requires that it
// rebuilt the index from the log, saying the checkpoint was another
// store's, and holds exactly queue name with the messages ids.
func requireOwnState(t *testing.T, e *env, name string, pol broker.PolicyValue, ids []string) {
	t.Helper()
	var buf bytes.Buffer // written only by Open, on this goroutine
	opts := e.opts
	opts.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	s, err := broker.Open(e.dir, opts)
	require.NoError(t, err, "another store's index is no damage to this store's log")
	e.s = s
	require.True(t, s.Recovery().IndexRebuilt, "the state comes from the log (recovery: %v)", s.Recovery())
	require.Contains(t, buf.String(), "another store's log")
	require.Equal(t, []string{name}, s.Queues(), "the queues are those the log declares")
	q := e.queue(name, pol)
	var got []string
	for _, d := range receiveAll(t, q) {
		got = append(got, d.Message.ID)
	}
	require.Equal(t, ids, got, "every acknowledged publish is there")

	// The checkpoint the rebuild wrote is this log's: the next open starts
	// from it.
	e.close()
	e.open()
	require.False(t, e.s.Recovery().IndexRebuilt)
	require.Equal(t, []string{name}, e.s.Queues())
}

// TestAnIndexFromAnotherStoreIsNotTakenForThisOnesState: Open loads the
// queues' state from the last checkpoint only when it is usable, and the
// log is the source of truth (API.md: queue state is a projection of the
// log). A checkpoint taken of another store's log (its index directory
// copied into this one's, by a restore that mixed two stores' files) is
// not a projection of this log, whatever its position: Open rebuilds the
// state from the log, drops the other store's table files with it, and
// loses none of this store's acknowledged publishes. The two stores are
// made of the same sequence of same-sized records, so that the other
// checkpoint's position is this log's end.
func TestAnIndexFromAnotherStoreIsNotTakenForThisOnesState(t *testing.T) {
	a, _ := storeWith(t, "alpha", policy(), []string{"aaaa0", "aaaa1", "aaaa2", "aaaa3", "aaaa4"})
	b, bravo := storeWith(t, "bravo", policy(), []string{"bbbb0", "bbbb1", "bbbb2", "bbbb3", "bbbb4"})
	swapIndex(t, a.dir, b.dir)
	requireOwnState(t, b, "bravo", policy(), bravo)
}

// The same, when the other store's checkpoint is far ahead of this log,
// in a segment it does not have, and vouches for seals at offsets this
// log's segments do not end at: it is not taken for records this log lost
// (a Corrupt refusal of a log nothing happened to), nor are its hints
// about the log's segments.
func TestAnIndexFromALongerStoreIsNotTakenForLostRecords(t *testing.T) {
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	small := func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes }
	var long []string
	for i := range 150 {
		long = append(long, fmt.Sprintf("%04d%s", i, bytes.Repeat([]byte("a"), 600+i)))
	}
	var short []string
	for i := range 100 {
		short = append(short, fmt.Sprintf("%04d%s", i, bytes.Repeat([]byte("b"), 500)))
	}
	a, _ := storeWith(t, "alpha", pol, long, small)
	b, bravo := storeWith(t, "bravo", pol, short, small)
	segsA, _ := filepath.Glob(filepath.Join(a.dir, "*.seg"))
	segsB, _ := filepath.Glob(filepath.Join(b.dir, "*.seg"))
	require.Greater(t, len(segsB), 2, "the test needs sealed segments in this log")
	require.Greater(t, len(segsA), len(segsB)+1, "the test needs the other log to be longer by segments")
	swapIndex(t, a.dir, b.dir)
	requireOwnState(t, b, "bravo", pol, bravo)
}

// A checkpoint marked suspect is consulted, not trusted: the queues it
// declares are declared again in the rebuild, in case salvage cut them
// from the log. Another store's is not even consulted: its queue numbers
// would name this store's queues under other names.
func TestASuspectIndexFromAnotherStoreIsNotConsulted(t *testing.T) {
	a, _ := storeWith(t, "alpha", policy(), []string{"aaaa0", "aaaa1"})
	b, bravo := storeWith(t, "bravo", policy(), []string{"bbbb0", "bbbb1"})
	swapIndex(t, a.dir, b.dir)
	require.NoError(t, index.MarkSuspect(vfs.Default, filepath.Join(b.dir, "index")))
	requireOwnState(t, b, "bravo", policy(), bravo)
}

// A checkpoint of an earlier state of the same store (its index directory
// restored from an older copy) is a projection of the log as it was then:
// Open loads it and replays the log after its position, and the state is
// the log's as it is now, with no rebuild. (A copy older than the log's
// first segment is rebuilt from: see
// TestACheckpointBeforeTheLogsFirstSegmentIsNotUsed.)
func TestAnEarlierIndexOfTheSameStoreIsReplayedForward(t *testing.T) {
	e, ids := storeWith(t, "jobs", policy(), []string{"m0", "m1", "m2"})
	old := t.TempDir()
	require.NoError(t, recovery.CopyTree(filepath.Join(e.dir, "index"), filepath.Join(old, "index")))

	e.open()
	q := e.queue("jobs", policy())
	ids = append(ids, mustPublish(t, q, "m3").ID, mustPublish(t, q, "m4").ID)
	d := mustReceiveOne(t, q)
	require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
	e.close()
	swapIndex(t, old, e.dir)

	e.open()
	require.False(t, e.s.Recovery().IndexRebuilt, "an earlier checkpoint of this log is usable")
	require.Positive(t, e.s.Recovery().Replayed)
	var got []string
	for _, d := range receiveAll(t, e.queue("jobs", policy())) {
		got = append(got, d.Message.ID)
	}
	require.Equal(t, ids[1:], got)
}

// When the segment a checkpoint's position is in does not start with the
// store's secret (a log whose first records are not the meta event, as
// one a salvage repaired may be), Open cannot tell before it replays
// whether the checkpoint is this log's. A meta record after the position
// holding another secret than the checkpoint's says it is not: Open
// rebuilds from the log instead of going on from it.
func TestACheckpointWhoseSecretALaterMetaRecordContradictsIsRebuiltFrom(t *testing.T) {
	dir := t.TempDir()
	writeRawLogWithoutMeta(t, dir, rawDeclare(1, "jobs"),
		index.Event{Kind: index.KindPublish, Queue: 1, Seq: 1, Payload: []byte("one")})
	opts := broker.Options{SegmentBytes: testSegmentBytes}
	s, err := broker.Open(dir, opts) // draws a secret, and checkpoints after it
	require.NoError(t, err)
	require.NoError(t, s.Close())
	other := bytes.Repeat([]byte{7}, index.SecretSize)
	rewriteCheckpointSecret(t, filepath.Join(dir, "index", "checkpoint"), other)
	writeRawLogWithoutMeta(t, dir, index.Event{Kind: index.KindMeta, Secret: bytes.Repeat([]byte{8}, index.SecretSize)})

	s, err = broker.Open(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.Recovery().IndexRebuilt, "the checkpoint's secret is not the log's")
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	require.Len(t, receiveAll(t, q), 1)
}

// writeRawLogWithoutMeta appends recs to the log in dir as they are, in
// one append, with no meta event before them.
func writeRawLogWithoutMeta(t *testing.T, dir string, recs ...index.Event) {
	t.Helper()
	l, err := wal.Open(dir, wal.Options{SegmentBytes: testSegmentBytes})
	require.NoError(t, err)
	var raw [][]byte
	for i := range recs {
		raw = append(raw, recs[i].Append(nil))
	}
	_, err = l.Append(raw...)
	require.NoError(t, err)
	require.NoError(t, l.Close())
}
