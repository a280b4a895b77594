package broker_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// Damage that a read finds stops the store and marks its checkpoint
// suspect (index/SUSPECT), durably, so that the next Open scans the whole
// log and refuses it with Corrupt, naming the file. A power loss at every
// file operation from the store's Open to its Close, past the read that
// finds the damage and the mark's creation, its fdatasync and its
// directory's sync: once the read has returned Corrupt with the power
// still on, the next Open refuses the log; before that, it may open, and
// a read finds the damage again. No delivery ever carries the damaged
// message.
func TestAPowerLossAfterDamageIsFoundStillRefusesTheLog(t *testing.T) {
	requireDamageRefusedAfterPowerLoss(t, false)
}

// When the mark cannot be written, the store removes the checkpoint and
// its table files instead (index.RemoveCheckpoint), durably, to the same
// end: the same power losses, with the mark's creation failing.
func TestAPowerLossAfterDamageIsFoundAndTheMarkFailsStillRefusesTheLog(t *testing.T) {
	requireDamageRefusedAfterPowerLoss(t, true)
}

func requireDamageRefusedAfterPowerLoss(t *testing.T, markFails bool) {
	e, a, _, file := corruptLog(t)
	root := fastDir(t)
	open := func(dir string, fs vfs.FS) (*broker.Store, error) {
		o := e.opts
		o.FS = fs
		// No background round: the damage is found by the read below,
		// never by a round that ran before it.
		broker.ManualMaintenance(&o)
		return broker.Open(dir, o)
	}
	// run opens a copy of the damaged store through a CrashFS that loses
	// power after k operations from the open's end (none if k < 0),
	// reads, and closes. found says the read returned Corrupt before the
	// power loss.
	run := func(k int64) (cfs *vfs.CrashFS, dir string, total int64, found bool) {
		dir = filepath.Join(root, fmt.Sprintf("run-%d", k))
		copyTree(t, e.dir, dir)
		cfs = vfs.NewCrashFS(vfs.Default)
		ffs := vfs.NewFaultFS(cfs)
		s, err := open(dir, ffs)
		require.NoError(t, err)
		if markFails {
			// Injected once Open has looked for a mark.
			ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: "SUSPECT", Err: syscall.EIO})
		}
		opened := cfs.Ops()
		if k >= 0 {
			cfs.CrashAfter(opened + k)
		}
		q, err := s.Queue("jobs", policy())
		require.NoError(t, err)
		ds, err := q.Receive(ctx(t), 10)
		for _, d := range ds {
			require.NotEqual(t, e.lostB, d.Message.ID, "the damaged message was delivered")
		}
		found = errors.Is(err, broker.Corrupt) && !cfs.Crashed()
		_ = s.Close()
		return cfs, dir, cfs.Ops() - opened, found
	}
	_, dir, total, found := run(-1)
	require.True(t, found, "the read finds the damage")
	_, err := os.Stat(filepath.Join(dir, "index", "checkpoint"))
	require.Equal(t, markFails, errors.Is(err, os.ErrNotExist), "the checkpoint is removed exactly when the mark fails")
	require.NoError(t, os.RemoveAll(dir))

	outcomes := map[string]int{}
	for k := int64(0); k <= total+2; k++ {
		cfs, dir, _, found := run(k)
		what := fmt.Sprintf("power lost after operation %d of %d", k, total)
		clone := filepath.Join(root, fmt.Sprintf("clone-%d", k))
		require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
		s, err := open(clone, nil)
		if err == nil {
			require.False(t, found, "%s: the read had returned Corrupt, yet the next open does not refuse the log", what)
			outcomes["opened; the damage found again"]++
			q, err := s.Queue("jobs", policy())
			require.NoError(t, err)
			// The read before the power loss may have leased the
			// messages durably: their leases lapse first.
			e.clock.Advance(time.Minute)
			ds, err := q.Receive(ctx(t), 10)
			requireErrorIs(t, err, broker.Corrupt, file)
			for _, d := range ds {
				require.NotEqual(t, e.lostB, d.Message.ID, "%s: the damaged message was delivered", what)
				require.Equal(t, a.ID, d.Message.ID, what)
			}
			_ = s.Close()
		} else {
			requireErrorIs(t, err, broker.Corrupt, file)
			outcomes["refused"]++
		}
		require.NoError(t, os.RemoveAll(clone))
		require.NoError(t, os.RemoveAll(dir))
	}
	t.Logf("%d operations; after a power loss: %v", total, outcomes)
	require.Positive(t, outcomes["refused"])
	require.Positive(t, outcomes["opened; the damage found again"])
}

// Damage found while a checkpoint is being written, when the mark cannot
// be written either: the store removes the checkpoint instead, and the
// checkpoint being written must not put one back. The checkpoint is a
// round of maintenance; the damage is found by a Receive made, on a
// goroutine of its own, while that checkpoint holds no queue's lock
// (between its snapshot and the table's flush). (Close's own checkpoint
// meets no such Receive: a call that begins once Close has begun fails
// with Closed.) Both write the index directory: it is the
// checkpointer that must look again once its checkpoint is in place.
func TestDamageFoundDuringACheckpointStillRemovesTheCheckpointWhenTheMarkFails(t *testing.T) {
	e, _, _, file := corruptLog(t)
	ffs := vfs.NewFaultFS(vfs.Default)
	o := e.opts
	o.FS = ffs
	broker.ManualMaintenance(&o)
	s, err := broker.Open(e.dir, o)
	require.NoError(t, err)
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: "SUSPECT", Err: syscall.EIO})
	var once sync.Once
	var found error
	ffs.Observe(func(ev vfs.Event) {
		if ev.Op != vfs.OpOpen || !strings.Contains(ev.Name, "CHECKPOINTING") {
			return
		}
		once.Do(func() {
			done := make(chan error)
			go func() {
				_, err := q.Receive(ctx(t), 10)
				done <- err
			}()
			found = <-done
		})
	})
	_ = s.Maintain() // what matters is what it leaves in the index directory
	require.NoError(t, s.Close(), "a store stopped by damage closes without error")
	requireErrorIs(t, found, broker.Corrupt, file)
	_, err = os.Stat(filepath.Join(e.dir, "index", "SUSPECT"))
	require.ErrorIs(t, err, os.ErrNotExist, "the mark failed")
	_, err = os.Stat(filepath.Join(e.dir, "index", "checkpoint"))
	require.ErrorIs(t, err, os.ErrNotExist, "the checkpoint Close wrote after the damage was found came back")
	_, err = broker.Open(e.dir, e.opts)
	requireErrorIs(t, err, broker.Corrupt, file)
}
