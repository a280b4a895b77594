package broker_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
)

// An open that replays the log (a rebuild, or any open after a crash,
// from the last checkpoint) takes a queue's stream messages that a
// consumer leased out of the stream away from the queue's cursor, and
// marks them gone until the cursor gets there. A quiet queue's cursor may
// get there only after a busy queue's consumers emptied the whole table
// file, and a checkpoint dropped it: the cursor then jumps over the
// missing file. The store must still load its checkpoint at the next
// open: it once kept the gone message, below the cursor, in every
// checkpoint, which Load refused as damage, so that every open logged a
// rebuild and replayed the whole log until that queue's stream drained.
func TestAQuietQueuesCursorJumpingADroppedTableFileKeepsTheCheckpointLoadable(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) {
		o.Sync = broker.SyncNone
		broker.ManualMaintenance(o)
	})
	quiet := e.queue("quiet", policy())
	busy := e.queue("busy", policy())
	seqOf := func(m broker.MessageValue) uint64 {
		t.Helper()
		seq, ok := broker.MessageSeq(m.ID)
		require.True(t, ok)
		return seq
	}
	// busy's messages around quiet's first, g, fill the first table file;
	// quiet's next, h, is in the second.
	batch := make([][]byte, 4000)
	_, err := busy.PublishBatch(ctx(t), batch[:10])
	require.NoError(t, err)
	g := mustPublish(t, quiet, "g")
	require.Equal(t, uint64(0), index.ChunkOf(seqOf(g)))
	for {
		ms, err := busy.PublishBatch(ctx(t), batch)
		require.NoError(t, err)
		if index.ChunkOf(seqOf(ms[len(ms)-1])) > 0 {
			break
		}
	}
	h := mustPublish(t, quiet, "h")
	require.Equal(t, uint64(1), index.ChunkOf(seqOf(h)))

	ds := mustReceive(t, quiet, 1)
	require.Equal(t, "g", string(ds[0].Message.Payload))
	require.NoError(t, quiet.Ack(ctx(t), ds[0].Lease.Receipt))

	// An open that replays g's lease: a rebuild here.
	e.close()
	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	e.open()
	require.True(t, e.s.Recovery().IndexRebuilt)
	quiet = e.queue("quiet", policy())
	busy = e.queue("busy", policy())

	// busy's consumers empty the first table file, and a checkpoint drops
	// it; quiet's consumer is away.
	all, err := busy.Receive(ctx(t), 1<<20)
	require.NoError(t, err)
	for _, d := range all {
		if seq, _ := broker.MessageSeq(d.Message.ID); index.ChunkOf(seq) == 0 {
			require.NoError(t, busy.Ack(ctx(t), d.Lease.Receipt))
		}
	}
	require.NoError(t, e.s.Maintain())
	_, err = os.Stat(filepath.Join(e.dir, "index", "tbl-000000000000.idx"))
	require.ErrorIs(t, err, os.ErrNotExist, "the first table file is dropped")

	// quiet's consumer comes back: its cursor jumps to h.
	ds = mustReceive(t, quiet, 1)
	require.Equal(t, "h", string(ds[0].Message.Payload))

	var log bytes.Buffer
	e.opts.Logger = slog.New(slog.NewTextHandler(&log, nil))
	e.reopen()
	require.False(t, e.s.Recovery().IndexRebuilt, "a clean close and open rebuilt the index; it logged:\n%s", log.String())
}
