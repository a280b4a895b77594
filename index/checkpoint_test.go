package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

func dumpAll(x *Index, now int64) string {
	s := ""
	for id := uint32(1); x.QueueByID(id) != nil; id++ {
		s += x.QueueByID(id).Dump(now)
	}
	return s
}

// checkpointAt flushes x's table and writes its checkpoint to dir.
func checkpointAt(t *testing.T, x *Index, dir string, pos wal.Position) {
	t.Helper()
	snap, err := x.Snapshot(pos, map[uint32]int{1: 4096})
	require.NoError(t, err)
	_, err = x.Table.Flush(true)
	require.NoError(t, err)
	require.NoError(t, WriteCheckpoint(vfs.Default, dir, snap, x.Table.Chunks()))
}

// hintingCheckpoint returns a directory holding the checkpoint of an empty
// index at 2:100 that names segment 1 sealed at 4096, and checks that
// LogHints passes both on.
func hintingCheckpoint(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	defer x.Table.Close()
	checkpointAt(t, x, dir, wal.MakePosition(2, 100))
	sealed, pos := LogHints(vfs.Default, dir)
	require.Equal(t, map[uint32]int{1: 4096}, sealed)
	require.Equal(t, wal.MakePosition(2, 100), pos)
	return dir
}

// Loading a checkpoint and applying the events after it gives the state
// that applying every event from the start gives.
func TestCheckpointThenReplayEqualsFullReplay(t *testing.T) {
	rng := newRand(t, 2)
	for round := 0; round < 40; round++ {
		dir := t.TempDir()
		live, err := Rebuild(vfs.Default, dir)
		require.NoError(t, err)
		require.NoError(t, live.Apply(0, &Event{Kind: KindMeta, Secret: make([]byte, SecretSize)}))
		require.NoError(t, live.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 2}}))
		events := randomEvents(rng, 80)
		cut := rng.IntN(len(events))
		for i, e := range events[:cut] {
			require.NoError(t, live.Apply(wal.MakePosition(1, 32+i), e))
		}
		checkpointAt(t, live, dir, wal.MakePosition(1, 32+cut))
		for i, e := range events[cut:] {
			require.NoError(t, live.Apply(wal.MakePosition(1, 32+cut+i), e))
		}

		loaded, from, err := Load(vfs.Default, dir)
		require.NoError(t, err)
		require.Equal(t, wal.MakePosition(1, 32+cut), from)
		for i, e := range events[cut:] {
			require.NoError(t, loaded.Apply(wal.MakePosition(1, 32+cut+i), e))
		}
		full := declared(t)
		for i, e := range events {
			require.NoError(t, full.Apply(wal.MakePosition(1, 32+i), e))
		}
		require.Equal(t, dumpAll(full, 50), dumpAll(loaded, 50), "round %d cut %d", round, cut)
		require.Equal(t, dumpAll(full, 50), dumpAll(live, 50), "round %d", round)
		require.Equal(t, full.SegmentUses(), loaded.SegmentUses())
		require.Equal(t, full.LiveChunks(), loaded.LiveChunks())
		require.Equal(t, full.PeekNextSeq(), loaded.PeekNextSeq())
		require.NoError(t, live.Table.Close())
		require.NoError(t, loaded.Table.Close())
	}
}

// checkpointOfTen writes a checkpoint of one queue holding messages 1 to
// 10, all in the stream (table chunk 0), closes the index and returns its
// directory.
func checkpointOfTen(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	for i := 1; i <= 10; i++ {
		require.NoError(t, x.Apply(wal.MakePosition(1, 32*i), pub(uint64(i), int64(i), "")))
	}
	checkpointAt(t, x, dir, wal.MakePosition(1, 400))
	require.NoError(t, x.Table.Close())
	return dir
}

// overwriteChunk writes b at offset off of table chunk 0 in dir.
func overwriteChunk(t *testing.T, dir string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, chunkName(0)), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// Every damaged checkpoint is refused with ErrDamaged, never loaded.
func TestDamagedCheckpointIsRefused(t *testing.T) {
	dir := checkpointOfTen(t)
	path := filepath.Join(dir, checkpointName)
	good, err := os.ReadFile(path)
	require.NoError(t, err)
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, y.Table.Close())

	for i := 0; i < len(good); i++ {
		bad := append([]byte(nil), good...)
		bad[i] ^= 0x10
		require.NoError(t, os.WriteFile(path, bad, 0o600))
		_, _, err := Load(vfs.Default, dir)
		if i >= 8 && i < 12 {
			// The version, outside the checksum, now names a later one:
			// a later build's checkpoint, refused, not rebuilt over.
			require.ErrorIs(t, err, ErrLaterVersion, "flipped byte %d", i)
			require.NotErrorIs(t, err, ErrDamaged, "flipped byte %d", i)
			continue
		}
		require.ErrorIs(t, err, ErrDamaged, "flipped byte %d", i)
	}
	// A version below this build's is damage (no earlier one was written).
	bad := append([]byte(nil), good...)
	bad[8] = 0
	require.NoError(t, os.WriteFile(path, bad, 0o600))
	_, _, err = Load(vfs.Default, dir)
	require.ErrorIs(t, err, ErrDamaged)
	for _, n := range []int{0, 10, checkpointHeader, len(good) - 1} {
		require.NoError(t, os.WriteFile(path, good[:n], 0o600))
		_, _, err := Load(vfs.Default, dir)
		require.ErrorIs(t, err, ErrDamaged, "cut to %d bytes", n)
	}
	require.NoError(t, os.WriteFile(path, good, 0o600))
	// A chunk file the checkpoint needs, missing or cut short.
	chunk := filepath.Join(dir, chunkName(0))
	require.NoError(t, os.Truncate(chunk, 100))
	_, _, err = Load(vfs.Default, dir)
	require.ErrorIs(t, err, ErrDamaged)
	require.NoError(t, os.Remove(chunk))
	_, _, err = Load(vfs.Default, dir)
	require.ErrorIs(t, err, ErrDamaged)
	require.NoError(t, os.Remove(path))
	_, _, err = Load(vfs.Default, dir)
	require.True(t, errors.Is(err, os.ErrNotExist))
}

// loadAndLeaseAll loads dir's checkpoint, requires it to load undamaged,
// and leases queue q's messages one by one as NextReady gives them,
// returning their sequences in that order.
func loadAndLeaseAll(t *testing.T, dir string) (*Index, []uint64) {
	t.Helper()
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = y.Table.Close() })
	q := y.Queue("q")
	require.NoError(t, y.Damaged())
	var got []uint64
	for m := q.NextReady(); m != nil; m = q.NextReady() {
		got = append(got, m.Seq)
		q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: m.Seq, Deliveries: 1, Time: 99})
	}
	return y, got
}

// A damaged table entry is noticed where the stream reaches it, and the
// stream ends there: the messages after it are not handed out first.
func TestDamagedEntryMarksTheIndexDamaged(t *testing.T) {
	dir := checkpointOfTen(t)
	overwriteChunk(t, dir, 3*EntrySize+5, []byte{0xff})

	y, got := loadAndLeaseAll(t, dir)
	require.ErrorIs(t, y.Damaged(), ErrDamaged)
	require.Equal(t, []uint64{1, 2}, got, "the stream ends at the damaged entry: nothing after it is taken for the oldest message; the caller must rebuild")
}

// A table entry lost whole (zeros, which read as no entry) is noticed
// where the stream ends short of the count of waiting messages the
// checkpoint gave the queue.
func TestALostEntryMarksTheIndexDamaged(t *testing.T) {
	dir := checkpointOfTen(t)
	overwriteChunk(t, dir, 7*EntrySize, make([]byte, EntrySize)) // zeros: no entry

	y, got := loadAndLeaseAll(t, dir)
	require.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 8, 9, 10}, got)
	require.ErrorIs(t, y.Damaged(), ErrDamaged, "the queue counted ten waiting messages and found nine")
	require.ErrorContains(t, y.Damaged(), "queue q")
}

// A large file in the checkpoint's place is judged by its header before
// anything is read: one that is not a checkpoint, or whose length its
// header does not give, costs no buffer of its size (here a sparse 8 GiB
// file, which would otherwise be allocated and read whole).
func TestALargeFileThatIsNotACheckpointIsRefusedUnread(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  func() []byte
		want string
	}{
		{"no magic", func() []byte { return []byte("not a checkpoint at all") }, "no checkpoint header"},
		{"wrong length", func() []byte {
			h := make([]byte, checkpointHeader)
			copy(h, checkpointMagic[:])
			binary.LittleEndian.PutUint32(h[8:], checkpointVersion)
			binary.LittleEndian.PutUint64(h[16:], 100)
			return h
		}, "body of 100 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, checkpointName)
			require.NoError(t, os.WriteFile(path, tc.hdr(), 0o600))
			require.NoError(t, os.Truncate(path, 8<<30))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, _, err := Load(vfs.Default, dir)
			runtime.ReadMemStats(&after)
			require.ErrorIs(t, err, ErrDamaged)
			want := tc.want
			if math.MaxInt == math.MaxInt32 && tc.name == "wrong length" {
				want = "more than this build can hold" // refused for its size before its header is read
			}
			require.ErrorContains(t, err, want)
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated to refuse it")
		})
	}
}

// ReadCheckpointLog gives what LogHints gives and the store secret the
// checkpoint holds, which ties it to its log; for a checkpoint marked
// suspect too, where LogHints gives nothing; and nothing for a checkpoint
// that fails its checksum.
func TestReadCheckpointLogGivesTheSecretWithTheHints(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	defer x.Table.Close()
	secret := bytes.Repeat([]byte{5}, SecretSize)
	require.NoError(t, x.Apply(0, &Event{Kind: KindMeta, Secret: secret}))
	checkpointAt(t, x, dir, wal.MakePosition(2, 100))

	cl, ok := ReadCheckpointLog(vfs.Default, dir)
	require.True(t, ok)
	require.Equal(t, CheckpointLog{Sealed: map[uint32]int{1: 4096}, Pos: wal.MakePosition(2, 100), Secret: secret}, cl)

	require.NoError(t, MarkSuspect(vfs.Default, dir))
	sealed, _ := LogHints(vfs.Default, dir)
	require.Nil(t, sealed)
	again, ok := ReadCheckpointLog(vfs.Default, dir)
	require.True(t, ok)
	require.Equal(t, cl, again)

	path := filepath.Join(dir, checkpointName)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	raw[len(raw)-1] ^= 1
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	_, ok = ReadCheckpointLog(vfs.Default, dir)
	require.False(t, ok)
}
