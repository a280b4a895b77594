package broker_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
)

// backupWithLater backs e's store up into a new directory and then
// publishes n messages to jobs in the original, returning the copy's
// directory, the state of the store at the backup, and the highest
// sequence the original handed out after it.
func backupWithLater(t *testing.T, e *env, jobs *broker.Queue, n int) (dst, want string, last uint64) {
	t.Helper()
	dst = filepath.Join(t.TempDir(), "backup")
	want = broker.Dump(e.s)
	require.NoError(t, e.s.Backup(ctx(t), dst))
	for i := range n {
		last = seqOf(t, mustPublish(t, jobs, fmt.Sprintf("after the backup %d", i)).ID)
	}
	return dst, want, last
}

// openCopy opens the copy in dir with opts, closed when the test ends.
func openCopy(t *testing.T, dir string, opts broker.Options) *env {
	t.Helper()
	c := &env{t: t, dir: dir, clock: newFakeClock(), opts: opts}
	t.Cleanup(func() {
		if c.s != nil {
			_ = c.s.Close()
		}
	})
	c.open()
	return c
}

// A copy opened with Options.Salvage moves its IDs on as one opened
// without it does. Two stores opened from the same copy (one a copy of its
// directory, files and mark and all, as a stopped store's directory may be
// copied) jump from the same place, by the same amount.
func TestASalvagingOpenOfACopyMovesItsIDsOnToo(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	jobs := e.queue("jobs", policy())
	mustPublish(t, jobs, "before the backup")
	dst, want, last := backupWithLater(t, e, jobs, 3)
	twin := dst + "-twin"
	copyTree(t, dst, twin)
	require.FileExists(t, filepath.Join(twin, broker.CopyMark))

	var firsts []uint64
	for _, salvage := range []bool{true, false} {
		dir := map[bool]string{true: dst, false: twin}[salvage]
		opts := e.opts
		opts.Salvage = salvage
		c := openCopy(t, dir, opts)
		requireSameState(t, want, broker.Dump(c.s), dir)
		require.NoFileExists(t, filepath.Join(dir, broker.CopyMark), "salvage=%v", salvage)
		first := seqOf(t, mustPublish(t, c.queue("jobs", policy()), "in the copy").ID)
		require.Greater(t, first, last+broker.CopyJump/2, "salvage=%v", salvage)
		firsts = append(firsts, first)
	}
	require.Equal(t, firsts[0], firsts[1], "both jump from where the backup stood")
}

// The sequence a copy jumps over is never walked: the table (chunk files
// of 65,536 entries, named by chunk number), the streams, checkpoints,
// dead letters and reclamation each cost what the store holds, not the
// 2^48 numbers between its messages from before the backup and those
// after it. A copy that publishes, leases, acks, nacks, dead-letters,
// replays a dead letter, checkpoints, reclaims and reopens (from its
// checkpoint and from its log alone) across the jump keeps its state, and
// no file grows with the jump.
func TestACopyWorksAcrossItsJumpAtTheCostOfWhatItHolds(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	held := fillForBackup(t, e)
	dst, _, last := backupWithLater(t, e, e.queue("jobs", keyedJobs), 2)

	c := openCopy(t, dst, e.opts)
	jobs, dlq := c.queue("jobs", keyedJobs), c.queue("dlq", dlqPolicy)
	before := jobs.Stats()
	var after []string
	for i := range 60 {
		m := mustPublish(t, jobs, fmt.Sprintf("past the jump %02d-%s", i, strings.Repeat("p", 300)))
		require.Greater(t, seqOf(t, m.ID), last+broker.CopyJump/2)
		after = append(after, m.ID)
	}
	for _, r := range held {
		require.NoError(t, jobs.Ack(ctx(t), r), "a lease the copy holds, across the jump")
	}
	ds := mustReceive(t, jobs, 1000)
	require.Len(t, ds, before.Ready+len(after), "the ready messages from both sides of the jump")
	for i := 1; i < len(ds); i++ {
		require.Less(t, seqOf(t, ds[i-1].Message.ID), seqOf(t, ds[i].Message.ID), "delivered in ID order, across the jump")
	}
	require.Equal(t, after[0], ds[before.Ready].Message.ID)
	for _, d := range ds[:len(ds)-5] {
		require.NoError(t, jobs.Ack(ctx(t), d.Lease.Receipt))
	}

	dead := mustPublish(t, dlq, "dead past the jump")
	d := mustReceiveOne(t, dlq)
	require.Equal(t, dead.ID, d.Message.ID)
	_, err := dlq.Nack(ctx(t), d.Lease.Receipt, errors.New("no"))
	require.NoError(t, err)
	dls, err := dlq.DeadLetters(ctx(t), 100)
	require.NoError(t, err)
	require.Len(t, dls, 6, "five from before the backup, one from after the jump")
	require.Equal(t, dead.ID, dls[len(dls)-1].Message.ID)
	old := dls[0].Message.ID
	require.Less(t, seqOf(t, old), last)
	require.NoError(t, dlq.ReplayDeadLetter(ctx(t), old))
	require.Equal(t, old, mustReceiveOne(t, dlq).Message.ID, "a dead letter replayed across the jump keeps its ID")

	require.NoError(t, c.s.Maintain())
	require.Greater(t, c.s.Stats().BytesReclaimed, int64(0), "reclamation goes on past the jump")
	want := broker.Dump(c.s)
	c.reopen()
	requireSameState(t, want, broker.Dump(c.s), "reopened from its checkpoint")
	c.close()
	rebuilt := dst + "-rebuilt"
	copyTree(t, dst, rebuilt)
	require.NoError(t, os.RemoveAll(filepath.Join(rebuilt, "index")))
	r := openCopy(t, rebuilt, e.opts)
	requireSameState(t, want, broker.Dump(r.s), "rebuilt from its log alone")
	require.NoError(t, r.s.Maintain())

	for _, dir := range []string{dst, rebuilt} {
		var tables []string
		require.NoError(t, filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
			require.NoError(t, err)
			if fi.IsDir() {
				return nil
			}
			if strings.HasPrefix(fi.Name(), "tbl-") {
				tables = append(tables, fi.Name())
			}
			// A table chunk is 2 MiB (65,536 entries of 32 bytes).
			require.LessOrEqual(t, fi.Size(), int64(4<<20), "%s", path)
			return nil
		}))
		require.LessOrEqual(t, len(tables), 4, "%s: the table's chunks are those of the messages held: %v", dir, tables)
		// Chunk files are named by chunk number (65,536 sequences each):
		// the table holds entries past the jump.
		require.Contains(t, tables, fmt.Sprintf("tbl-%012d.idx", uint64(broker.CopyJump>>16)), dir)
	}
}

// crashAtCopyMark is a CrashFS that loses power just before the first
// Open of a copy removes its mark (or, afterRemove, once it removed it and
// before the sync that makes the removal durable).
type crashAtCopyMark struct {
	*vfs.CrashFS
	mark        string
	afterRemove bool
	removed     *bool
}

func (c crashAtCopyMark) Remove(name string) error {
	if name == c.mark {
		*c.removed = true
		if !c.afterRemove {
			c.Crash()
		}
	}
	return c.CrashFS.Remove(name)
}

func (c crashAtCopyMark) SyncDir(dir string) error {
	if *c.removed && dir == filepath.Dir(c.mark) {
		c.Crash()
	}
	return c.CrashFS.SyncDir(dir)
}

// A crash after the first Open of a copy made its raised sequence durable
// and before the removal of the copy's mark was leaves the mark: the next
// Open jumps again, from past the first jump, and loses nothing. The
// sequences the two jumps skip are never handed out.
func TestACrashBeforeACopysMarkIsGoneJumpsAgainAndLosesNothing(t *testing.T) {
	for _, afterRemove := range []bool{false, true} {
		e := newEnv(t, broker.ManualMaintenance)
		jobs := e.queue("jobs", policy())
		mustPublish(t, jobs, "before the backup")
		dst, want, last := backupWithLater(t, e, jobs, 3)

		cfs := vfs.NewCrashFS(vfs.Default)
		opts := e.opts
		opts.FS = crashAtCopyMark{CrashFS: cfs, mark: filepath.Join(dst, broker.CopyMark), afterRemove: afterRemove, removed: new(bool)}
		_, err := broker.Open(dst, opts)
		require.ErrorIs(t, err, vfs.ErrCrashed, "afterRemove=%v", afterRemove)
		clone := filepath.Join(t.TempDir(), "clone")
		require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dst}))
		require.FileExists(t, filepath.Join(clone, broker.CopyMark), "afterRemove=%v: the removal was not durable", afterRemove)

		c := openCopy(t, clone, e.opts)
		requireSameState(t, want, broker.Dump(c.s), fmt.Sprintf("afterRemove=%v", afterRemove))
		require.NoFileExists(t, filepath.Join(clone, broker.CopyMark))
		first := seqOf(t, mustPublish(t, c.queue("jobs", policy()), "in the copy").ID)
		require.Greater(t, first, last+broker.CopyJump+broker.CopyJump/2, "afterRemove=%v: jumped twice", afterRemove)
	}
}

// An Open of a copy that fails before its raised sequence is durable
// (here the fdatasync of the mark fails) leaves the copy's mark for the
// next Open, which jumps.
func TestAFailedOpenOfACopyLeavesItsMark(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	jobs := e.queue("jobs", policy())
	mustPublish(t, jobs, "before the backup")
	dst, want, last := backupWithLater(t, e, jobs, 3)

	ffs := vfs.NewFaultFS(vfs.Default)
	opts := e.opts
	opts.FS = ffs
	failNextCommit(t, ffs, dst)
	_, err := broker.Open(dst, opts)
	require.ErrorIs(t, err, syscall.EIO)
	require.Equal(t, int64(1), ffs.Injected(vfs.OpSync))
	require.FileExists(t, filepath.Join(dst, broker.CopyMark))

	c := openCopy(t, dst, e.opts)
	requireSameState(t, want, broker.Dump(c.s), "after the failed Open")
	require.NoFileExists(t, filepath.Join(dst, broker.CopyMark))
	require.Greater(t, seqOf(t, mustPublish(t, c.queue("jobs", policy()), "in the copy").ID), last+broker.CopyJump/2)
}

// A copy's own Backup is marked as any is: a store restored from a backup
// of a restored store jumps again, past every ID the first copy gave.
func TestABackupOfACopyJumpsAgainWhenItIsOpened(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	jobs := e.queue("jobs", policy())
	mustPublish(t, jobs, "before the backup")
	dst, _, _ := backupWithLater(t, e, jobs, 3)

	c := openCopy(t, dst, e.opts)
	cjobs := c.queue("jobs", policy())
	mustPublish(t, cjobs, "in the copy, before its backup")
	again, want, last := backupWithLater(t, c, cjobs, 3)
	require.FileExists(t, filepath.Join(again, broker.CopyMark))
	require.NoFileExists(t, filepath.Join(dst, broker.CopyMark), "the copy itself stays unmarked")

	cc := openCopy(t, again, e.opts)
	requireSameState(t, want, broker.Dump(cc.s), "the copy of the copy")
	require.Greater(t, seqOf(t, mustPublish(t, cc.queue("jobs", policy()), "in the copy of the copy").ID), last+broker.CopyJump/2)
}

// Near the end of the sequences a copy jumps by half of those left, never
// past the last one: it still publishes, in order, and a store with too
// few left to jump over does not jump at all.
func TestACopyNearTheLastSequenceJumpsOnlyAsFarAsThereIsRoom(t *testing.T) {
	const last = math.MaxUint64 - 2 // the highest sequence handed out
	for _, next := range []uint64{last - broker.CopyJump, last - 1} {
		dir := t.TempDir()
		writeRawLog(t, dir, rawDeclare(1, "jobs"),
			index.Event{Kind: index.KindPublish, Queue: 1, Seq: 1, Time: t0.UnixNano(), Payload: []byte("one")},
			index.Event{Kind: index.KindMark, Seq: next})
		opts := broker.Options{Now: newFakeClock().Now, SegmentBytes: testSegmentBytes}
		s, err := broker.Open(dir, opts)
		require.NoError(t, err)
		dst := filepath.Join(t.TempDir(), "backup")
		require.NoError(t, s.Backup(ctx(t), dst))
		require.NoError(t, s.Close())

		c := openCopy(t, dst, opts)
		q := c.queue("jobs", policy())
		want := next + (last-next)/2
		require.Equal(t, want, seqOf(t, mustPublish(t, q, "first").ID), "next=%d", next)
		if want < last {
			require.Equal(t, want+1, seqOf(t, mustPublish(t, q, "second").ID), "next=%d", next)
		}
	}
}
