package index

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/crc32"
	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestACheckpointKeepsWhatNoDumpShows: besides the queues' messages, a
// checkpoint keeps the orphan count and each queue's latest clock reading:
// a clock behind the reading a checkpoint loaded still evicts nothing.
func TestACheckpointKeepsWhatNoDumpShows(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 100, "a")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), &Event{Kind: KindEvict, Queue: 1, Time: 900, Window: 1 << 62}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 300), &Event{Kind: KindAck, Queue: 1, Seq: 40}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 400), &Event{Kind: KindAck, Queue: 9, Seq: 41}))
	require.Equal(t, 2, x.Orphans)
	checkpointAt(t, x, dir, wal.MakePosition(1, 500))
	require.NoError(t, x.Table.Close())

	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	defer y.Table.Close()
	require.Equal(t, 2, y.Orphans)
	q := y.Queue("q")
	require.Equal(t, int64(900), q.LastEvicts())
	require.False(t, q.EvictSeen(800, 10), "a clock behind the loaded reading evicted")
	_, _, ok := q.Seen("a")
	require.True(t, ok)
}

// rewriteCheckpoint replaces the body of dir's checkpoint with what change
// makes of it, with a header that verifies.
func rewriteCheckpoint(t *testing.T, dir string, change func(body []byte) []byte) {
	t.Helper()
	path := filepath.Join(dir, checkpointName)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	hdr := data[:checkpointHeader:checkpointHeader]
	body := change(append([]byte(nil), data[checkpointHeader:]...))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(len(body)))
	binary.LittleEndian.PutUint32(hdr[12:], crc32.Update(crc32.Checksum(hdr[16:], castagnoli), castagnoli, body))
	require.NoError(t, os.WriteFile(path, append(hdr, body...), 0o600))
}

// TestACheckpointWithBytesPastItsLayoutIsRefused: a body that verifies but
// holds more than the layout reads was not written by this code.
func TestACheckpointWithBytesPastItsLayoutIsRefused(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 100, "")))
	checkpointAt(t, x, dir, wal.MakePosition(1, 200))
	require.NoError(t, x.Table.Close())

	rewriteCheckpoint(t, dir, func(body []byte) []byte { return body })
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err, "the rewrite itself")
	require.NoError(t, y.Table.Close())

	rewriteCheckpoint(t, dir, func(body []byte) []byte { return append(body, 0) })
	_, _, err = Load(vfs.Default, dir)
	require.ErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, "trailing")
}

// TestAWrittenCheckpointSurvivesAPowerLoss: once WriteCheckpoint returns,
// the checkpoint, and the table files its Flush synced, are durable: a
// power loss leaves an index that loads to the same state.
func TestAWrittenCheckpointSurvivesAPowerLoss(t *testing.T) {
	dir := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	x, err := Rebuild(cfs, dir)
	require.NoError(t, err)
	defer x.Table.Close()
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	for i := 1; i <= 10; i++ {
		require.NoError(t, x.Apply(wal.MakePosition(1, 32*i), pub(uint64(i), int64(i), "")))
	}
	require.NoError(t, x.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 4, Deliveries: 1, Time: 99, Nonce: 5}))
	snap, err := x.Snapshot(wal.MakePosition(1, 400), map[uint32]int{1: 4096})
	require.NoError(t, err)
	_, err = x.Table.Flush(true)
	require.NoError(t, err)
	require.NoError(t, WriteCheckpoint(cfs, dir, snap, x.Table.Chunks()))

	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
	y, from, err := Load(vfs.Default, clone)
	require.NoError(t, err, "the checkpoint did not survive a power loss")
	defer y.Table.Close()
	require.Equal(t, wal.MakePosition(1, 400), from)
	require.Equal(t, dumpAll(x, 50), dumpAll(y, 50))
}
