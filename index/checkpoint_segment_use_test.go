package index

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// segmentUseCheckpoint writes in dir a checkpoint whose log segment 1 is
// counted to hold the given messages, bytes and keys, the messages all
// the stream messages of queue q, whose stream [1, messages] counts them
// (and so do the table chunks). It holds no dedup key: a count of keys
// other than 0 loads only if refused for its bound or not at all.
func segmentUseCheckpoint(t *testing.T, dir string, messages, bytes, keys uint64) {
	t.Helper()
	var e encoder
	e.uvarint(0) // sealed segments
	e.string("") // secret
	e.uvarint(0) // orphans
	e.uvarint(1) // segment uses
	e.uvarint(1) // segment
	e.uvarint(messages)
	e.uvarint(bytes)
	e.uvarint(keys)
	e.uvarint(1)        // min seq
	e.uvarint(messages) // max seq
	// The stream's messages, 1 to messages, in table chunks of
	// ChunkEntries sequences each.
	var chunks [][2]uint64
	for c := uint64(0); messages > 0 && messages < math.MaxUint64 && c <= ChunkOf(messages); c++ {
		n := min(messages+1, (c+1)*ChunkEntries) - max(1, c*ChunkEntries)
		chunks = append(chunks, [2]uint64{c, n})
	}
	e.uvarint(uint64(len(chunks)))
	for _, c := range chunks {
		e.uvarint(c[0])
		e.uvarint(c[1])
	}
	e.uvarint(1)  // queues
	e.uvarint(1)  // id
	e.string("q") // name
	e.b = Policy{}.append(e.b)
	e.uvarint(1)        // cursor
	e.uvarint(messages) // stream max
	e.varint(0)         // stream enqueuedAt
	e.uvarint(messages) // stream count
	e.varint(math.MinInt64)
	e.uvarint(0) // gone
	e.uvarint(0) // messages
	e.uvarint(0) // keys
	next := min(messages, math.MaxUint64-2) + 1
	snap := &Snapshot{LogPos: wal.MakePosition(1, 64), NextSeq: next, body: e.b, taken: next}
	require.NoError(t, WriteCheckpoint(vfs.Default, dir, snap, nil))
}

// TestACheckpointCountingMoreInALogSegmentThanItCanHoldIsRefused: Load
// refuses as ErrDamaged a checkpoint that fails any bound. A log segment's
// records lie within its first 2^32-1 bytes (offsets are 32 bits, and the
// log opens no larger file), each of a frame of at least 18 bytes: the
// bytes, messages and keys a checkpoint counts in one segment cannot pass
// what that leaves. Loaded, a byte count of 2^63 or more was negative (an
// int64 of the uvarint), and any count past the bound named a segment no
// log holds; what a segment's use says decides whether the segment may be
// removed, and how much a copy forward of it costs.
func TestACheckpointCountingMoreInALogSegmentThanItCanHoldIsRefused(t *testing.T) {
	load := func(t *testing.T, messages, bytes, keys uint64) (SegmentUse, error) {
		t.Helper()
		dir := t.TempDir()
		segmentUseCheckpoint(t, dir, messages, bytes, keys)
		x, _, err := Load(vfs.Default, dir)
		if err != nil {
			return SegmentUse{}, err
		}
		defer x.Table.Close()
		return x.SegmentUses()[1], nil
	}

	// The most a segment holds passes the bounds. (This checkpoint's
	// stream has no table files, which would take tens of thousands of
	// chunks: Load refuses it for that, after every count was read.)
	_, err := load(t, maxSegmentRecords, maxSegmentRecordBytes, 0)
	require.ErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, "no table file is named", "the most a segment holds is refused for its bounds")
	require.Equal(t, int64(1<<32-1-32), int64(maxSegmentRecordBytes), "the bound: a 32-bit file less its header")

	for _, c := range []struct {
		name                  string
		messages, bytes, keys uint64
		field                 string
	}{
		{"bytes one past the bound", 1, maxSegmentRecordBytes + 1, 0, "segment bytes"},
		{"bytes negative as an int64", 1, math.MaxInt64 + 1, 0, "segment bytes"},
		{"bytes of 2^64-1", 1, math.MaxUint64, 0, "segment bytes"},
		{"messages one past the bound", maxSegmentRecords + 1, 100, 0, "segment messages"},
		{"messages of 2^64-1", math.MaxUint64, 100, 0, "segment messages"},
		{"keys one past the bound", 1, 100, maxSegmentRecords + 1, "segment keys"},
		{"keys negative as an int", 1, 100, math.MaxInt64 + 1, "segment keys"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, err := load(t, c.messages, c.bytes, c.keys)
			if err == nil {
				t.Fatalf("loaded as %+v, not refused as ErrDamaged", u)
			}
			require.ErrorIs(t, err, ErrDamaged)
			require.ErrorContains(t, err, c.field)
		})
	}
}
