package broker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/brokertest"
	"github.com/walbroker/walbroker/vfs"
)

// diskFullHeld is what diskFullSetup leaves to act on: four leases and two dead
// letters.
type diskFullHeld struct {
	ack, nack, extend, reject broker.ReceiptValue
	replay, remove            string // dead letters' IDs
}

// diskFullSetup publishes seven messages (the last keyed "k1"), leases the
// first six, and rejects the fifth and sixth: four leased, one ready, two
// dead.
func diskFullSetup(t *testing.T, q *broker.Queue) diskFullHeld {
	t.Helper()
	ctx := context.Background()
	for i := 1; i <= 6; i++ {
		_, err := q.Publish(ctx, []byte{'p', byte('0' + i)})
		require.NoError(t, err)
	}
	_, err := q.PublishKeyed(ctx, "k1", []byte("p7"))
	require.NoError(t, err)
	ds, err := q.Receive(ctx, 6)
	require.NoError(t, err)
	require.Len(t, ds, 6)
	require.NoError(t, q.Reject(ctx, ds[4].Lease.Receipt, nil))
	require.NoError(t, q.Reject(ctx, ds[5].Lease.Receipt, nil))
	return diskFullHeld{ack: ds[0].Lease.Receipt, nack: ds[1].Lease.Receipt, extend: ds[2].Lease.Receipt, reject: ds[3].Lease.Receipt,
		replay: ds[4].Message.ID, remove: ds[5].Message.ID}
}

// Each call that changes something, made first on a full disk, fails with
// an error that wraps ENOSPC and says to free space, stops the store (every
// later call fails the same way), reports nothing done, and, once space is
// back, the store reopens holding exactly what it held before the call:
// nothing acknowledged before is lost or undone, and no message is there
// twice.
func TestEachCallOnAFullDiskFailsAndTheReopenedStoreIsAsBefore(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) { diskFullEachCallOnAFullDisk(t, mode) })
	}
}

func diskFullEachCallOnAFullDisk(t *testing.T, mode broker.SyncMode) {
	ctx := context.Background()
	options := func(fs vfs.FS, clock *brokertest.Clock) broker.Options {
		o := diskFullOptions(fs, clock)
		o.Sync = mode
		return o
	}
	// The control: the same calls on a disk with room, closed and reopened.
	control := func(t *testing.T) map[string]diskFullMessage {
		clock := brokertest.NewClock(t0)
		dir := t.TempDir()
		s, q := diskFullOpen(t, dir, options(vfs.Default, clock))
		diskFullSetup(t, q)
		require.NoError(t, s.Close())
		s, q = diskFullOpen(t, dir, options(vfs.Default, clock))
		defer s.Close()
		return diskFullContents(t, clock, q)
	}
	want := control(t)
	require.Len(t, want, 7, diskFullDescribe(want))

	for _, tc := range []struct {
		name string
		call func(s *broker.Store, q *broker.Queue, h diskFullHeld) error
	}{
		{"Publish", func(_ *broker.Store, q *broker.Queue, _ diskFullHeld) error {
			m, err := q.Publish(ctx, []byte("new"))
			require.Zero(t, m, "a failed Publish returns no message")
			return err
		}},
		{"PublishBatch", func(_ *broker.Store, q *broker.Queue, _ diskFullHeld) error {
			ms, err := q.PublishBatch(ctx, [][]byte{[]byte("b1"), []byte("b2")})
			require.Empty(t, ms, "a failed PublishBatch returns no messages")
			return err
		}},
		{"PublishKeyed", func(_ *broker.Store, q *broker.Queue, _ diskFullHeld) error {
			m, err := q.PublishKeyed(ctx, "k2", []byte("new"))
			require.Zero(t, m, "a failed PublishKeyed returns no message")
			return err
		}},
		{"Receive", func(_ *broker.Store, q *broker.Queue, _ diskFullHeld) error {
			ds, err := q.Receive(ctx, 10)
			require.Empty(t, ds, "a failed Receive hands out nothing")
			return err
		}},
		{"Ack", func(_ *broker.Store, q *broker.Queue, h diskFullHeld) error { return q.Ack(ctx, h.ack) }},
		{"Nack", func(_ *broker.Store, q *broker.Queue, h diskFullHeld) error {
			v, err := q.Nack(ctx, h.nack, nil)
			require.Zero(t, v, "a failed Nack reports nothing done")
			return err
		}},
		{"Extend", func(_ *broker.Store, q *broker.Queue, h diskFullHeld) error {
			l, err := q.Extend(ctx, h.extend, time.Hour)
			require.Zero(t, l, "a failed Extend returns no lease")
			return err
		}},
		{"Reject", func(_ *broker.Store, q *broker.Queue, h diskFullHeld) error { return q.Reject(ctx, h.reject, nil) }},
		{"ReplayDeadLetter", func(_ *broker.Store, q *broker.Queue, h diskFullHeld) error { return q.ReplayDeadLetter(ctx, h.replay) }},
		{"DeleteDeadLetter", func(_ *broker.Store, q *broker.Queue, h diskFullHeld) error { return q.DeleteDeadLetter(ctx, h.remove) }},
		{"Queue", func(s *broker.Store, _ *broker.Queue, _ diskFullHeld) error {
			_, err := s.Queue("other", diskFullPolicy)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := brokertest.NewClock(t0)
			dir := t.TempDir()
			ffs := vfs.NewFaultFS(vfs.Default)
			s, q := diskFullOpen(t, dir, options(ffs, clock))
			h := diskFullSetup(t, q)
			before := q.Stats()
			storeBefore := s.Stats()

			diskFullFill(ffs)
			err := tc.call(s, q, h)
			diskFullRequireFull(t, s, err, tc.name)
			t.Logf("%s: %v", tc.name, err)

			// Every later call fails the same way, reads included.
			_, err = q.Publish(ctx, []byte("later"))
			require.ErrorIs(t, err, s.Err(), "a Publish after")
			_, err = q.Receive(ctx, 1)
			require.ErrorIs(t, err, s.Err(), "a Receive after")
			_, err = q.DeadLetters(ctx, 10)
			require.ErrorIs(t, err, s.Err(), "DeadLetters after")

			// The counters of publishes and deliveries count nothing that
			// failed. (A settlement counts itself as the index applies
			// it, and stays counted when its record fails: docs/DESIGN.md,
			// "The counters Close leaves".)
			after := q.Stats()
			require.Equal(t, before.Published, after.Published, "Published")
			require.Equal(t, before.Duplicates, after.Duplicates, "Duplicates")
			require.Equal(t, before.Shed, after.Shed, "Shed")
			require.Equal(t, before.Delivered, after.Delivered, "Delivered")
			t.Logf("gauges before %+v after %+v", before, after)
			if strings.HasPrefix(tc.name, "Publish") {
				require.Equal(t, before.Ready, after.Ready, "Ready counts a message whose publish failed")
			}

			// Nor do the store's: no record was appended, no commit made.
			storeAfter := s.Stats()
			require.Equal(t, storeBefore.Records, storeAfter.Records, "Records")
			require.Equal(t, storeBefore.Commits, storeAfter.Commits, "Commits")
			require.Equal(t, storeBefore.DiskBytes, storeAfter.DiskBytes, "DiskBytes")

			closeErr := s.Close()
			t.Logf("Close: %v", closeErr)
			if closeErr != nil {
				require.ErrorIs(t, closeErr, syscall.ENOSPC, "Close of a store a full disk stopped")
			}

			// Space comes back: the store reopens as it was before the
			// call.
			ffs.Clear()
			s, q = diskFullOpen(t, dir, options(ffs, clock))
			defer s.Close()
			got := diskFullContents(t, clock, q)
			require.Equal(t, want, got, "want %s\ngot  %s", diskFullDescribe(want), diskFullDescribe(got))
		})
	}
}

// A Backup on a full disk fails with an error that wraps ENOSPC, leaves no
// copy (neither dir nor its partial name), and does not stop the store,
// whose log it never wrote to.
func TestABackupOnAFullDiskFailsAndLeavesNothing(t *testing.T) {
	ctx := context.Background()
	clock := brokertest.NewClock(t0)
	ffs := vfs.NewFaultFS(vfs.Default)
	s, q := diskFullOpen(t, t.TempDir(), diskFullOptions(ffs, clock))
	defer s.Close()
	diskFullSetup(t, q)

	diskFullFill(ffs)
	target := filepath.Join(t.TempDir(), "copy")
	err := s.Backup(ctx, target)
	require.ErrorIs(t, err, syscall.ENOSPC)
	t.Logf("Backup: %v", err)
	require.NoDirExists(t, target)
	require.NoDirExists(t, target+".partial")
	require.NoError(t, s.Err(), "a failed Backup stops nothing")
}

// Backup writes a checkpoint in the store's own directory before it
// copies (its doc, and the README): with only the store's disk full, a Backup to another
// disk with room fails too, wrapping ENOSPC, and leaves nothing there.
// The failed checkpoint stops checkpoints until the store is reopened
// (Backup's doc), so space freed is not enough: the reopened store's
// Backup succeeds.
func TestABackupOfAStoreWhoseDiskIsFullFailsEvenToADiskWithRoom(t *testing.T) {
	ctx := context.Background()
	clock := brokertest.NewClock(t0)
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	s, q := diskFullOpen(t, dir, diskFullOptions(ffs, clock))
	defer s.Close()
	diskFullSetup(t, q)

	storeDisk := func(name string) bool { return strings.HasPrefix(name, dir+string(filepath.Separator)) }
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpAllocate, vfs.OpTruncate} {
		ffs.Inject(vfs.Rule{Op: op, Match: storeDisk, Err: syscall.ENOSPC})
	}
	target := filepath.Join(t.TempDir(), "copy")
	err := s.Backup(ctx, target)
	require.ErrorIs(t, err, syscall.ENOSPC, "the checkpoint in the store's directory comes first")
	require.Contains(t, err.Error(), dir)
	require.NoDirExists(t, target)
	require.NoDirExists(t, target+".partial")
	require.NoError(t, s.Err(), "a failed Backup stops nothing")
	require.NotEmpty(t, s.Stats().MaintenanceStopped)

	ffs.Clear()
	require.ErrorIs(t, s.Backup(ctx, target), syscall.ENOSPC, "checkpoints stay stopped until the store is reopened")
	require.NoDirExists(t, target)
	require.NoError(t, s.Close())
	s, err = broker.Open(dir, diskFullOptions(ffs, clock))
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Backup(ctx, target))
	require.DirExists(t, target)
}

// Close on a full disk of a store that is still working (nothing was
// written since the disk filled): its checkpoint and clean mark cannot be
// written. Close skips the checkpoint and returns nil (the log holds
// everything), StoreStats.MaintenanceStopped says why; once space is back
// the store reopens with every message it held, read from the log.
func TestCloseOnAFullDiskOfAWorkingStore(t *testing.T) {
	for _, disk := range []string{"hard", "real"} {
		t.Run(disk, func(t *testing.T) {
			clock := brokertest.NewClock(t0)
			dir := t.TempDir()
			ffs := vfs.NewFaultFS(vfs.Default)
			rfs := &fullDiskFS{FS: ffs}
			s, q := diskFullOpen(t, dir, diskFullOptions(rfs, clock))
			diskFullSetup(t, q)
			before := s.Stats()
			if disk == "hard" {
				diskFullFill(ffs)
			} else {
				rfs.full.Store(true)
			}
			require.NoError(t, s.Err())
			require.NoError(t, s.Close(), "the log wrote and synced everything")
			after := s.Stats()
			require.Contains(t, after.MaintenanceStopped, "no space left on device", "after Close, the checkpoint's failure is still told")
			require.Empty(t, before.MaintenanceStopped)
			ffs.Clear()
			rfs.full.Store(false)
			s, err := broker.Open(dir, diskFullOptions(rfs, clock))
			require.NoError(t, err)
			defer s.Close()
			require.Equal(t, int(before.Records), s.Recovery().Replayed, "the next Open reads the log: %v", s.Recovery())
			q, err = s.Queue("jobs", diskFullPolicy)
			require.NoError(t, err)
			require.Len(t, diskFullContents(t, clock, q), 7)
		})
	}
}

// The calls a full disk need not stop: a publish shed by a full queue
// writes nothing and is QueueFull, counted in Shed; a keyed publish of a
// key seen, on an unchanged clock, is the original, counted in Duplicates;
// reads (DeadLetters, Stats, a Receive of an empty queue) answer; and the
// store goes on. A keyed duplicate whose clock moved must record the
// reading: it fails with the full disk's error and counts nothing.
func TestCallsThatWriteNothingAnswerOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	clock := brokertest.NewClock(t0)
	ffs := vfs.NewFaultFS(vfs.Default)
	s, err := broker.Open(t.TempDir(), diskFullOptions(ffs, clock))
	require.NoError(t, err)
	defer s.Close()
	p := diskFullPolicy
	p.Capacity = 1
	q, err := s.Queue("small", p)
	require.NoError(t, err)
	empty, err := s.Queue("empty", diskFullPolicy)
	require.NoError(t, err)
	orig, err := q.PublishKeyed(ctx, "k", []byte("x"))
	require.NoError(t, err)

	diskFullFill(ffs)
	_, err = q.Publish(ctx, []byte("y"))
	require.ErrorIs(t, err, broker.QueueFull)
	require.EqualValues(t, 1, q.Stats().Shed)
	m, err := q.PublishKeyed(ctx, "k", []byte("x"))
	require.NoError(t, err)
	require.Equal(t, orig.ID, m.ID)
	require.EqualValues(t, 1, q.Stats().Duplicates)
	ds, err := empty.Receive(ctx, 5)
	require.NoError(t, err)
	require.Empty(t, ds)
	_, err = q.DeadLetters(ctx, 5)
	require.NoError(t, err)
	require.ErrorIs(t, q.DeleteDeadLetter(ctx, "0000000000000099"), broker.DeadLetterNotFound, "an unknown dead letter on a full disk")
	require.ErrorIs(t, q.ReplayDeadLetter(ctx, "0000000000000099"), broker.DeadLetterNotFound, "an unknown dead letter on a full disk")
	require.NoError(t, s.Err())

	clock.Advance(time.Second)
	_, err = q.PublishKeyed(ctx, "k", []byte("x"))
	t.Logf("keyed duplicate, clock moved: %v", err)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.EqualValues(t, 1, q.Stats().Duplicates)
}

// A call that fails may still have taken effect (README): a publish whose
// record was written but whose fdatasync failed is in the log the
// reopened store reads. Retried after the reopen, a Publish enqueues the
// message a second time, under a new ID; a PublishKeyed with the same key
// is answered with the original and enqueues nothing.
func TestARetryAfterAFailedPublishMayDuplicateAndAKeyedOneDoesNot(t *testing.T) {
	ctx := context.Background()
	clock := brokertest.NewClock(t0)
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	s, q := diskFullOpen(t, dir, diskFullOptions(ffs, clock))

	failNextCommit(t, ffs, dir)
	_, err := q.Publish(ctx, []byte("plain"))
	require.ErrorIs(t, err, syscall.EIO)
	_ = s.Close()
	s, q = diskFullOpen(t, dir, diskFullOptions(ffs, clock))
	require.Equal(t, 1, q.Stats().Ready, "the failed publish's record was written, and the log holds it")
	_, err = q.Publish(ctx, []byte("plain"))
	require.NoError(t, err)
	require.Equal(t, 2, q.Stats().Ready, "a retried Publish enqueues the message again")

	failNextCommit(t, ffs, dir)
	_, err = q.PublishKeyed(ctx, "order-7", []byte("keyed"))
	require.ErrorIs(t, err, syscall.EIO)
	_ = s.Close()
	s, q = diskFullOpen(t, dir, diskFullOptions(ffs, clock))
	defer s.Close()
	require.Equal(t, 3, q.Stats().Ready)
	m, err := q.PublishKeyed(ctx, "order-7", []byte("keyed"))
	require.NoError(t, err)
	require.Nil(t, m.Payload, "the retry is answered with the original")
	require.Equal(t, 3, q.Stats().Ready, "a retried PublishKeyed enqueues nothing")
	got := diskFullContents(t, clock, q)
	require.Len(t, got, 3)
	_, there := got[m.ID]
	require.True(t, there, "the original the retry named is the message the log holds")
}

// failNextCommit fails the next fdatasync of the log's active segment,
// the highest-numbered .seg file in dir, with EIO: the next commit's. Any
// next fdatasync would not do: the log prepares its next segment in the
// background from its first write on, and the preparation's fdatasync
// may come first (it is retried, unreported, and the commit succeeds).
func failNextCommit(t *testing.T, ffs *vfs.FaultFS, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	active := ""
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".seg") {
			active = max(active, e.Name())
		}
	}
	require.NotEmpty(t, active, "no segment in %s", dir)
	ffs.Inject(vfs.Rule{Op: vfs.OpSync, Times: 1, Err: syscall.EIO, NameContains: active})
}
