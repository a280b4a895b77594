package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

const smallSeg = 1024

// buildLog writes a small multi-segment log of single and grouped appends,
// closes it cleanly and returns what was acknowledged, with the group each
// record belongs to (the index of its group's last record).
func buildLog(t *testing.T) (dir string, acked []entry, groupEnd []int) {
	t.Helper()
	dir = t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	for i := 0; len(acked) < 60; i++ {
		n := 1 + i%3
		var recs [][]byte
		for j := 0; j < n; j++ {
			recs = append(recs, record(len(acked)+j))
		}
		pos, err := l.Append(recs...)
		require.NoError(t, err)
		for j := range recs {
			acked = append(acked, entry{pos[j], recs[j]})
			groupEnd = append(groupEnd, len(acked)-1+n-1-j)
		}
	}
	require.GreaterOrEqual(t, l.Stats().Segments, 3)
	require.NoError(t, l.Close())
	// The tests damage the directory as a crash would leave it: without
	// the mark a clean Close writes (with it, a cut tail is lost synced
	// data, which TestCleanMarkRefusesACutTail covers).
	require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
	return dir, acked, groupEnd
}

// After a clean Close the log's end is known: a last segment cut before it
// lost records that were synced, and Open refuses it naming the file.
func TestCleanMarkRefusesACutTail(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	es := appendRecords(t, l, 0, 10)
	require.NoError(t, l.Close())
	last := es[len(es)-1].pos
	path := segFile(dir, last.Segment())
	require.NoError(t, os.Truncate(path, int64(last.Offset())))
	_, err := Open(dir, Options{SegmentBytes: smallSeg})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, path)
	require.NoError(t, os.Remove(path))
	_, err = Open(dir, Options{SegmentBytes: smallSeg})
	require.ErrorIs(t, err, ErrCorrupt, "the segment the log ended in is gone")
	l, err = Open(dir, Options{SegmentBytes: smallSeg, Salvage: true})
	require.NoError(t, err, "salvage opens what is left")
	require.NoError(t, l.Close())
}

// survivors returns the acknowledged records that a cut of the last
// segment at byte c keeps: every record of earlier segments, and the
// records of the last one whose whole group ends at or before c.
func survivors(acked []entry, groupEnd []int, last uint32, c int) []entry {
	var out []entry
	for i, e := range acked {
		g := acked[groupEnd[i]]
		if e.pos.Segment() < last || g.pos.Offset()+segment.Size(len(g.rec)) <= c {
			out = append(out, e)
		}
	}
	return out
}

// lastWritten returns the last segment's sequence and the end of its frames.
func lastWritten(acked []entry) (uint32, int) {
	e := acked[len(acked)-1]
	return e.pos.Segment(), e.pos.Offset() + segment.Size(len(e.rec))
}

// TestEveryCutOfTheTailReopensToTheAcknowledgedPrefix cuts the last segment
// at every byte of its frames, three ways (the rest zeroed, as in
// preallocated space; the file truncated; the rest overwritten with noise),
// and checks that the log reopens to exactly the records whose whole group
// lies before the cut, then goes on appending and reopens again without any
// stray byte of the cut-off tail coming back.
func TestEveryCutOfTheTailReopensToTheAcknowledgedPrefix(t *testing.T) {
	dir, acked, groupEnd := buildLog(t)
	last, end := lastWritten(acked)
	rng := seededRand(t)
	cuts := []struct {
		name string
		cut  func(b []byte, c int) []byte
	}{
		{"zeroed", func(b []byte, c int) []byte { clear(b[c:]); return b }},
		{"truncated", func(b []byte, c int) []byte { return b[:c] }},
		{"noise", func(b []byte, c int) []byte {
			for i := c; i < end+64 && i < len(b); i++ {
				b[i] ^= byte(1 + rng.IntN(255)) // never the byte that was there
			}
			return b
		}},
	}
	for _, how := range cuts {
		for c := segment.HeaderSize; c <= end; c++ {
			d := copyDir(t, dir)
			path := segFile(d, last)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, how.cut(b, c), 0o600))

			want := survivors(acked, groupEnd, last, c)
			l, err := Open(d, Options{SegmentBytes: smallSeg})
			require.NoError(t, err, "%s cut at %d", how.name, c)
			requireEntries(t, want, readAll(t, l))
			more := appendRecords(t, l, 1000, 3)
			require.NoError(t, l.Close())

			l = mustOpen(t, d, Options{SegmentBytes: smallSeg})
			requireEntries(t, append(want, more...), readAll(t, l))
			require.Nil(t, l.Recovery().TornTail, "%s cut at %d: a torn tail after a clean reopen", how.name, c)
			require.NoError(t, l.Close())
			require.NoError(t, os.RemoveAll(d))
		}
	}
}

// flipByte flips one bit of the byte at off of file path.
func flipByte(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[off] ^= 0x10
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

func TestCorruptionIsRefusedWithFileAndOffset(t *testing.T) {
	dir, acked, _ := buildLog(t)
	last, _ := lastWritten(acked)
	cases := []struct {
		name   string
		victim entry // a record whose frame is damaged
	}{
		{"first segment", acked[2]},
		{"middle segment", firstIn(acked, 2)},
		// Damage to an early batch of the last segment is proved by the
		// later batches' synced offsets.
		{"last segment, early batch", firstIn(acked, last)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := copyDir(t, dir)
			path := segFile(d, tc.victim.pos.Segment())
			flipByte(t, path, tc.victim.pos.Offset()+segment.FrameHeaderSize)
			_, err := Open(d, Options{SegmentBytes: smallSeg})
			require.ErrorIs(t, err, ErrCorrupt)
			var ce *CorruptionError
			require.True(t, errors.As(err, &ce))
			require.Equal(t, path, ce.File)
			require.Equal(t, tc.victim.pos.Offset(), ce.Offset)
			require.Contains(t, err.Error(), path)
			require.ErrorIs(t, err, segment.ErrChecksum)
			// The offset is said once: the segment's error began with it
			// too ("at offset 93: offset 93: checksum mismatch").
			require.Equal(t, 1, strings.Count(err.Error(), fmt.Sprintf("offset %d", ce.Offset)), "%v", err)
		})
	}
}

// Damage to a segment's seal and to the first record of the segment after
// it is refused, naming the file and offset. The later segment's scan
// stops at its first frame, so it reads as holding no record; that and the
// unsealed segment before it are what a crash inside a rotation leaves,
// but the later frames prove the damaged one was synced: the segment is
// not an empty one to remove, and removing it dropped every record in it.
func TestDamageToASealAndToTheNextSegmentIsRefused(t *testing.T) {
	dir, acked, _ := buildLog(t)
	last, _ := lastWritten(acked)
	victim := firstIn(acked, last)
	var sealAt int // where the seal of the segment before the last starts
	for i, e := range acked {
		if e.pos == victim.pos {
			prev := acked[i-1]
			require.Equal(t, last-1, prev.pos.Segment())
			sealAt = prev.pos.Offset() + segment.Size(len(prev.rec))
			break
		}
	}
	flipByte(t, segFile(dir, last-1), sealAt+segment.FrameHeaderSize-1) // the seal's type byte
	path := segFile(dir, last)
	flipByte(t, path, victim.pos.Offset()+segment.FrameHeaderSize)
	requireRefused := func(what string) {
		t.Helper()
		l, err := Open(dir, Options{SegmentBytes: smallSeg})
		if err == nil {
			got := readAll(t, l)
			require.NoError(t, l.Close())
			t.Fatalf("%s: opened with %d of %d records (removed %v)", what, len(got), len(acked), l.Recovery().RemovedEmpty)
		}
		require.ErrorIs(t, err, ErrCorrupt, what)
		_, err = os.Stat(path)
		require.NoError(t, err, "%s: the damaged segment is still there", what)
	}
	requireRefused("frames after the damaged one")

	// The damaged frame the last thing in its segment: its scan ends torn,
	// not corrupt, yet a segment a rotation left empty holds no frame at
	// all, damaged or not.
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	clear(b[victim.pos.Offset()+segment.Size(len(victim.rec)):])
	require.NoError(t, os.WriteFile(path, b, 0o600))
	requireRefused("the damaged frame alone")
}

// Damage to a segment's seal, and to the only frame of the segment after
// it so that the frame names another segment (its sequence field) or none
// (its header zeroed): the later segment's scan then ends clean with no
// record, as that of the empty segment a crash inside a rotation leaves
// after an unsealed one. But nothing is written to that new segment
// before the old one's seal is durable, so its bytes past the header are
// what the preparer left: zeros, or, in a reused file, the frames of the
// segment it was. These are neither. Open refuses the log naming the
// segment and its first frame, and Salvage copies the file aside and
// reports that frame lost, keeping every other record. The segment used
// to be removed as empty, with or without Salvage, without a copy or a
// word.
func TestALastSegmentWhoseOnlyFrameWasDamagedIsRefusedNotRemoved(t *testing.T) {
	for _, c := range []struct {
		file   string // what the last segment's file was before: "new" (zeros) or "reused"
		damage string
	}{
		{"new", "sequence field"}, {"new", "frame header zeroed"},
		{"reused", "sequence field"}, {"reused", "frame header zeroed"},
	} {
		t.Run(c.file+"/"+c.damage, func(t *testing.T) {
			dir, acked, _ := buildLog(t)
			last, _ := lastWritten(acked)
			victim := firstIn(acked, last)
			i := indexOf(acked, victim.pos)
			prev := acked[i-1]
			require.Equal(t, last-1, prev.pos.Segment())
			sealAt := prev.pos.Offset() + segment.Size(len(prev.rec))
			flipByte(t, segFile(dir, last-1), sealAt+segment.FrameHeaderSize-1) // the seal's type byte

			path := segFile(dir, last)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			frameEnd := victim.pos.Offset() + segment.Size(len(victim.rec))
			if c.file == "reused" {
				// Written over the frames of segment 1, whose file the
				// segment reused.
				former, err := os.ReadFile(segFile(dir, 1))
				require.NoError(t, err)
				require.Len(t, former, len(b))
				copy(b[frameEnd:], former[frameEnd:])
				require.True(t, segment.Unwritten(append(b[:segment.HeaderSize:segment.HeaderSize], former[segment.HeaderSize:]...), last),
					"the file as the preparer left it reads as nothing written")
			} else {
				clear(b[frameEnd:]) // the victim is the segment's only frame
			}
			at := victim.pos.Offset()
			if c.damage == "sequence field" {
				b[at+8] ^= 0x10
			} else {
				clear(b[at : at+segment.FrameHeaderSize])
			}
			require.NoError(t, os.WriteFile(path, b, 0o600))
			r, err := segment.Scan(b, last, false, func(segment.Frame) error { return nil })
			require.NoError(t, err)
			require.Equal(t, segment.EndClean, r.Tail, "the scan finds no frame: the case a removal took")
			require.Zero(t, r.Records)

			l, err := Open(dir, Options{SegmentBytes: smallSeg})
			if err == nil {
				got := readAll(t, l)
				rec := l.Recovery()
				require.NoError(t, l.Close())
				t.Fatalf("opened with %d of %d records, the record at %v is gone; removed as empty %v", len(got), len(acked), victim.pos, rec.RemovedEmpty)
			}
			require.ErrorIs(t, err, ErrCorrupt)
			var ce *CorruptionError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, path, ce.File)
			require.Equal(t, segment.HeaderSize, ce.Offset)
			now, err := os.ReadFile(path)
			require.NoError(t, err, "the damaged segment is still there")
			require.Equal(t, b, now)

			l = mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
			rec := l.Recovery()
			requireEntries(t, acked[:i], readAll(t, l))
			more := appendRecords(t, l, 900, 3)
			require.NoError(t, l.Close())
			require.Empty(t, rec.RemovedEmpty)
			var lost *Damage
			for _, d := range rec.Salvaged {
				if d.File == path {
					lost = &d
				}
			}
			require.NotNil(t, lost, "the lost frame is reported: %v", rec.Salvaged)
			require.Equal(t, segment.HeaderSize, lost.Offset)
			require.GreaterOrEqual(t, lost.Length, segment.Size(len(victim.rec)))
			require.NotNil(t, lost.Cause)
			copied, err := os.ReadFile(lost.CopiedTo)
			require.NoError(t, err)
			require.Equal(t, b, copied, "the damaged file is copied aside as it was")

			l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
			defer l.Close()
			requireEntries(t, append(slices.Clone(acked[:i]), more...), readAll(t, l))
		})
	}
}

// firstIn returns the first acknowledged record of segment seq.
func firstIn(acked []entry, seq uint32) entry {
	for _, e := range acked {
		if e.pos.Segment() == seq {
			return e
		}
	}
	panic("no record in segment")
}

func TestSalvageKeepsEveryIntactRecord(t *testing.T) {
	dir, acked, groupEnd := buildLog(t)
	last, _ := lastWritten(acked)
	for _, seq := range []uint32{1, 2, last} {
		victim := firstIn(acked, seq)
		d := copyDir(t, dir)
		path := segFile(d, seq)
		flipByte(t, path, victim.pos.Offset()+segment.FrameHeaderSize+1)
		damaged, err := os.ReadFile(path)
		require.NoError(t, err)

		l, err := Open(d, Options{SegmentBytes: smallSeg, Salvage: true})
		require.NoError(t, err)
		// Lost: the damaged record's whole group, nothing else.
		var want []entry
		vi := indexOf(acked, victim.pos)
		for i, e := range acked {
			if groupEnd[i] != groupEnd[vi] {
				want = append(want, e)
			}
		}
		requireEntries(t, want, readAll(t, l))
		rec := l.Recovery()
		require.Len(t, rec.Salvaged, 1)
		require.Equal(t, path, rec.Salvaged[0].File)
		require.Equal(t, victim.pos.Offset(), rec.Salvaged[0].Offset)
		copied, err := os.ReadFile(rec.Salvaged[0].CopiedTo)
		require.NoError(t, err)
		require.Equal(t, damaged, copied, "the damaged file is copied aside unchanged")
		require.Equal(t, filepath.Join(d, "salvage"), filepath.Dir(rec.Salvaged[0].CopiedTo))
		require.NoError(t, l.Close())

		// Repaired for good: an ordinary open now succeeds.
		l = mustOpen(t, d, Options{SegmentBytes: smallSeg})
		requireEntries(t, want, readAll(t, l))
		require.NoError(t, l.Close())
	}
}

func indexOf(es []entry, p Position) int {
	for i, e := range es {
		if e.pos == p {
			return i
		}
	}
	return -1
}

func TestLostSealIsCorruptionAndSalvageSealsAgain(t *testing.T) {
	dir, acked, _ := buildLog(t)
	first := segFile(dir, 1)
	data, err := os.ReadFile(first)
	require.NoError(t, err)
	r, err := segment.Scan(data, 1, false, func(segment.Frame) error { return nil })
	require.NoError(t, err)
	require.True(t, r.Sealed)
	sealAt := r.End - segment.Size(0)

	d := copyDir(t, dir)
	flipByte(t, segFile(d, 1), sealAt+2)
	_, err = Open(d, Options{SegmentBytes: smallSeg})
	var ce *CorruptionError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, sealAt, ce.Offset)

	l := mustOpen(t, d, Options{SegmentBytes: smallSeg, Salvage: true})
	requireEntries(t, acked, readAll(t, l)) // every record precedes the seal
	require.NoError(t, l.Close())
}

func TestDamagedHeaderIsCorruption(t *testing.T) {
	dir, _, _ := buildLog(t)
	flipByte(t, segFile(dir, 2), 3)
	_, err := Open(dir, Options{SegmentBytes: smallSeg})
	var ce *CorruptionError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, segFile(dir, 2), ce.File)
	require.Equal(t, 0, ce.Offset)
	require.ErrorIs(t, err, segment.ErrBadHeader)
}

// A crash between putting the next segment in place and sealing the active
// one leaves an empty segment after an unsealed one: a new file (zeros
// past its header) or a reused one (the frames of the segment it was).
func TestInterruptedRotationIsUndone(t *testing.T) {
	for _, file := range []string{"new", "reused"} {
		t.Run(file, func(t *testing.T) {
			dir, acked, _ := buildLog(t)
			last, _ := lastWritten(acked)
			next := segFile(dir, last+1)
			if file == "new" {
				f, err := segment.Create(vfs.Default, next, last+1, segment.NewSalt(), smallSeg)
				require.NoError(t, err)
				require.NoError(t, f.Close())
			} else {
				// Segment 1's file, retired and reused: its header alone
				// is rewritten.
				b, err := os.ReadFile(segFile(dir, 1))
				require.NoError(t, err)
				h := segment.EncodeHeader(last+1, segment.NewSalt())
				copy(b, h[:])
				require.NoError(t, os.WriteFile(next, b, 0o600))
			}

			l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
			require.Equal(t, []string{next}, l.Recovery().RemovedEmpty)
			_, err := os.Stat(next)
			require.ErrorIs(t, err, os.ErrNotExist, "the empty segment is removed from the directory")
			requireEntries(t, acked, readAll(t, l))
			more := appendRecords(t, l, 500, 40)
			require.NoError(t, l.Close())
			l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
			defer l.Close()
			requireEntries(t, append(acked, more...), readAll(t, l))
		})
	}
}

// A crash after sealing but before the next segment's name was durable
// leaves a sealed last segment: Open starts the next one.
func TestSealedLastSegmentStartsANewOne(t *testing.T) {
	dir, acked, _ := buildLog(t)
	last, _ := lastWritten(acked)
	require.NoError(t, os.Remove(segFile(dir, last)))
	acked = acked[:indexOf(acked, firstIn(acked, last).pos)]

	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	requireEntries(t, acked, readAll(t, l))
	more := appendRecords(t, l, 700, 5)
	require.Equal(t, last, more[0].pos.Segment())
	require.NoError(t, l.Close())
}

// TestDamageBeforeTheCleanEndIsRefused: after a clean Close every byte up
// to the end the clean mark records was synced, so damage there is not a
// torn tail, even in the last record: Open refuses it, naming the file and
// offset, instead of zeroing acknowledged records; Salvage then recovers
// the records before it.
func TestDamageBeforeTheCleanEndIsRefused(t *testing.T) {
	for _, what := range []string{"a bit flipped", "zeroed"} {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
			es := appendRecords(t, l, 0, 5)
			require.NoError(t, l.Close())
			victim := es[len(es)-1].pos
			path := segFile(dir, victim.Segment())
			if what == "zeroed" {
				data, err := os.ReadFile(path)
				require.NoError(t, err)
				clear(data[victim.Offset():l.w.writeOff])
				require.NoError(t, os.WriteFile(path, data, 0o600))
			} else {
				flipByte(t, path, victim.Offset()+segment.FrameHeaderSize)
			}

			_, err := Open(dir, Options{SegmentBytes: smallSeg})
			var ce *CorruptionError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, path, ce.File)
			require.Equal(t, victim.Offset(), ce.Offset)
			require.Contains(t, err.Error(), "durable to offset")

			l, err = Open(dir, Options{SegmentBytes: smallSeg, Salvage: true})
			require.NoError(t, err)
			defer l.Close()
			requireEntries(t, es[:len(es)-1], readAll(t, l))
		})
	}
}

// Each frame records how much of its segment was durable when it was
// written, not how much was written: records appended after unsynced ones
// do not vouch for them. So when a power loss keeps a later unsynced batch
// and loses an earlier one, Open discards both as a torn tail (neither was
// acknowledged as durable) instead of refusing the log as corrupt.
func TestUnsyncedRecordsDoNotVouchForEarlierUnsyncedOnes(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1 << 20, SyncInterval: time.Hour})
	synced := appendRecords(t, l, 0, 3)
	lost, err := l.AppendWritten(record(3))
	require.NoError(t, err)
	_, err = l.AppendWritten(record(4)) // a batch of its own, after it
	require.NoError(t, err)

	// The device kept the second unsynced batch and lost the first.
	d := copyDir(t, dir)
	require.NoError(t, l.Close())
	path := segFile(d, 1)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	clear(b[lost[0].Offset() : lost[0].Offset()+segment.Size(len(record(3)))])
	require.NoError(t, os.WriteFile(path, b, 0o600))

	l, err = Open(d, Options{SegmentBytes: 1 << 20})
	require.NoError(t, err, "damage to bytes never synced is a torn tail")
	defer l.Close()
	require.NotNil(t, l.Recovery().TornTail)
	require.Equal(t, lost[0].Offset(), l.Recovery().TornTail.Offset)
	requireEntries(t, synced, readAll(t, l))
}

// A clean mark that fails its checksum says nothing: Open ignores it and
// scans the whole last segment, losing no record.
func TestADamagedCleanMarkIsIgnored(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	es := appendRecords(t, l, 0, 30)
	require.NoError(t, l.Close())
	flipByte(t, filepath.Join(dir, cleanName), 4) // the segment of the end it records

	l, err := Open(dir, Options{SegmentBytes: smallSeg})
	require.NoError(t, err)
	defer l.Close()
	requireEntries(t, es, readAll(t, l))
	more := appendRecords(t, l, 30, 1)
	require.Equal(t, es[len(es)-1].pos.Segment(), more[0].pos.Segment())
}

// A segment a later one follows must end with its seal. One whose seal is
// gone without a trace (zeros where the seal was: the frames before it end
// cleanly) is refused all the same, naming the file and where the seal
// should be; Salvage seals it again and keeps every record.
func TestAMiddleSegmentWhoseSealIsZeroedIsRefused(t *testing.T) {
	dir, acked, _ := buildLog(t)
	path := segFile(dir, 1)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	r, err := segment.Scan(data, 1, false, func(segment.Frame) error { return nil })
	require.NoError(t, err)
	require.True(t, r.Sealed)
	sealAt := r.End - segment.Size(0)
	clear(data[sealAt:r.End])
	require.NoError(t, os.WriteFile(path, data, 0o600))

	_, err = Open(dir, Options{SegmentBytes: smallSeg})
	var ce *CorruptionError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, path, ce.File)
	require.Equal(t, sealAt, ce.Offset)

	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
	defer l.Close()
	requireEntries(t, acked, readAll(t, l))
}

// What Open found in the last segment is durable when it returns, and the
// first records appended after it say so: damage to the last record of an
// earlier session is refused as corruption, not dropped as a torn tail,
// when a single append followed the reopen.
func TestRecordsOfAnEarlierOpenAreVouchedForByTheNextAppend(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
	es := appendRecords(t, l, 0, 5)
	require.NoError(t, l.Close())
	l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
	appendRecords(t, l, 5, 1)
	require.NoError(t, l.Close())
	// As a crash would leave it: no clean mark to say where the log ended.
	require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
	path := segFile(dir, 1)
	flipByte(t, path, es[4].pos.Offset()+segment.FrameHeaderSize)

	_, err := Open(dir, Options{SegmentBytes: 1 << 20})
	var ce *CorruptionError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, path, ce.File)
	require.Equal(t, es[4].pos.Offset(), ce.Offset)
}

// Salvage of a segment whose header is damaged copies the file aside
// unchanged first, rewrites the header and keeps every record: the frames
// name their segment themselves.
func TestSalvageOfADamagedHeaderKeepsACopyAndEveryRecord(t *testing.T) {
	dir, acked, _ := buildLog(t)
	path := segFile(dir, 2)
	flipByte(t, path, 3)
	damaged, err := os.ReadFile(path)
	require.NoError(t, err)

	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
	requireEntries(t, acked, readAll(t, l))
	rec := l.Recovery()
	require.Len(t, rec.Salvaged, 1)
	require.Equal(t, path, rec.Salvaged[0].File)
	require.Equal(t, 0, rec.Salvaged[0].Offset)
	require.ErrorIs(t, rec.Salvaged[0].Cause, segment.ErrBadHeader)
	copied, err := os.ReadFile(rec.Salvaged[0].CopiedTo)
	require.NoError(t, err)
	require.Equal(t, damaged, copied, "the damaged file is copied aside unchanged")
	require.NoError(t, l.Close())

	l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	defer l.Close()
	requireEntries(t, acked, readAll(t, l))
}

// TestSalvageOfASegmentTooShortForAHeaderReportsEveryByteOfIt: a segment
// file cut shorter than its header lost all it held; salvage copies those
// bytes aside, reports them all as discarded, and keeps every record of
// the other segments.
func TestSalvageOfASegmentTooShortForAHeaderReportsEveryByteOfIt(t *testing.T) {
	dir, acked, _ := buildLog(t)
	path := segFile(dir, 2)
	const kept = 20
	require.NoError(t, os.Truncate(path, kept))
	cut, err := os.ReadFile(path)
	require.NoError(t, err)

	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
	defer l.Close()
	var want []entry
	for _, e := range acked {
		if e.pos.Segment() != 2 {
			want = append(want, e)
		}
	}
	requireEntries(t, want, readAll(t, l))
	rec := l.Recovery()
	require.NotEmpty(t, rec.Salvaged)
	d := rec.Salvaged[0]
	require.Equal(t, path, d.File)
	require.Equal(t, uint32(2), d.Segment)
	require.Equal(t, 0, d.Offset)
	require.Equal(t, kept, d.Length, "every byte the file held")
	require.ErrorIs(t, d.Cause, segment.ErrBadHeader)
	copied, err := os.ReadFile(d.CopiedTo)
	require.NoError(t, err)
	require.Equal(t, cut, copied, "the cut file is copied aside unchanged")
}

// What salvage repairs is durable when Open returns: after a power loss
// right then, the log opens without Salvage, to the same records.
func TestSalvageRepairsSurviveAPowerLoss(t *testing.T) {
	dir, acked, groupEnd := buildLog(t)
	victim := acked[2]
	flipByte(t, segFile(dir, 1), victim.pos.Offset()+segment.FrameHeaderSize+1)
	var want []entry
	vi := indexOf(acked, victim.pos)
	for i, e := range acked {
		if groupEnd[i] != groupEnd[vi] {
			want = append(want, e)
		}
	}

	cfs := vfs.NewCrashFS(vfs.Default)
	l := mustOpen(t, dir, Options{FS: cfs, SegmentBytes: smallSeg, Salvage: true})
	require.Len(t, l.Recovery().Salvaged, 1)
	requireEntries(t, want, readAll(t, l))
	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir})) // power lost now
	require.NoError(t, l.Close())

	l, err := Open(clone, Options{SegmentBytes: smallSeg})
	require.NoError(t, err, "the repair was lost")
	defer l.Close()
	requireEntries(t, want, readAll(t, l))
}

// Under SyncNever the frames of a segment claim no synced bytes, so damage
// in a sealed segment before its seal reads as a torn tail there. It is
// still corruption (a later segment follows), and Salvage steps over the
// damaged group only, keeping the records after it and the seal.
func TestSalvageStepsOverDamageInASegmentOfUnsyncedFrames(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Sync: SyncNever})
	es := appendRecords(t, l, 0, 60)
	require.GreaterOrEqual(t, l.Stats().Segments, 3)
	require.NoError(t, l.Close())
	victim := es[2]
	require.Equal(t, uint32(1), victim.pos.Segment())
	path := segFile(dir, 1)
	flipByte(t, path, victim.pos.Offset()+segment.FrameHeaderSize+1)

	_, err := Open(dir, Options{SegmentBytes: smallSeg})
	var ce *CorruptionError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, path, ce.File)

	l = mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
	defer l.Close()
	want := append(append([]entry(nil), es[:2]...), es[3:]...)
	requireEntries(t, want, readAll(t, l))
	require.Len(t, l.Recovery().Salvaged, 1)
	require.Equal(t, victim.pos.Offset(), l.Recovery().Salvaged[0].Offset)
}

// A torn tail is zeroed up to its last non-zero byte, not only where it
// starts: no stray byte of the torn batch stays in the file to be read
// as part of a later one, and Recovery.TornTail spans it all.
func TestATornTailIsZeroedToItsLastByte(t *testing.T) {
	dir, acked, groupEnd := buildLog(t)
	last, end := lastWritten(acked)
	path := segFile(dir, last)
	// Tear the last group inside its first frame: the frames after the cut
	// stay intact on disk.
	g := acked[groupEnd[len(acked)-1]]
	first := g
	for i := len(acked) - 1; i >= 0 && groupEnd[i] == groupEnd[len(acked)-1]; i-- {
		first = acked[i]
	}
	require.NotEqual(t, first.pos, g.pos, "the test needs a group of several records last")
	cut := first.pos.Offset() + segment.FrameHeaderSize + 1
	flipByte(t, path, cut)

	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	defer l.Close()
	torn := l.Recovery().TornTail
	require.NotNil(t, torn)
	require.Equal(t, first.pos.Offset(), torn.Offset)
	require.Equal(t, end-first.pos.Offset(), torn.Length)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, make([]byte, len(b)-torn.Offset), b[torn.Offset:], "bytes of the torn batch are left")
	requireEntries(t, survivors(acked, groupEnd, last, first.pos.Offset()), readAll(t, l))
}

// Why a torn tail is zeroed, shown by what it prevents: the intact frames
// of a torn batch must never come back. Two records written but not
// synced (each its own group, both claiming only the first record durable)
// lose the first one's block to a power loss and keep the second one's:
// a torn tail. The reopened log appends a record of the same length where
// the lost one was, so that it ends exactly where the intact leftover
// begins, and loses power again. Had the repair left the leftover in
// place, the next open would read it as the frame after the new record
// (its checksum, its segment and its synced value all verify) and replay a
// record nobody was ever told was written.
func TestATornTailsIntactFramesNeverComeBack(t *testing.T) {
	const segBytes = 64 << 10
	dir := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	l := mustOpen(t, dir, Options{FS: cfs, SegmentBytes: segBytes})
	durable := appendRecords(t, l, 0, 1)
	lost, left := bytes.Repeat([]byte("x"), 700), bytes.Repeat([]byte("y"), 700)
	lostPos, err := l.AppendWritten(lost)
	require.NoError(t, err)
	leftPos, err := l.AppendWritten(left)
	require.NoError(t, err)
	require.Equal(t, lostPos[0].Offset()+segment.Size(len(lost)), leftPos[0].Offset(), "the two frames are back to back")

	first, _ := cloneLosingRecord(t, cfs, l, dir, lostPos[0], len(lost))

	cfs = vfs.NewCrashFS(vfs.Default)
	l = mustOpen(t, first, Options{FS: cfs, SegmentBytes: segBytes})
	torn := l.Recovery().TornTail
	require.NotNil(t, torn, "the record left after a lost one is a torn tail")
	require.Equal(t, lostPos[0].Offset(), torn.Offset)
	requireEntries(t, durable, readAll(t, l))
	requireLostPlaceRefilled(t, cfs, l, first, lostPos[0], len(lost), segBytes, durable)
}

// setHeaderVersion writes version v into the header of the segment file at
// path, with the header's checksum to match: the file a build that writes
// version v would have left.
func setHeaderVersion(t *testing.T, path string, v uint16) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	binary.LittleEndian.PutUint16(data[8:], v)
	binary.LittleEndian.PutUint32(data[28:], crc32.Checksum(data[:28], crc32.MakeTable(crc32.Castagnoli)))
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

// dirContents returns every file of dir but its lock, with its bytes.
func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		if e.Name() == "LOCK" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(data)
	}
	return out
}

// TestASegmentOfALaterFormatVersionIsRefusedAndLeftAsItIs: a segment whose
// header verifies but names a later format version was written by a later
// build (a store opened by the build before it, after a rollback, say). It
// is not damage: Open refuses it as unsupported, not as corrupt, salvage
// or not, and touches no file, so the later build still finds its log
// whole. Salvage used to rewrite the header and skip every frame after it.
func TestASegmentOfALaterFormatVersionIsRefusedAndLeftAsItIs(t *testing.T) {
	for _, seq := range []uint32{2, 0} { // 0: the last segment
		dir, acked, _ := buildLog(t)
		if seq == 0 {
			names, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
			require.NoError(t, err)
			seq, _ = parseSegName(filepath.Base(names[len(names)-1]))
		}
		path := segFile(dir, seq)
		setHeaderVersion(t, path, segment.Version+1)
		before := dirContents(t, dir)
		for _, salvage := range []bool{false, true} {
			_, err := Open(dir, Options{SegmentBytes: smallSeg, Salvage: salvage})
			require.ErrorIs(t, err, segment.ErrVersion, "segment %d, salvage %v", seq, salvage)
			require.ErrorIs(t, err, errors.ErrUnsupported)
			require.NotErrorIs(t, err, ErrCorrupt, "segment %d, salvage %v", seq, salvage)
			require.ErrorContains(t, err, path)
			require.ErrorContains(t, err, fmt.Sprintf("format version %d", segment.Version+1))
			require.Equal(t, before, dirContents(t, dir), "segment %d, salvage %v: Open changed the directory", seq, salvage)
		}
		// The build that reads it finds every record.
		setHeaderVersion(t, path, segment.Version)
		l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
		requireEntries(t, acked, readAll(t, l))
		require.NoError(t, l.Close())
	}
}

// A later build's log that a salvage would also repair is left as it is
// by Open with Salvage, which checks every segment's version before it
// changes any file. It used to repair each segment as it met it: a
// damaged header of segment 1 was copied aside, listed in
// salvage/unfinished.json and rewritten as this build's version, and a
// missing segment 2 replaced by an empty one, before a later segment's
// header refused the log. (A later build may write its version in every
// header, or only in the segments it made.)
func TestALaterBuildsLogIsLeftAsItIsWhenSalvageWouldRepairPartOfIt(t *testing.T) {
	for _, c := range []struct {
		later  string // the segments whose headers name a later version
		damage string
	}{
		{"every segment", "segment 1's header"},
		{"the last segment", "segment 1's header"},
		{"the last segment", "segment 2 gone"},
	} {
		t.Run(c.later+"/"+c.damage, func(t *testing.T) {
			dir, acked, _ := buildLog(t)
			last, _ := lastWritten(acked)
			require.Greater(t, last, uint32(2))
			for seq := uint32(1); seq <= last; seq++ {
				if c.later == "every segment" || seq == last {
					setHeaderVersion(t, segFile(dir, seq), segment.Version+1)
				}
			}
			if c.damage == "segment 2 gone" {
				require.NoError(t, os.Remove(segFile(dir, 2)))
			} else {
				flipByte(t, segFile(dir, 1), 22) // a reserved byte: the header checksum fails
			}
			before := dirContents(t, dir)

			_, err := Open(dir, Options{SegmentBytes: smallSeg, Salvage: true})
			require.ErrorIs(t, err, segment.ErrVersion)
			require.NotErrorIs(t, err, ErrCorrupt)
			refused := last // the first segment whose header verifies and names a later version
			if c.later == "every segment" {
				refused = 2
			}
			require.ErrorContains(t, err, segFile(dir, refused))
			require.Equal(t, before, dirContents(t, dir), "Open changed the directory")
			require.NoDirExists(t, filepath.Join(dir, salvageDirName), "Open made salvage/")
		})
	}
}

// TestACleanMarkThatCannotBeWrittenIsLoggedNotReturned: Close of a log
// whose every record is durable succeeds although its clean mark cannot be
// written (a full disk): the mark only spares the next Open a read, which
// then reads the last segment to its end and finds every record.
func TestACleanMarkThatCannotBeWrittenIsLoggedNotReturned(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpOpen, vfs.OpWrite, vfs.OpSync, vfs.OpSyncDir} {
		t.Run(op.String(), func(t *testing.T) {
			dir := t.TempDir()
			fs := vfs.NewFaultFS(vfs.Default)
			var logs strings.Builder
			var mu sync.Mutex
			logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				return logs.Write(p)
			}), nil))
			l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: MinSegmentBytes, Logger: logger})
			var want []Position
			for i := range 30 {
				pos, err := l.Append([]byte(fmt.Sprintf("record %d", i)))
				require.NoError(t, err)
				want = append(want, pos[0])
			}
			rule := vfs.Rule{Op: op, NameContains: cleanName, Err: syscall.ENOSPC}
			if op == vfs.OpSyncDir {
				rule = vfs.Rule{Op: op, Nth: 1, Err: syscall.ENOSPC} // only the mark's syncs the directory at Close
			}
			fs.Inject(rule)
			require.NoError(t, l.Close(), "every record was durable: the missing mark loses nothing")
			mu.Lock()
			require.Contains(t, logs.String(), "clean mark could not be written")
			mu.Unlock()
			_, ok, err := readCleanMark(vfs.Default, dir)
			require.NoError(t, err)
			if op != vfs.OpSync && op != vfs.OpSyncDir {
				require.False(t, ok, "a mark that was not written does not read as one")
			}

			l = mustOpen(t, dir, Options{SegmentBytes: MinSegmentBytes})
			defer l.Close()
			for i, p := range want {
				rec, err := l.Read(p)
				require.NoError(t, err)
				require.Equal(t, fmt.Sprintf("record %d", i), string(rec))
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
