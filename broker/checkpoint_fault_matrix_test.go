package broker_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// ckptFaultState builds, in e's store, a state with something of every
// kind a checkpoint holds: a stream backlog on its table file and in
// memory, leases (one extended), a message waiting out its retry delay,
// dead letters (one replayed), dedup keys, and a second queue. It calls
// checkpoint once the backlog is published.
func ckptFaultState(t *testing.T, e *env, checkpoint func()) (a, b *broker.Queue, held []broker.ReceiptValue) {
	t.Helper()
	a = e.queue("a", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2 }))
	b = e.queue("b", policy())
	var k3 string
	for i := range 40 {
		if i%3 == 0 {
			m, err := a.PublishKeyed(ctx(t), fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("a%d", i)))
			require.NoError(t, err)
			if i == 3 {
				k3 = m.ID
			}
			continue
		}
		mustPublish(t, a, fmt.Sprintf("a%d", i))
	}
	for i := range 10 {
		mustPublish(t, b, fmt.Sprintf("b%d", i))
	}
	checkpoint()

	ds := mustReceive(t, a, 6)
	require.Len(t, ds, 6)
	require.NoError(t, a.Ack(ctx(t), ds[0].Lease.Receipt))
	require.NoError(t, a.Ack(ctx(t), ds[1].Lease.Receipt))
	mustNack(t, a, ds[2].Lease.Receipt, errors.New("retry me"))
	mustNack(t, a, ds[3].Lease.Receipt, errors.New("first"))
	mustNack(t, a, ds[4].Lease.Receipt, errors.New("first"))
	ext, err := a.Extend(ctx(t), ds[5].Lease.Receipt, time.Minute)
	require.NoError(t, err)
	held = append(held, ext.Receipt)
	e.clock.Advance(2 * time.Second)
	again := mustReceive(t, a, 3) // the three nacked, past their delay
	require.Len(t, again, 3)
	for _, d := range again {
		mustNack(t, a, d.Lease.Receipt, errors.New("second")) // the last allowed delivery: dead
	}
	dead := mustDeadLetters(t, a)
	require.Len(t, dead, 3)
	require.NoError(t, a.ReplayDeadLetter(ctx(t), dead[0].Message.ID))
	for i := range 5 {
		mustPublish(t, a, fmt.Sprintf("late%d", i))
	}
	dup, err := a.PublishKeyed(ctx(t), "k3", []byte("dup"))
	require.NoError(t, err)
	require.Equal(t, k3, dup.ID, "k3 is remembered")
	_, err = a.PublishKeyed(ctx(t), "fresh", []byte("fresh"))
	require.NoError(t, err)
	bs := mustReceive(t, b, 3)
	require.NoError(t, b.Ack(ctx(t), bs[0].Lease.Receipt))
	held = append(held, bs[1].Lease.Receipt)
	return a, b, held
}

// A checkpoint that fails at any of its file operations under index/
// (its marker, the creation, writes and syncs of a table file, the
// checkpoint file's write, fdatasync, close and rename, the directory's
// sync, the removal of the marker), with EIO or ENOSPC, stops checkpoints,
// not the store: calls go on, and a reopen finds exactly the state the
// store acknowledged, before and after the failure, and a second reopen
// (from the checkpoint the first one wrote) the same again. The failing
// checkpoint is the store's first (it creates the table file), a later
// one, or Close's.
func TestCheckpointFailingAtEachStepKeepsTheAcknowledgedState(t *testing.T) {
	ops := []vfs.Op{vfs.OpOpen, vfs.OpWrite, vfs.OpSync, vfs.OpTruncate, vfs.OpMap, vfs.OpClose,
		vfs.OpRename, vfs.OpSyncDir, vfs.OpRemove, vfs.OpSize, vfs.OpReadDir}
	errnos := []error{syscall.EIO, syscall.ENOSPC}
	if testing.Short() {
		errnos = errnos[:1]
	}
	for _, when := range []string{"first", "later", "close"} {
		for _, op := range ops {
			for _, errno := range errnos {
				for nth := int64(1); ; nth++ {
					reached := false
					t.Run(fmt.Sprintf("%s/%v#%d/%v", when, op, nth, errno), func(t *testing.T) {
						reached = ckptFaultCase(t, when, vfs.Rule{Op: op, Nth: nth, Err: errno,
							Match: func(name string) bool { return strings.Contains(name, "/index") }})
					})
					if !reached {
						break
					}
				}
			}
		}
	}
}

// ckptFaultCase runs one case of the test above, and reports whether the
// rule fired.
func ckptFaultCase(t *testing.T, when string, rule vfs.Rule) bool {
	ffs := vfs.NewFaultFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS = ffs })
	var ckptErr error
	if when == "first" {
		ffs.Inject(rule)
	}
	a, b, held := ckptFaultState(t, e, func() {
		ckptErr = e.s.Maintain()
		if when == "first" {
			ffs.Clear()
		}
	})
	if when == "first" && ffs.Injected(rule.Op) == 0 {
		return false
	}
	if when == "first" {
		require.ErrorIs(t, ckptErr, rule.Err, "a failed checkpoint is reported")
		require.NoError(t, e.s.Err(), "a failed checkpoint does not stop the store")
		require.Contains(t, e.s.Stats().MaintenanceStopped, rule.Err.Error())
	} else {
		require.NoError(t, ckptErr)
	}
	if when == "later" {
		ffs.Inject(rule)
		err := e.s.Maintain()
		if ffs.Injected(rule.Op) == 0 {
			return false
		}
		require.ErrorIs(t, err, rule.Err, "a failed checkpoint is reported")
		require.NoError(t, e.s.Err(), "a failed checkpoint does not stop the store")
		require.Contains(t, e.s.Stats().MaintenanceStopped, rule.Err.Error())
	}

	// The store goes on: every kind of call after the failure.
	mustPublish(t, a, "after")
	keyed, err := a.PublishKeyed(ctx(t), "after-key", []byte("after"))
	require.NoError(t, err)
	d := mustReceiveOne(t, a)
	require.NoError(t, a.Ack(ctx(t), d.Lease.Receipt))
	require.NoError(t, b.Ack(ctx(t), held[1]))
	ext, err := a.Extend(ctx(t), held[0], 2*time.Minute)
	require.NoError(t, err)
	dead := mustDeadLetters(t, a)
	require.NotEmpty(t, dead)
	require.NoError(t, a.ReplayDeadLetter(ctx(t), dead[0].Message.ID))
	want := broker.Dump(e.s)

	if when == "close" {
		ffs.Inject(rule)
	}
	if err := e.s.Close(); err != nil {
		// Close's own closing of a table file, past its checkpoint,
		// fails the call, as close(2) does; nothing is lost by it.
		require.Equal(t, vfs.OpClose, rule.Op, "the log closes cleanly; a failed checkpoint is logged: %v", err)
		require.ErrorIs(t, err, rule.Err)
		require.Contains(t, err.Error(), "tbl-")
	}
	if when == "close" && ffs.Injected(rule.Op) == 0 {
		return false
	}
	e.opts.FS = nil
	s := e.open()
	require.Empty(t, broker.StateDiff(want, broker.Dump(s)), "reopen after the failed checkpoint")
	require.NoError(t, broker.VerifyIndex(s))
	s = e.reopen()
	require.Empty(t, broker.StateDiff(want, broker.Dump(s)), "reopen from the checkpoint the first reopen wrote")
	qa := e.queue("a", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2 }))
	require.NoError(t, qa.Ack(ctx(t), ext.Receipt), "the lease extended after the failure is held")
	dup, err := qa.PublishKeyed(ctx(t), "after-key", []byte("again"))
	require.NoError(t, err)
	require.Equal(t, keyed.ID, dup.ID, "the key published after the failure is remembered")
	return true
}
