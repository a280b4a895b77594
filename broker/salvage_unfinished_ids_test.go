package broker_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// The checkpoint a salvaging Open consults knows the next sequence, and
// so every ID handed out before it, those of messages it no longer holds
// too (acknowledged before it was taken). When the salvage skipped the
// records of the last of them, the log no longer tells that they were
// handed out, and the Open raises the next sequence past them. An Open
// that fails after its rebuild removed the checkpoint leaves the salvage
// unfinished, and the Open that finishes it has only the list it kept in
// salvage/lost.json to go by: it must keep the next sequence too, or the
// finishing Open hands those IDs out again.
func TestAnUnfinishedSalvageHandsOutNoIDTheCheckpointKnewTaken(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = 16384; broker.ManualMaintenance(o) })
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 500 })
	jobs, tail := e.queue("jobs", pol), e.queue("tail", pol)
	taken := map[string]bool{}
	for range 60 {
		taken[mustPublish(t, jobs, strings.Repeat("x", 300)).ID] = true
	}
	// The last IDs handed out: acknowledged, so the checkpoint holds
	// none of these messages, only its next sequence past them.
	for range 10 {
		taken[mustPublish(t, tail, "TAILMARK"+strings.Repeat("t", 292)).ID] = true
	}
	for _, d := range mustReceive(t, tail, 10) {
		require.NoError(t, tail.Ack(ctx(t), d.Lease.Receipt))
	}
	require.NoError(t, e.s.Maintain())
	e.close()

	// Damage the log from the first of the last publishes on.
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
	require.NoError(t, err)
	damaged := false
	for _, seg := range slices.Backward(segs) {
		data, err := os.ReadFile(seg)
		require.NoError(t, err)
		if i := bytes.Index(data, []byte("TAILMARK")); i >= 0 {
			require.NoError(t, zeroFrom(seg, int64(i-8)))
			damaged = true
			break
		}
	}
	require.True(t, damaged, "setup: the last publishes are in a segment")

	// The salvaging Open fails after its rebuild removed the checkpoint
	// (a table file it removes next cannot be).
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: "tbl-", Times: 1})
	salvage := e.opts
	salvage.Salvage, salvage.FS = true, fs
	_, err = broker.Open(e.dir, salvage)
	require.ErrorIs(t, err, syscall.EIO)
	require.Positive(t, fs.Injected(vfs.OpRemove), "the fault was met")
	require.NoFileExists(t, filepath.Join(e.dir, "index", "checkpoint"), "setup: the failed Open removed the checkpoint")

	salvage.FS = nil
	s, err := broker.Open(e.dir, salvage)
	require.NoError(t, err)
	e.s = s
	require.Positive(t, s.Recovery().SalvagedSpans)
	m := mustPublish(t, e.queue("jobs", pol), "new")
	require.False(t, taken[m.ID], "the Open that finished an unfinished salvage handed out ID %s again (%v)", m.ID, s.Recovery())
}

// A salvage that skipped the log's only records of a queue's declaration
// and of the store's secret (the first records of its only segment) takes
// them from the checkpoint it consults. An Open that fails after its
// rebuild removed that checkpoint must leave them to the Open that
// finishes the salvage (in salvage/lost.json), as it leaves the lost
// messages: that Open knew no queue, held none of the messages the log
// kept, reported none of them lost, and refused the receipts of the leases
// it kept.
func TestAnUnfinishedSalvageKeepsTheDeclarationsAndSecretItSkipped(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { broker.ManualMaintenance(o) })
	q := e.queue("jobs", policy())
	for range 5 {
		mustPublish(t, q, "before")
	}
	require.NoError(t, e.s.Maintain())
	for range 5 {
		mustPublish(t, q, "after")
	}
	leased := mustReceiveOne(t, q)
	e.close()
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
	require.NoError(t, err)
	// The segment's first records: the meta event and the declaration.
	f, err := os.OpenFile(segs[0], os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, 60), 40)
	require.NoError(t, f.Close())
	require.NoError(t, err)

	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: "tbl-", Times: 1})
	salvage := e.opts
	salvage.Salvage, salvage.FS = true, fs
	_, err = broker.Open(e.dir, salvage)
	require.ErrorIs(t, err, syscall.EIO)
	require.NoFileExists(t, filepath.Join(e.dir, "index", "checkpoint"), "setup: the failed Open removed the checkpoint")

	salvage.FS = nil
	s, err := broker.Open(e.dir, salvage)
	require.NoError(t, err)
	e.s = s
	require.Positive(t, s.Recovery().SalvagedSpans)
	require.Equal(t, []string{"jobs"}, s.Queues(), "the queue the salvage took the declaration of (%v)", s.Recovery())
	st := e.queue("jobs", policy()).Stats()
	require.Equal(t, 9, st.Ready, "%+v", st)
	require.Equal(t, 1, st.Leased, "%+v", st)
	require.NoError(t, e.queue("jobs", policy()).Ack(ctx(t), leased.Lease.Receipt), "the receipt of a lease the log kept")
}
