package broker_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// An Open with Salvage that fails part way (here the fdatasync after the
// damaged span was overwritten) leaves a store whose damage may already
// read as repaired: the next Open without Salvage refuses it with Corrupt,
// and the next Open with Salvage reports the message the span held as lost
// (RecoveryReport.LostMessages), as the first would have, and keeps the
// message beside it.
func TestASalvageThatFailsIsFinishedAndReportedByTheNextOne(t *testing.T) {
	clock := newFakeClock()
	dir := fastDir(t)
	opts := reclaimOptions(clock, nil)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	intact, lost := intactAndVictim(t, q)
	churnSegments(t, s, 3)
	require.NoError(t, s.Close())
	path := damagePayload(t, dir, victimPayload)

	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpSync, Match: func(n string) bool { return n == path }, Times: 1})
	salvage := opts
	salvage.Salvage, salvage.FS = true, fs
	_, err = broker.Open(dir, salvage)
	require.ErrorIs(t, err, syscall.EIO)
	require.Positive(t, fs.Injected(vfs.OpSync))

	_, err = broker.Open(dir, opts)
	requireErrorIs(t, err, broker.Corrupt, filepath.Base(path), "did not finish")

	salvage.FS = nil
	s, err = broker.Open(dir, salvage)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	rep := s.Recovery()
	require.Equal(t, 1, rep.SalvagedSpans)
	require.Equal(t, []string{lost.ID}, rep.LostMessages)
	require.Equal(t, map[string][]string{"stuck": {lost.ID}}, rep.LostByQueue)
	q, err = s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	ds, err := q.Receive(ctx(t), 10)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, intact.ID, ds[0].Message.ID)
	require.NoFileExists(t, filepath.Join(dir, "salvage", "unfinished.json"))
}

// An Open with Salvage whose log salvage succeeded but which then fails
// itself (here the index cannot be rebuilt) has handed no report on: the
// log keeps its list of the repaired spans, so the next Open without
// Salvage refuses the store, and the next with it reports the spans and
// the message they held.
func TestAStoreOpenThatFailsAfterItsLogWasSalvagedLeavesTheReportToTheNext(t *testing.T) {
	clock := newFakeClock()
	dir := fastDir(t)
	opts := reclaimOptions(clock, nil)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	intact, lost := intactAndVictim(t, q)
	churnSegments(t, s, 3)
	require.NoError(t, s.Close())
	damagePayload(t, dir, victimPayload)

	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: "checkpoint", Times: 1})
	salvage := opts
	salvage.Salvage, salvage.FS = true, fs
	_, err = broker.Open(dir, salvage)
	require.ErrorIs(t, err, syscall.EIO)
	require.Positive(t, fs.Injected(vfs.OpRemove), "the fault was met")
	require.FileExists(t, filepath.Join(dir, "salvage", "unfinished.json"))

	_, err = broker.Open(dir, opts)
	requireErrorIs(t, err, broker.Corrupt, "did not finish")

	salvage.FS = nil
	s, err = broker.Open(dir, salvage)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	rep := s.Recovery()
	require.Equal(t, 1, rep.SalvagedSpans)
	require.Equal(t, []string{lost.ID}, rep.LostMessages)
	q, err = s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	ds, err := q.Receive(ctx(t), 10)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, intact.ID, ds[0].Message.ID)
	require.NoFileExists(t, filepath.Join(dir, "salvage", "unfinished.json"), "the Open that reported removed the list")
}
