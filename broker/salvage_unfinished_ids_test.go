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
