package broker_test

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// keyedJobs is a queue of 1 KiB messages that remembers dedup keys for an
// hour.
var keyedJobs = policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024; p.DedupWindow = time.Hour })

// fillForBackup gives e's store messages in every state over several
// segments, the oldest of them reclaimed: ready, leased (it returns their
// receipts), delayed after a nack, dead letters, dedup keys of messages
// acknowledged.
func fillForBackup(t *testing.T, e *env) []broker.ReceiptValue {
	jobs, dlq := e.queue("jobs", keyedJobs), e.queue("dlq", dlqPolicy)
	for i := range 40 {
		_, err := jobs.PublishKeyed(ctx(t), fmt.Sprintf("key-%02d", i), []byte(fmt.Sprintf("keyed-%02d-%s", i, strings.Repeat("k", 300))))
		require.NoError(t, err)
	}
	for _, d := range mustReceive(t, jobs, 40) {
		require.NoError(t, jobs.Ack(ctx(t), d.Lease.Receipt))
	}
	for i := range 120 {
		mustPublish(t, jobs, fmt.Sprintf("job-%03d-%s", i, strings.Repeat("j", 300)))
	}
	require.NoError(t, e.s.Maintain())
	var held []broker.ReceiptValue
	for i, d := range mustReceive(t, jobs, 30) {
		switch i % 3 {
		case 0:
			held = append(held, d.Lease.Receipt)
		case 1:
			_, err := jobs.Nack(ctx(t), d.Lease.Receipt, errors.New("later"))
			require.NoError(t, err)
		default:
			require.NoError(t, jobs.Ack(ctx(t), d.Lease.Receipt))
		}
	}
	for i := range 5 {
		mustPublish(t, dlq, fmt.Sprintf("dead-%d", i))
	}
	for _, d := range mustReceive(t, dlq, 5) {
		_, err := dlq.Nack(ctx(t), d.Lease.Receipt, errors.New("no"))
		require.NoError(t, err)
	}
	return held
}

// A backup taken while the store is open opens to the store's state as it
// was: every message, lease, delivery count, dead letter and dedup key, from
// its own checkpoint and, the same, from its log alone. A receipt issued by
// the store is honoured by the copy. What the store does afterwards does not
// reach the copy.
func TestABackupOpensToTheStateItCopied(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	held := fillForBackup(t, e)
	st := e.s.Stats()
	require.Greater(t, st.BytesReclaimed, int64(0), "the oldest segments are gone: the copy starts past segment 1")
	want := broker.Dump(e.s)

	dst := filepath.Join(t.TempDir(), "backup")
	require.NoError(t, e.s.Backup(ctx(t), dst))
	_, err := os.Stat(dst + ".partial")
	require.ErrorIs(t, err, os.ErrNotExist, "the partial directory is renamed into place")
	require.Equal(t, want, broker.Dump(e.s), "a backup changes nothing in the store")

	// The store goes on; the copy does not follow it.
	jobs := e.queue("jobs", keyedJobs)
	for _, r := range held {
		require.NoError(t, jobs.Ack(ctx(t), r))
	}
	mustPublish(t, jobs, "after the backup")

	opts := e.opts
	rebuilt := dst + "-rebuilt"
	copyTree(t, dst, rebuilt)
	require.NoError(t, os.RemoveAll(filepath.Join(rebuilt, "index")))
	for _, dir := range []string{dst, rebuilt} {
		b, err := broker.Open(dir, opts)
		require.NoError(t, err)
		requireSameState(t, want, broker.Dump(b), dir)
		require.Equal(t, dir == rebuilt, b.Recovery().IndexRebuilt)
		bj, err := b.Queue("jobs", keyedJobs)
		require.NoError(t, err)
		require.NoError(t, bj.Ack(ctx(t), held[0]), "the copy honours a receipt the store issued")
		dup, err := bj.PublishKeyed(ctx(t), "key-07", []byte("again"))
		require.NoError(t, err)
		require.Zero(t, bj.Stats().Published, "key-07 is remembered: %s", dup.ID)
		require.NoError(t, b.Close())
	}
}

// Backup refuses a directory that exists, one inside the store, and an
// empty path, writing nothing; it removes an unfinished backup of its own
// (marked) at the same place, and refuses to touch an unmarked one.
func TestBackupRefusesADirectoryItMustNotWrite(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	mustPublish(t, e.queue("jobs", keyedJobs), "one")
	root := t.TempDir()

	err := e.s.Backup(ctx(t), "")
	require.ErrorContains(t, err, "the directory path is empty")

	exists := filepath.Join(root, "exists")
	require.NoError(t, os.Mkdir(exists, 0o700))
	err = e.s.Backup(ctx(t), exists)
	require.ErrorContains(t, err, "already exists")
	require.ErrorIs(t, err, iofs.ErrExist, "a caller can tell it with errors.Is")
	requireEmptyDir(t, exists)

	inside := filepath.Join(e.dir, "backups", "b1")
	err = e.s.Backup(ctx(t), inside)
	require.ErrorContains(t, err, "inside the store's own directory")
	_, err = os.Stat(filepath.Join(e.dir, "backups"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, e.s.Backup(ctx(t), e.dir), "inside the store's own directory")

	foreign := filepath.Join(root, "foreign")
	require.NoError(t, os.Mkdir(foreign+".partial", 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(foreign+".partial", "notes.txt"), []byte("mine"), 0o600))
	err = e.s.Backup(ctx(t), foreign)
	require.ErrorContains(t, err, "is not a backup in progress")
	data, err := os.ReadFile(filepath.Join(foreign+".partial", "notes.txt"))
	require.NoError(t, err)
	require.Equal(t, "mine", string(data), "a directory Backup did not make is left alone")
	_, err = os.Stat(foreign)
	require.ErrorIs(t, err, os.ErrNotExist)

	// A Backup that a crash cut short left its marked directory.
	left := filepath.Join(root, "again")
	require.NoError(t, os.MkdirAll(filepath.Join(left+".partial", "index"), 0o700))
	for _, f := range []string{"backup-in-progress.tmp", "0000000001.seg", "index/checkpoint"} {
		require.NoError(t, os.WriteFile(filepath.Join(left+".partial", f), []byte("stale"), 0o600))
	}
	require.NoError(t, e.s.Backup(ctx(t), left))
	_, err = os.Stat(left + ".partial")
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(filepath.Join(left, "backup-in-progress.tmp"))
	require.ErrorIs(t, err, os.ErrNotExist, "a complete copy has no mark")
	// A crash between the rename and the mark's removal leaves the mark in
	// a complete copy: its first Open removes it.
	require.NoError(t, os.WriteFile(filepath.Join(left, "backup-in-progress.tmp"), nil, 0o600))
	b, err := broker.Open(left, e.opts)
	require.NoError(t, err)
	require.Equal(t, 1, mustStats(t, b, "jobs").Ready)
	require.NoError(t, b.Close())
	_, err = os.Stat(filepath.Join(left, "backup-in-progress.tmp"))
	require.ErrorIs(t, err, os.ErrNotExist, "Open removed the mark")

	s := e.s
	e.close()
	requireErrorIs(t, s.Backup(ctx(t), filepath.Join(root, "closed")), broker.Closed)
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, names, "%s was written", dir)
}

// faultyBackupEnv opens a store over a FaultFS, with small segments and 100
// messages in queue "jobs" over several of them.
func faultyBackupEnv(t *testing.T) (*env, *vfs.FaultFS, *broker.Queue) {
	ffs := vfs.NewFaultFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS, o.SegmentBytes = ffs, broker.MinSegmentBytes })
	jobs := e.queue("jobs", keyedJobs)
	for i := range 100 {
		mustPublish(t, jobs, fmt.Sprintf("m-%03d-%s", i, strings.Repeat("x", 300)))
	}
	return e, ffs, jobs
}

// A Backup that fails — a write refused, or its context canceled — leaves
// no copy and no partial directory, and the store goes on: the next Backup
// succeeds.
func TestAFailedBackupLeavesNothing(t *testing.T) {
	e, ffs, jobs := faultyBackupEnv(t)
	root := t.TempDir()
	for op, nth := range map[vfs.Op]int64{vfs.OpWrite: 3, vfs.OpSync: 2, vfs.OpRename: 1} {
		ffs.Inject(vfs.Rule{Op: op, NameContains: ".partial", Nth: nth})
		dst := filepath.Join(root, "fail-"+op.String())
		err := e.s.Backup(ctx(t), dst)
		require.ErrorIs(t, err, syscall.EIO, "a backup whose %v failed", op)
		require.Equal(t, int64(1), ffs.Injected(op))
		ffs.Clear()
		for _, d := range []string{dst, dst + ".partial"} {
			_, err := os.Stat(d)
			require.ErrorIs(t, err, os.ErrNotExist, "after a failed %v", op)
		}
	}
	canceled, cancel := context.WithCancel(ctx(t))
	cancel()
	dst := filepath.Join(root, "canceled")
	require.ErrorIs(t, e.s.Backup(canceled, dst), context.Canceled)
	_, err := os.Stat(dst)
	require.ErrorIs(t, err, os.ErrNotExist)

	mustPublish(t, jobs, "the store goes on")
	dst = filepath.Join(root, "ok")
	require.NoError(t, e.s.Backup(ctx(t), dst))
	b, err := broker.Open(dst, broker.Options{Now: e.clock.Now, SegmentBytes: broker.MinSegmentBytes})
	require.NoError(t, err)
	require.Equal(t, 101, mustStats(t, b, "jobs").Ready)
	require.NoError(t, b.Close())
}

// A failed Backup that cannot finish removing its partial copy leaves it
// marked: the mark is removed last, so the next Backup to the same place
// still knows the directory for its own, removes it and writes the copy.
func TestAnUnfinishedRemovalLeavesTheMarkForTheNextBackup(t *testing.T) {
	e, ffs, _ := faultyBackupEnv(t)
	dst := filepath.Join(t.TempDir(), "backup")
	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, NameContains: ".partial", Nth: 3})
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, Nth: 1, Match: func(name string) bool {
		return name == filepath.Join(dst+".partial", "index")
	}})
	err := e.s.Backup(ctx(t), dst)
	require.ErrorIs(t, err, syscall.EIO)
	require.Equal(t, int64(1), ffs.Injected(vfs.OpRemove), "the removal of the partial copy failed part way")
	ffs.Clear()
	require.FileExists(t, filepath.Join(dst+".partial", "backup-in-progress.tmp"))

	require.NoError(t, e.s.Backup(ctx(t), dst))
	require.NoDirExists(t, dst+".partial")
	b, err := broker.Open(dst, broker.Options{Now: e.clock.Now, SegmentBytes: broker.MinSegmentBytes})
	require.NoError(t, err)
	require.Equal(t, 100, mustStats(t, b, "jobs").Ready)
	require.NoError(t, b.Close())
}

// A Backup refused before it starts — its context canceled already, or
// the store closed — does nothing: no checkpoint, and not even the parents
// of its directory, which it makes only for a copy it goes on to write.
func TestABackupRefusedAtTheStartWritesNothing(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	mustPublish(t, e.queue("jobs", keyedJobs), "one")
	root := t.TempDir()
	parent := filepath.Join(root, "nightly")

	canceled, cancel := context.WithCancel(ctx(t))
	cancel()
	before := e.s.Stats().Checkpoints
	require.ErrorIs(t, e.s.Backup(canceled, filepath.Join(parent, "canceled")), context.Canceled)
	require.Equal(t, before, e.s.Stats().Checkpoints, "a canceled Backup took a checkpoint")
	require.NoDirExists(t, parent)

	s := e.s
	e.close()
	requireErrorIs(t, s.Backup(ctx(t), filepath.Join(parent, "closed")), broker.Closed)
	require.NoDirExists(t, parent)
	requireEmptyDir(t, root)
}

// Every file of a backup is fdatasynced, and the directory holding it
// synced, before the copy takes its name; and the name is synced after.
func TestABackupIsDurableBeforeItTakesItsName(t *testing.T) {
	e, ffs, _ := faultyBackupEnv(t)
	dst := filepath.Join(t.TempDir(), "backup")
	var mu sync.Mutex
	var events []vfs.Event
	ffs.Observe(func(ev vfs.Event) {
		if strings.Contains(ev.Name, dst) || strings.Contains(ev.NewName, dst) || ev.Op == vfs.OpSyncDir && ev.Name == filepath.Dir(dst) {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}
	})
	require.NoError(t, e.s.Backup(ctx(t), dst))
	mu.Lock()
	defer mu.Unlock()
	written := map[string]bool{} // written and not yet synced
	dirsSynced := map[string]int{}
	renamed := -1
	for i, ev := range events {
		switch ev.Op {
		case vfs.OpWrite:
			require.Negative(t, renamed, "%s written after the rename", ev.Name)
			written[ev.Name] = true
		case vfs.OpSync:
			delete(written, ev.Name)
		case vfs.OpSyncDir:
			dirsSynced[ev.Name] = i
		case vfs.OpRename:
			require.Empty(t, written, "files not fdatasynced before the rename")
			require.Contains(t, dirsSynced, dst+".partial")
			require.Contains(t, dirsSynced, filepath.Join(dst+".partial", "index"))
			renamed = i
		}
	}
	require.Positive(t, renamed)
	require.Greater(t, dirsSynced[filepath.Dir(dst)], renamed, "the parent is synced after the rename")
}

// Backups taken while producers publish, a consumer acknowledges and the
// store checkpoints and removes old segments in the background each hold
// every message published before the backup began and acknowledged, if at
// all, only after it ended — and none acknowledged before it began.
func TestBackupsWhileTheStoreRuns(t *testing.T) {
	dir := t.TempDir()
	s, err := broker.Open(dir, broker.Options{SegmentBytes: broker.MinSegmentBytes})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", keyedJobs)
	require.NoError(t, err)

	type life struct{ published, ackStarted, acked atomic.Int64 } // UnixNano, 0 for not yet
	var mu sync.Mutex
	lives := map[string]*life{}
	get := func(id string) *life {
		mu.Lock()
		defer mu.Unlock()
		if lives[id] == nil {
			lives[id] = &life{}
		}
		return lives[id]
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m, err := q.Publish(context.Background(), []byte(fmt.Sprintf("p%d-%d-%s", p, i, strings.Repeat("x", 200))))
				if err != nil {
					t.Error(err)
					return
				}
				get(m.ID).published.Store(time.Now().UnixNano())
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ds, err := q.Receive(context.Background(), 16)
			if err != nil {
				t.Error(err)
				return
			}
			for i, d := range ds {
				if i%8 == 7 {
					// Left leased: it comes back. One in eight, so that
					// segments are worth copying forward (a copy writes
					// the lease's event beside the publish) and removed
					// while the backups run.
					continue
				}
				l := get(d.Message.ID)
				l.ackStarted.Store(time.Now().UnixNano())
				if err := q.Ack(context.Background(), d.Lease.Receipt); err != nil {
					t.Error(err)
					return
				}
				l.acked.Store(time.Now().UnixNano())
			}
		}
	})
	root := t.TempDir()
	for n := range 4 {
		time.Sleep(150 * time.Millisecond)
		dst := filepath.Join(root, fmt.Sprintf("b%d", n))
		began := time.Now().UnixNano()
		require.NoError(t, s.Backup(context.Background(), dst))
		ended := time.Now().UnixNano()

		b, err := broker.Open(dst, broker.Options{SegmentBytes: broker.MinSegmentBytes, Now: func() time.Time { return time.Unix(0, ended).Add(time.Hour) }})
		require.NoError(t, err)
		bq, err := b.Queue("jobs", keyedJobs)
		require.NoError(t, err)
		in := map[string]bool{}
		for {
			ds, err := bq.Receive(ctx(t), 256)
			require.NoError(t, err)
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				in[d.Message.ID] = true
			}
		}
		require.NoError(t, b.Close())
		mu.Lock()
		must, mustNot := 0, 0
		for id, l := range lives {
			pub, started, acked := l.published.Load(), l.ackStarted.Load(), l.acked.Load()
			switch {
			case pub != 0 && pub < began && (started == 0 || started > ended):
				must++
				require.True(t, in[id], "backup %d lost %s, published before it began and not acknowledged until after it", n, id)
			case acked != 0 && acked < began:
				mustNot++
				require.False(t, in[id], "backup %d holds %s, acknowledged before it began", n, id)
			}
		}
		for id := range in {
			require.NotNil(t, lives[id], "backup %d holds %s, which nobody published", n, id)
		}
		mu.Unlock()
		t.Logf("backup %d: %d messages, %d required, %d required gone", n, len(in), must, mustNot)
	}
	close(stop)
	wg.Wait()
	require.Positive(t, s.Stats().BytesReclaimed, "segments were removed while the backups ran")
}

// While a Backup copies segments, a maintenance round checkpoints and
// leaves the old segments, which the first round after the Backup
// removes, and meanwhile every other call goes on: a Receive reads its
// payloads, a Publish returns. (Had the round waited for the copy inside
// segment removal, every payload read would have queued behind it until
// the copy ended.)
func TestCallsGoOnWhileABackupCopies(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS, o.SegmentBytes = ffs, broker.MinSegmentBytes })
	jobs := e.queue("jobs", keyedJobs)
	for i := range 200 {
		mustPublish(t, jobs, fmt.Sprintf("m-%03d-%s", i, strings.Repeat("x", 300)))
		if i%10 != 0 {
			require.NoError(t, jobs.Ack(ctx(t), mustReceiveOne(t, jobs).Lease.Receipt))
		}
	}
	segs := e.s.Stats().Segments
	paused, resume := make(chan struct{}), make(chan struct{})
	checkpointed := make(chan struct{}) // by the round, during the copy
	var pause, round sync.Once
	var copying atomic.Bool
	ffs.Observe(func(ev vfs.Event) {
		switch {
		case ev.Op == vfs.OpWrite && strings.Contains(ev.Name, ".partial") && strings.HasSuffix(ev.Name, ".seg"):
			pause.Do(func() {
				copying.Store(true)
				close(paused)
				<-resume
			})
		case ev.Op == vfs.OpRename && strings.HasSuffix(ev.NewName, "checkpoint") && copying.Load():
			round.Do(func() { close(checkpointed) })
		}
	})
	dst := filepath.Join(t.TempDir(), "backup")
	backupDone := make(chan error, 1)
	go func() { backupDone <- e.s.Backup(context.Background(), dst) }()
	<-paused
	maintDone := make(chan error, 1)
	go func() { maintDone <- e.s.Maintain() }()
	// Give the round time to reach the removal of old segments (it does
	// not with the copy going on: this only makes a wrong order likely to
	// show).
	select {
	case <-checkpointed:
	case <-time.After(20 * time.Second):
		close(resume)
		t.Fatal("a maintenance round did not checkpoint while a backup was copying")
	}
	time.Sleep(100 * time.Millisecond)

	calls := make(chan error, 1)
	go func() {
		ds, err := jobs.Receive(context.Background(), 5)
		if err == nil && len(ds) != 5 {
			err = fmt.Errorf("received %d messages, want 5", len(ds))
		}
		if err == nil {
			_, err = jobs.Publish(context.Background(), []byte("during the backup"))
		}
		calls <- err
	}()
	select {
	case err := <-calls:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		close(resume)
		t.Fatal("a Receive and a Publish did not complete while a backup was copying")
	}
	select {
	case err := <-maintDone:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		close(resume)
		t.Fatal("a maintenance round waited for a backup's copy")
	}
	during := e.s.Stats().Segments
	close(resume)
	require.NoError(t, <-backupDone)
	require.GreaterOrEqual(t, during, segs, "a round removed segments while a backup copied them")
	require.NoError(t, e.s.Maintain())
	require.Less(t, e.s.Stats().Segments, segs, "the first round after the backup removed old segments")
}

// A Backup stands on a checkpoint of its own: one whose checkpoint fails
// writes nothing, and once checkpoints have stopped (they stop at a
// failure until the store is reopened) Backup says so.
func TestABackupWithoutACheckpointWritesNothing(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS = ffs })
	mustPublish(t, e.queue("jobs", keyedJobs), "one")
	root := t.TempDir()
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: "checkpoint.tmp", Nth: 1})
	require.ErrorIs(t, e.s.Backup(ctx(t), filepath.Join(root, "a")), syscall.EIO)
	ffs.Clear()
	err := e.s.Backup(ctx(t), filepath.Join(root, "b"))
	require.ErrorIs(t, err, syscall.EIO, "the failure that stopped the checkpoints")
	require.ErrorContains(t, err, "stopped until the store is reopened")
	requireEmptyDir(t, root)
	require.Contains(t, e.s.Stats().MaintenanceStopped, syscall.EIO.Error())

	e.reopen()
	require.Empty(t, e.s.Stats().MaintenanceStopped, "a reopen resumes them")
	require.NoError(t, e.s.Backup(ctx(t), filepath.Join(root, "c")))
}

// Damage to a segment that a checkpoint covers is not looked for at Open;
// a Backup reads every record it copies, so it is where such damage shows:
// the Backup fails with Corrupt naming the file, leaves nothing, and the
// store stops as a Receive that met the damage would stop it. The next
// Open scans the whole log and refuses it, naming the file, until
// Options.Salvage is given.
func TestABackupOfADamagedSegmentFailsWithCorruptAndStopsTheStore(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = 64 << 10 })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 4 << 10 }))
	for range 40 { // 160 KiB: segment 1 is sealed
		mustPublish(t, q, strings.Repeat("x", 4<<10))
	}
	require.NoError(t, e.s.Maintain()) // a checkpoint covers segment 1
	require.Greater(t, e.s.Stats().Segments, 2)
	seg := filepath.Join(e.dir, "0000000001.seg")
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("damage"), 30000) // inside a payload
	require.NoError(t, err)
	require.NoError(t, f.Close())

	root := t.TempDir()
	err = e.s.Backup(ctx(t), filepath.Join(root, "copy"))
	requireErrorIs(t, err, broker.Corrupt, "0000000001.seg")
	requireEmptyDir(t, root)
	_, err = q.Publish(ctx(t), []byte("after")) // the store stopped
	requireErrorIs(t, err, broker.Corrupt, "reopen it")

	s := e.s
	require.NoError(t, s.Close())
	e.s = nil
	_, err = broker.Open(e.dir, e.opts) // it scans the whole log
	requireErrorIs(t, err, broker.Corrupt, "0000000001.seg", "Options.Salvage may open the store past damaged records")

	// Salvage opens it, past the damage and past a segment gone as well,
	// and reports both.
	require.NoError(t, os.Remove(filepath.Join(e.dir, "0000000002.seg")))
	opts := e.opts
	opts.Salvage = true
	s, err = broker.Open(e.dir, opts)
	require.NoError(t, err)
	defer s.Close()
	require.GreaterOrEqual(t, s.Recovery().SalvagedSpans, 2, "the damaged span of segment 1 and the missing segment 2: %s", s.Recovery())
}

// A Backup that waits for the checkpoint lock while Close checkpoints
// never writes the store's index once Close has returned (and let the
// directory go: another process may own it by then). Close's checkpoint is
// held up until the Backup waits for the lock, long enough for the lock to
// be handed to the waiter; the Backup's own checkpoint, if it got one, is
// held up until Close has returned. Before Close set closed under the lock,
// the window was the few instructions between its unlock and setting
// closed: a loaded machine hit it in about one attempt in five, an idle
// one rarely, so this test guards the fix without proving it every run.
func TestABackupNeverWritesTheStoreAfterCloseReturned(t *testing.T) {
	late := 0
	for range 10 {
		late += backupAgainstClose(t)
	}
	require.Zero(t, late, "operations on the store's index after Close returned")
}

// backupAgainstClose runs one such race and counts the file operations in
// the store's index directory after Close returned.
func backupAgainstClose(t *testing.T) int {
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	opts := broker.Options{Now: newFakeClock().Now, SegmentBytes: testSegmentBytes, FS: ffs}
	broker.ManualMaintenance(&opts)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	mustPublish(t, q, "a")

	idx := filepath.Join(dir, "index")
	var closing, closeReturned atomic.Bool
	var late, marks atomic.Int32
	inCloseCheckpoint := make(chan struct{})
	ffs.Observe(func(ev vfs.Event) {
		if filepath.Dir(ev.Name) == idx && closeReturned.Load() {
			late.Add(1)
		}
		if closing.Load() && ev.Op == vfs.OpOpen && ev.Name == filepath.Join(idx, "CHECKPOINTING") {
			switch marks.Add(1) {
			case 1: // Close's checkpoint, holding the lock
				close(inCloseCheckpoint)
				time.Sleep(30 * time.Millisecond)
			case 2: // the Backup's, if it got the lock first
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	closing.Store(true)
	closed := make(chan error, 1)
	go func() {
		err := s.Close()
		closeReturned.Store(true)
		closed <- err
	}()
	<-inCloseCheckpoint
	backedUp := make(chan error, 1)
	go func() { backedUp <- s.Backup(context.Background(), filepath.Join(t.TempDir(), "copy")) }()
	require.NoError(t, <-closed)
	<-backedUp
	return int(late.Load())
}

// A Backup racing Close either completes, leaving a copy that opens, or
// fails, leaving nothing; neither call hangs.
func TestABackupRacingCloseCompletesOrLeavesNothing(t *testing.T) {
	root := t.TempDir()
	completed, refused := 0, 0
	defer func() { t.Logf("%d backups completed, %d refused as closed", completed, refused) }()
	for i := range 20 {
		dir := filepath.Join(root, fmt.Sprintf("store-%d", i))
		s, err := broker.Open(dir, broker.Options{SegmentBytes: broker.MinSegmentBytes})
		require.NoError(t, err)
		q, err := s.Queue("jobs", keyedJobs)
		require.NoError(t, err)
		for j := range 60 {
			_, err := q.Publish(ctx(t), []byte(fmt.Sprintf("m-%d-%s", j, strings.Repeat("x", 300))))
			require.NoError(t, err)
		}
		dst := filepath.Join(root, fmt.Sprintf("backup-%d", i))
		done := make(chan error, 1)
		go func() { done <- s.Backup(context.Background(), dst) }()
		if i%2 == 1 {
			time.Sleep(time.Duration(i) * 100 * time.Microsecond)
		}
		require.NoError(t, s.Close())
		if err := <-done; err != nil {
			requireErrorIs(t, err, broker.Closed)
			refused++
			for _, d := range []string{dst, dst + ".partial"} {
				_, err := os.Stat(d)
				require.ErrorIs(t, err, os.ErrNotExist, "a failed backup left %s", d)
			}
			continue
		}
		b, err := broker.Open(dst, broker.Options{SegmentBytes: broker.MinSegmentBytes})
		require.NoError(t, err)
		require.Equal(t, 60, mustStats(t, b, "jobs").Ready)
		require.NoError(t, b.Close())
		completed++
	}
}

// Backups run one at a time: two to the same directory give one copy and
// one refusal (neither removes the other's work), two to different
// directories give two copies.
func TestConcurrentBackups(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	jobs := e.queue("jobs", keyedJobs)
	for i := range 100 {
		mustPublish(t, jobs, fmt.Sprintf("m-%03d-%s", i, strings.Repeat("x", 300)))
	}
	root := t.TempDir()
	for round, dirs := range [][2]string{{"same", "same"}, {"one", "two"}} {
		var errs [2]error
		var wg sync.WaitGroup
		for i, d := range dirs {
			wg.Go(func() { errs[i] = e.s.Backup(context.Background(), filepath.Join(root, d)) })
		}
		wg.Wait()
		if round == 0 {
			require.True(t, (errs[0] == nil) != (errs[1] == nil), "one backup to a directory succeeds, the other is refused: %v", errs)
			require.ErrorContains(t, errors.Join(errs[:]...), "already exists")
		} else {
			require.NoError(t, errors.Join(errs[:]...))
		}
		for _, d := range dirs {
			b, err := broker.Open(filepath.Join(root, d), e.opts)
			require.NoError(t, err)
			require.Equal(t, 100, mustStats(t, b, "jobs").Ready)
			require.NoError(t, b.Close())
		}
	}
}

// A crash at any file operation of a Backup leaves the store as it was (it
// opens to the same state) and either a whole copy under the Backup's
// name or none (a partial copy that the next Backup to the same directory
// removes); once Backup has returned nil, the copy is there.
func TestACrashDuringABackupHarmsNothing(t *testing.T) {
	root := fastDir(t)
	clock := newFakeClock()
	template := filepath.Join(root, "template")
	opts := func(fs vfs.FS) broker.Options {
		o := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, FS: fs}
		broker.ManualMaintenance(&o)
		return o
	}
	e := &env{t: t, dir: template, clock: clock, opts: opts(nil)}
	e.open()
	fillForBackup(t, e)
	want := broker.Dump(e.s)
	e.close()

	// A Backup over a copy of the template, crashed after k operations
	// (none if k < 0). It reports the Backup's error and how many
	// operations the Backup made before its rename and in all. (The
	// store's preparer works beside the Backup, so the counts vary a
	// little from run to run.)
	run := func(k int64) (cfs *vfs.CrashFS, dir string, beforeRename, total int64, err error) {
		dir = filepath.Join(root, fmt.Sprintf("run-%d", k), "store")
		dst := filepath.Join(filepath.Dir(dir), "backup")
		copyTree(t, template, dir)
		cfs = vfs.NewCrashFS(vfs.Default)
		ffs := vfs.NewFaultFS(cfs)
		var at atomic.Int64
		at.Store(-1)
		ffs.Observe(func(ev vfs.Event) {
			if ev.Op == vfs.OpRename && ev.NewName == dst {
				at.Store(cfs.Ops() - 1)
			}
		})
		s, err := broker.Open(dir, opts(ffs))
		require.NoError(t, err)
		opened := cfs.Ops()
		if k >= 0 {
			cfs.CrashAfter(opened + k)
		}
		err = s.Backup(ctx(t), dst)
		total = cfs.Ops() - opened
		_ = s.Close()
		return cfs, dir, at.Load() - opened, total, err
	}
	_, dir, beforeRename, total, err := run(-1)
	require.NoError(t, err)
	requireBackupHolds(t, filepath.Join(filepath.Dir(dir), "backup"), opts(nil), want, "the backup")
	t.Logf("a backup: %d file operations, the rename the %dth", total, beforeRename+1)

	// A crash at every operation of the Backup, and one just after it
	// returned. Each is cloned as the synced state alone, and four times
	// (once with -short) with half the rest kept, the last write torn;
	// every other one also with unsynced names and sizes kept apart from
	// the data (metadataStates).
	// The preparer's operations, counted with the Backup's, may push the
	// Backup's last ones past total in some runs: the crashes go on until
	// one comes after the Backup returned.
	clones := 5
	if testing.Short() {
		clones = 2
	}
	outcomes := make(map[string]int)
	backupErr := errors.New("not run")
	for k := int64(0); k <= total || backupErr != nil; k++ {
		require.Less(t, k, 2*total, "no Backup returned within twice the operations of the first")
		var cfs *vfs.CrashFS
		cfs, dir, _, _, backupErr = run(k)
		n := clones
		if k%2 == 1 {
			n++ // a clone with unsynced names and sizes kept apart from the data
		}
		for c := range n {
			clone := filepath.Join(root, fmt.Sprintf("clone-%d-%d", k, c))
			keep := 0.5
			if c == 0 {
				keep = 0
			}
			co := vfs.CrashOptions{Root: filepath.Dir(dir), KeepUnsyncedFraction: keep, TearLastWrite: keep > 0,
				Rand: rand.New(rand.NewPCG(uint64(k), uint64(c)))}
			what := fmt.Sprintf("crash after operation %d of %d of a backup, clone %d", k, total, c)
			if c == clones {
				var state string
				co, state = metadataCrashOptions(k/2, filepath.Dir(dir), uint64(k))
				what += " (" + state + ")"
			}
			require.NoError(t, cfs.CrashClone(clone, co))
			s, err := broker.Open(filepath.Join(clone, "store"), opts(nil))
			require.NoError(t, err, what)
			requireSameState(t, want, broker.Dump(s), what)

			backup := filepath.Join(clone, "backup")
			if _, err := os.Stat(backup); err == nil {
				outcomes["the backup, whole"]++
				requireBackupHolds(t, backup, opts(nil), want, what+": the copy that took its name")
				_, err = os.Stat(filepath.Join(backup, "backup-in-progress.tmp"))
				require.ErrorIs(t, err, os.ErrNotExist, "%s: its first Open removed the mark", what)
			} else {
				require.False(t, backupErr == nil && c == 0, "%s: a Backup that returned nil is durable", what)
				outcomes["no backup"]++
				require.NoError(t, s.Backup(ctx(t), backup), "%s: the next backup", what)
			}
			require.NoError(t, s.Close())
			_, err = os.Stat(filepath.Join(clone, "backup.partial"))
			require.ErrorIs(t, err, os.ErrNotExist, "%s: no partial copy is left (or the next backup removed it)", what)
			require.NoError(t, os.RemoveAll(clone))
		}
		require.NoError(t, os.RemoveAll(filepath.Dir(dir)))
	}
	t.Logf("after a crash: %v", outcomes)
	require.Positive(t, outcomes["the backup, whole"])
	require.Greater(t, outcomes["no backup"], int(total)*clones/2)
}

// A store with nothing in it, and one with a queue and no message, back
// up to copies that open and hold the same.
func TestBackupOfAnEmptyStore(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	root := t.TempDir()
	require.NoError(t, e.s.Backup(ctx(t), filepath.Join(root, "empty")))
	e.queue("jobs", keyedJobs)
	require.NoError(t, e.s.Backup(ctx(t), filepath.Join(root, "declared")))
	for name, queues := range map[string][]string{"empty": {}, "declared": {"jobs"}} {
		b, err := broker.Open(filepath.Join(root, name), e.opts)
		require.NoError(t, err, name)
		require.Equal(t, queues, b.Queues(), name)
		q, err := b.Queue("jobs", keyedJobs)
		require.NoError(t, err)
		mustPublish(t, q, "a copy takes publishes")
		require.NoError(t, b.Close())
	}
}

// A Backup whose copy is complete but whose name cannot be made durable
// (the sync of dir's parent fails after the rename) fails, and, as every
// failed Backup, leaves no dir: a retry to the same place succeeds.
func TestABackupWhoseNameIsNotDurableLeavesNoDir(t *testing.T) {
	e, ffs, _ := faultyBackupEnv(t)
	root := t.TempDir()
	dst := filepath.Join(root, "backup")
	// The first sync of root is the partial copy's creation, the second
	// the one after the rename.
	ffs.Inject(vfs.Rule{Op: vfs.OpSyncDir, Match: func(n string) bool { return filepath.Clean(n) == root }, Nth: 2})
	err := e.s.Backup(ctx(t), dst)
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, "removed")
	_, statErr := os.Stat(dst)
	require.ErrorIs(t, statErr, os.ErrNotExist, "a failed Backup leaves no dir")
	ffs.Clear()
	require.NoError(t, e.s.Backup(ctx(t), dst), "the retry")
}

// A store opened from a backup keeps the original's secret: a receipt the
// original handed out before the backup settles the lease the copy holds,
// and one it handed out after names no lease of the copy's, which is
// LeaseExpired and moves nothing (broker/receipt.go, Backup's doc).
func TestACopyTakesTheOriginalsReceiptsAsItsOwn(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "one")
	mustPublish(t, q, "two")
	before := mustReceiveOne(t, q)
	dst := filepath.Join(t.TempDir(), "b")
	require.NoError(t, e.s.Backup(ctx(t), dst))
	later := mustReceiveOne(t, q) // issued by the original after the backup

	b, err := broker.Open(dst, e.opts)
	require.NoError(t, err)
	defer b.Close()
	bq, err := b.Queue("jobs", policy())
	require.NoError(t, err)
	requireErrorIs(t, bq.Ack(ctx(t), later.Lease.Receipt), broker.LeaseExpired)
	require.NoError(t, bq.Ack(ctx(t), before.Lease.Receipt), "the copy holds the lease the receipt names")
	ds, err := bq.Receive(ctx(t), 10)
	require.NoError(t, err)
	require.Len(t, ds, 1, "the refused receipt moved nothing: the copy still hands its message out")
	require.Equal(t, later.Message.ID, ds[0].Message.ID)
}

// A receipt names its queue by number, and each store numbers its queues
// in the order they are first declared (Backup's doc, broker/receipt.go).
// A receipt the original issued for a queue it declared after the backup
// is LeaseExpired on a copy that gave that queue the same number (it
// declared the new queues in the original's order), and UnknownReceipt on
// one that gave the number to another queue, as another queue's receipt
// is. Either way nothing moves.
func TestACopyKnowsAReceiptForAQueueMadeAfterTheBackupByItsNumber(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	mustPublish(t, e.queue("jobs", policy()), "one")
	sameOrder, otherOrder := filepath.Join(t.TempDir(), "same"), filepath.Join(t.TempDir(), "other")
	require.NoError(t, e.s.Backup(ctx(t), sameOrder))
	require.NoError(t, e.s.Backup(ctx(t), otherOrder))
	mail := e.queue("mail", policy()) // the original's second queue
	e.queue("audit", policy())
	mustPublish(t, mail, "m")
	later := mustReceiveOne(t, mail) // issued by the original after the backups

	for _, c := range []struct {
		dir    string
		order  []string
		answer error
	}{
		{sameOrder, []string{"mail", "audit"}, broker.LeaseExpired},
		{otherOrder, []string{"audit", "mail"}, broker.UnknownReceipt},
	} {
		b, err := broker.Open(c.dir, e.opts)
		require.NoError(t, err)
		qs := map[string]*broker.Queue{}
		for _, name := range c.order {
			qs[name], err = b.Queue(name, policy())
			require.NoError(t, err)
		}
		mustPublish(t, qs["mail"], "the copy's own")
		requireErrorIs(t, qs["mail"].Ack(ctx(t), later.Lease.Receipt), c.answer)
		require.Equal(t, 1, qs["mail"].Stats().Ready, "a copy declaring %v moved a message for a receipt it refused", c.order)
		require.NoError(t, b.Close())
	}
}
