package broker

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
)

// A table file whose messages are all gone, and that the file system will
// not let the checkpoint remove (an unlink refused with EPERM, as for a
// file made immutable), lost nothing: the checkpoint no longer names it.
// The failed unlink used to fail the checkpoint, which stopped every later
// checkpoint, and the removal of old segments with them, until the store
// was reopened. The checkpoint now counts; the file is removed again on
// the schedule a segment that cannot be removed follows (one WARN, a
// reminder at most every retryRemindEvery, one INFO when it goes), is
// counted in UnremovedBytes meanwhile, and is neither read by a later
// checkpoint nor by an open that finds it, from the checkpoint or
// rebuilding from the log, which removes it (an open that cannot fails,
// naming it).
func TestATableFileThatCannotBeRemovedLeavesTheCheckpointsGoing(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	tick := func(d time.Duration) { clock.Add(int64(d)) }
	logs := &logRecords{}
	ffs := vfs.NewFaultFS(vfs.Default)
	dir := t.TempDir()
	opts := Options{
		Now:    func() time.Time { return time.Unix(0, clock.Load()) },
		Sync:   SyncNone,
		FS:     ffs,
		Logger: slog.New(logs),
	}
	ManualMaintenance(&opts)
	s, err := Open(dir, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	q := mustQueue(t, s, "jobs", PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 3, RetryDelay: time.Second})
	batch := make([][]byte, 300)
	for i := range batch {
		batch[i] = []byte("m")
	}
	for range index.ChunkEntries/len(batch) + 2 { // into the second table file
		_, err := q.PublishBatch(t.Context(), batch)
		require.NoError(t, err)
	}
	require.NoError(t, s.checkpoint())
	for acked := 0; acked < index.ChunkEntries+100; {
		ds, err := q.Receive(t.Context(), 1000)
		require.NoError(t, err)
		for _, d := range ds {
			require.NoError(t, q.Ack(t.Context(), d.Lease.Receipt))
		}
		acked += len(ds)
	}
	first := filepath.Join(dir, "index", "tbl-000000000000.idx")
	unremovable := vfs.Rule{Op: vfs.OpRemove, Match: func(n string) bool { return n == first }, Err: syscall.EPERM}
	ffs.Inject(unremovable)

	checkpoints := s.Stats().Checkpoints
	require.NoError(t, s.checkpoint(), "a table file left on disk fails no checkpoint")
	st := s.Stats()
	require.Equal(t, checkpoints+1, st.Checkpoints)
	require.Empty(t, st.MaintenanceStopped, "the checkpoints go on")
	require.Contains(t, st.ReclaimFailing, syscall.EPERM.Error())
	require.Contains(t, st.ReclaimFailing, "tbl-000000000000.idx")
	require.Equal(t, int64(index.ChunkEntries*index.EntrySize), st.UnremovedBytes, "the table file left on disk")
	require.FileExists(t, first)
	require.Len(t, logs.at(slog.LevelWarn, ""), 1, "the first failure is logged")

	// A later checkpoint, with more published and consumed since, is
	// written and counts.
	_, err = q.PublishBatch(t.Context(), batch)
	require.NoError(t, err)
	ds, err := q.Receive(t.Context(), 10)
	require.NoError(t, err)
	require.NoError(t, q.Ack(t.Context(), ds[0].Lease.Receipt))
	require.NoError(t, s.checkpoint())
	require.Equal(t, checkpoints+2, s.Stats().Checkpoints)
	require.Empty(t, s.Stats().MaintenanceStopped)

	// A Backup meanwhile copies the file (index.CopyCheckpoint copies
	// every table file there is); the copy's first Open removes it, and
	// holds the state the store held.
	backup := filepath.Join(t.TempDir(), "backup")
	require.NoError(t, s.Backup(t.Context(), backup))
	require.FileExists(t, filepath.Join(backup, "index", "tbl-000000000000.idx"), "the copy holds the leftover")
	c, err := Open(backup, Options{Now: opts.Now, Sync: SyncNone, Logger: slog.New(&logRecords{})})
	require.NoError(t, err)
	mustQueue(t, c, "jobs", PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 3, RetryDelay: time.Second})
	require.Empty(t, stateDiff(Dump(s), Dump(c)), "the copy's state")
	require.NoFileExists(t, filepath.Join(backup, "index", "tbl-000000000000.idx"), "the copy's Open removes the leftover")
	require.NoError(t, c.Close())

	// Rounds a second apart try the removal again on the schedule, not
	// at each round, and log nothing more.
	removes := ffs.Count(vfs.OpRemove)
	for range 100 {
		tick(time.Second)
		s.maintenanceRound()
	}
	attempts := ffs.Count(vfs.OpRemove) - removes
	require.Positive(t, attempts, "the removal is tried again")
	require.LessOrEqual(t, attempts, int64(8), "removal attempts in 100 rounds of a second")
	require.Len(t, logs.at(slog.LevelWarn, ""), 1, "a failure that goes on is not logged again within 100 seconds")
	require.NoError(t, s.Err())
	want := Dump(s)

	// An open that finds the file (a crash now, say) neither reads it as
	// live state nor keeps it: from the checkpoint, and rebuilding from
	// the log.
	for _, rebuild := range []bool{false, true} {
		clone := filepath.Join(t.TempDir(), "clone")
		require.NoError(t, os.CopyFS(clone, os.DirFS(dir)))
		require.FileExists(t, filepath.Join(clone, "index", "tbl-000000000000.idx"))
		if rebuild {
			require.NoError(t, os.Remove(filepath.Join(clone, "index", "checkpoint")))
		}
		c, err := Open(clone, Options{Now: opts.Now, Sync: SyncNone, manualMaintenance: true})
		require.NoError(t, err)
		require.Equal(t, rebuild, c.Recovery().IndexRebuilt)
		require.Equal(t, want, Dump(c))
		require.NoError(t, VerifyIndex(c))
		require.NoFileExists(t, filepath.Join(clone, "index", "tbl-000000000000.idx"))
		require.Zero(t, c.Stats().UnremovedBytes)
		require.NoError(t, c.Close())
	}

	// An open that cannot remove it either fails, naming it, and removes
	// nothing, as for any file of the store it cannot read or remove: a
	// later open, once the file goes, opens as above.
	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, os.CopyFS(clone, os.DirFS(dir)))
	refusing := vfs.NewFaultFS(vfs.Default)
	refusing.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: "tbl-000000000000.idx", Err: syscall.EPERM})
	_, err = Open(clone, Options{Now: opts.Now, Sync: SyncNone, FS: refusing, manualMaintenance: true})
	require.ErrorIs(t, err, syscall.EPERM)
	require.Contains(t, err.Error(), "tbl-000000000000.idx")
	require.FileExists(t, filepath.Join(clone, "index", "checkpoint"), "the failed open removed nothing")

	// The file system lets the file go: the next retry due removes it,
	// and says so once.
	ffs.Clear()
	tick(time.Minute)
	s.maintenanceRound()
	require.NoFileExists(t, first)
	st = s.Stats()
	require.Empty(t, st.ReclaimFailing)
	require.Zero(t, st.UnremovedBytes)
	require.Len(t, logs.at(slog.LevelInfo, "again"), 1, "one INFO says the removal works again")
	require.Len(t, logs.at(slog.LevelWarn, ""), 1)
	for _, r := range logs.at(slog.LevelWarn, "") {
		require.False(t, strings.Contains(r.Message, "stopped"), "the checkpoints did not stop: %s", r.Message)
	}
	require.Equal(t, want, Dump(s))
}
