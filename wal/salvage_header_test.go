package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// headerDamageLog writes, under root, a log whose first segment was sealed
// after a single record, followed by groups of one to three records over
// two segments more at least, the last of which holds four groups or more.
// It closes the log as a crash would leave it (no clean mark) and returns
// the directory and what was acknowledged, with each record's group (the
// index of its group's last record), as buildLog does.
func headerDamageLog(t *testing.T, root string) (dir string, acked []entry, groupEnd []int) {
	t.Helper()
	dir = freshDir(t, root)
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	add := func(recs ...[]byte) {
		pos, err := l.Append(recs...)
		require.NoError(t, err)
		for j := range recs {
			acked = append(acked, entry{pos[j], recs[j]})
			groupEnd = append(groupEnd, len(acked)-1+len(recs)-1-j)
		}
	}
	// So large that no frame fits after it: the next append seals the
	// segment and goes on in the next one.
	add(fmt.Appendf(nil, "alone:%0950d", 0))
	for i := 0; ; i++ {
		var recs [][]byte
		for j := range 1 + i%3 {
			recs = append(recs, record(len(acked)+j))
		}
		add(recs...)
		last := acked[len(acked)-1].pos.Segment()
		groups := 0
		for k, e := range acked {
			if e.pos.Segment() == last && groupEnd[k] == k {
				groups++
			}
		}
		if last >= 3 && groups >= 4 {
			break
		}
	}
	require.NoError(t, l.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
	var inFirst int
	for _, e := range acked {
		if e.pos.Segment() == 1 {
			inFirst++
		}
	}
	require.Equal(t, 1, inFirst, "the first segment holds one record")
	return dir, acked, groupEnd
}

// Damage that takes a segment's header and the start of its first frame
// together (zeros from the file's first bytes into the frame, or a bit
// flipped in either) costs the records of that frame's group and nothing
// else, and Recovery.Salvaged reports just what was damaged: the header,
// and the span from the first frame to the next group. This holds for a
// sealed segment, for the last one (unsealed) and for a segment sealed
// after a single record. The salt the frames were written with is only
// in the header; a salvage that could not get it back from the frames
// would lose every record of the segment, and a run of zeros that stops
// in the first frame's length field (bytes 1 to 37, say) once made it so.
// Where the salt field and the only record of a segment are both gone,
// no frame gives the salt and the whole file is reported lost.
func TestSalvageOfDamageFromTheHeaderIntoTheFirstFrame(t *testing.T) {
	root := shmDir(t)
	dir, acked, groupEnd := headerDamageLog(t, root)
	lastSeq, _ := lastWritten(acked)
	type damage struct {
		from, to int  // bytes [from, to) zeroed, or
		flip     bool // one bit of the byte at from flipped (to is from+1)
	}
	var damages []damage
	const reach = segment.HeaderSize + segment.FrameHeaderSize + 8
	for _, from := range []int{0, 1} {
		for to := from + 1; to <= reach; to++ {
			damages = append(damages, damage{from: from, to: to})
		}
	}
	for at := range reach {
		damages = append(damages, damage{from: at, to: at + 1, flip: true})
	}
	// The salt is random, and so is every checksum: one segment in 256
	// has a first frame whose checksum starts with a zero byte, which
	// zeros over the header that stop just past it leave as it was. The
	// same log, its first and last segments salted so, has such first
	// frames every run.
	zeroFirst := copyInto(t, root, dir)
	for _, seq := range []uint32{1, lastSeq} {
		resalt(t, segFile(zeroFirst, seq), seq, func(sum uint32) bool { return sum&0xff == 0 })
	}
	for _, c := range []struct {
		name string
		dir  string
		seq  uint32
	}{
		{"a segment sealed after one record", dir, 1},
		{"a sealed segment", dir, 2},
		{"the last segment", dir, lastSeq},
		{"a segment sealed after one record, its first checksum starting with a zero byte", zeroFirst, 1},
		{"the last segment, its first checksum starting with a zero byte", zeroFirst, lastSeq},
	} {
		dir := c.dir
		path := segFile(dir, c.seq)
		orig, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, d := range damages {
			what := fmt.Sprintf("%s: bytes %d to %d zeroed", c.name, d.from, d.to)
			if d.flip {
				what = fmt.Sprintf("%s: a bit of byte %d flipped", c.name, d.from)
			}
			data := append([]byte(nil), orig...)
			if d.flip {
				data[d.from] ^= 1 << (d.from % 8)
			} else {
				clear(data[d.from:d.to])
			}
			// The records kept: all but those of a group with a frame the
			// damage changed (zeros over a byte that was zero change
			// nothing: a checksum starts with one in 256 segments, its
			// salt being random). The span lost runs from the header's
			// end to the end of the last such group.
			var want []entry
			lost := map[int]bool{}
			spanEnd := 0
			for i, e := range acked {
				from, to := max(d.from, e.pos.Offset()), min(d.to, e.pos.Offset()+segment.Size(len(e.rec)))
				if e.pos.Segment() == c.seq && from < to && !bytes.Equal(data[from:to], orig[from:to]) {
					lost[groupEnd[i]] = true
				}
			}
			for i, e := range acked {
				if !lost[groupEnd[i]] {
					want = append(want, e)
				} else {
					spanEnd = max(spanEnd, e.pos.Offset()+segment.Size(len(e.rec)))
				}
			}
			var spans [][2]int // offset, length
			switch {
			case d.from < segment.HeaderSize && c.seq == 1 && len(lost) > 0:
				// The salt field and the only record: no frame gives
				// the salt, the whole file is lost, and the segment is
				// sealed again at the header's end (a span inside the
				// whole file's, not listed again).
				spans = [][2]int{{0, len(orig)}}
			default:
				if d.from < segment.HeaderSize {
					spans = append(spans, [2]int{0, segment.HeaderSize})
				}
				if len(lost) > 0 {
					spans = append(spans, [2]int{segment.HeaderSize, spanEnd - segment.HeaderSize})
				}
			}

			cp := copyInto(t, root, dir)
			damaged := segFile(cp, c.seq)
			require.NoError(t, os.WriteFile(damaged, data, 0o600))

			l, err := Open(cp, Options{SegmentBytes: smallSeg, Salvage: true})
			require.NoError(t, err, what)
			requireEntriesOf(t, what, want, readAll(t, l))
			var got [][2]int
			for _, s := range l.Recovery().Salvaged {
				require.Equal(t, damaged, s.File, what)
				got = append(got, [2]int{s.Offset, s.Length})
			}
			require.Equal(t, spans, got, "%s: the spans salvaged", what)
			require.NoError(t, l.Close())

			// Repaired for good.
			l, err = Open(cp, Options{SegmentBytes: smallSeg})
			require.NoError(t, err, what)
			requireEntriesOf(t, what, want, readAll(t, l))
			require.NoError(t, l.Close())
			require.NoError(t, os.RemoveAll(cp))
		}
	}
}

// resalt rewrites the segment file at path, of segment seq, with the first
// salt from 1 up under which the checksum of its first frame satisfies
// want: the header, and the checksum of each of its frames (those the scan
// walks from the header, to the first that fails), seeded with that salt.
func resalt(t *testing.T, path string, seq uint32, want func(sum uint32) bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	table := crc32.MakeTable(crc32.Castagnoli)
	first, err := segment.Decode(data, segment.HeaderSize, seq)
	require.NoError(t, err)
	salt := uint32(1)
	for !want(crc32.Update(salt, table, data[first.Offset+4:first.End()])) {
		salt++
	}
	hdr := segment.EncodeHeader(seq, salt)
	var frames []segment.Frame
	for off := segment.HeaderSize; ; {
		f, err := segment.Decode(data, off, seq)
		if err != nil {
			break
		}
		frames = append(frames, f)
		off = f.End()
	}
	copy(data, hdr[:])
	for _, f := range frames {
		binary.LittleEndian.PutUint32(data[f.Offset:], crc32.Update(salt, table, data[f.Offset+4:f.End()]))
	}
	require.NoError(t, os.WriteFile(path, data, 0o600))
	f, err := segment.Decode(data, segment.HeaderSize, seq)
	require.NoError(t, err)
	require.True(t, want(binary.LittleEndian.Uint32(data[f.Offset:])))
}

// requireEntriesOf is requireEntries, saying which case failed.
func requireEntriesOf(t *testing.T, what string, want, got []entry) {
	t.Helper()
	require.Equal(t, len(want), len(got), "%s: record count", what)
	for i := range want {
		require.Equal(t, want[i].pos, got[i].pos, "%s: position of record %d", what, i)
		require.Equal(t, string(want[i].rec), string(got[i].rec), "%s: record %d", what, i)
	}
}

// shippedBody is a record body as a log that ships another log's frames
// carries them: filler, then, for each segment 2..40 of that other log,
// two consecutive records of it salted with that log's salt, each
// claiming the first 100 bytes of its segment durable.
func shippedBody() []byte {
	b := bytes.Repeat([]byte("z"), 700)
	for seq := uint32(2); seq <= 40; seq++ {
		b = segment.AppendFrame(b, seq, 0x0badc0de, 100, segment.KindRecord, segment.Full, []byte("shipped"))
		b = segment.AppendFrame(b, seq, 0x0badc0de, 100, segment.KindRecord, segment.Full, []byte("shipped"))
	}
	return b
}

// A reused segment file keeps the stale bytes of the segment it was, and
// the salt drawn when it is reused is what keeps frames written before
// (frames another log wrote, carried in a record's body) from verifying
// in it. When the first sector of the reused file is lost (the header
// and the segment's one record, zeroed), Salvage rewrites the header with
// the salt segment.RecoverSalt finds, which stays within the segment's
// own frames: the other log's frames of the same segment number in the
// stale record body must not give their salt, or the salvaged log would
// deliver them as records nobody appended.
func TestSalvagedHeaderOfAReusedFileNeverDeliversStaleFrames(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4096}
	l := mustOpen(t, dir, opts)
	body := shippedBody()
	for l.End().Segment() < 4 {
		mustAppend(t, l, body)
	}
	_, err := l.RemoveBelow(l.End())
	require.NoError(t, err)
	for i := 0; l.Stats().RecycledSegments == 0; i++ {
		require.Less(t, i, 2000, "no segment file was reused")
		mustAppend(t, l, []byte("x"))
	}
	last := l.End().Segment()
	require.LessOrEqual(t, last, uint32(40))
	require.NoError(t, l.Close())

	// The first sector of the last segment (a reused file) is lost: its
	// header and its one record.
	f, err := os.OpenFile(segFile(dir, last), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	opts.Salvage = true
	c, err := Open(dir, opts)
	require.NoError(t, err)
	defer c.Close()
	for _, e := range readAll(t, c) {
		if string(e.rec) == "shipped" {
			t.Fatalf("after salvage, segment %d (a reused file whose first sector was lost) delivers at %v a record nobody appended to this log: a frame another log wrote, stale bytes of the file's previous segment, taken for a frame of this one (Recovery: %+v)", last, e.pos, c.Recovery())
		}
	}
}
