package wal

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// forgedFrames is a record body that holds encoded frames, one naming each
// segment from 2 to 59, as a log that ships another log's frames carries
// them, or a payload crafted to look like frames: synced is the offset
// each claims was durable, salt the salt it was made with (a forger does
// not know the salt of a segment file not yet reused).
func forgedFrames(synced, salt uint32) []byte {
	var b []byte
	for seq := uint32(2); seq < 60; seq++ {
		b = segment.AppendFrame(b, seq, salt, synced, segment.KindRecord, segment.Full, []byte("forged"))
	}
	return b
}

// recycleOver appends records of body to a log of 4 KiB segments until at
// least three segments hold them, retires those segments, and appends
// until a segment file is reused: its stale bytes are then the forged
// frames. It returns the records appended since the retirement.
func recycleOver(t *testing.T, l *Log, body []byte) []entry {
	t.Helper()
	var last Position
	for range 12 {
		pos, err := l.Append(body)
		require.NoError(t, err)
		last = pos[0]
	}
	_, err := l.RemoveBelow(last)
	require.NoError(t, err)
	var kept []entry
	for i := 0; l.Stats().RecycledSegments == 0; i++ {
		require.Less(t, i, 100, "no segment file was reused")
		pos, err := l.Append(body)
		require.NoError(t, err)
		kept = append(kept, entry{pos[0], body})
	}
	return kept
}

// requireNoForged fails if any record read back from l is a forged frame.
func requireNoForged(t *testing.T, l *Log) {
	t.Helper()
	for _, e := range readAll(t, l) {
		require.NotEqual(t, "forged", string(e.rec), "a record nobody appended was read at %v", e.pos)
	}
}

// A reused segment file keeps its old frames as stale bytes, and a record
// body among them may hold frames that name the segment the file becomes
// (the sequence is easy to foresee). After a process crash (no clean
// mark) Open scans the rest of the last segment: those frames must not
// make it refuse a healthy log (a frame of this segment claiming synced
// bytes past the end reads as corruption), nor come back as records, with
// or without Salvage. The salt drawn when the file is reused, which seeds
// every frame's checksum, keeps them out.
func TestFramesInARecordBodyNeverReadAsFramesOfTheSegmentItsFileBecomes(t *testing.T) {
	for _, salvage := range []bool{false, true} {
		dir := t.TempDir()
		opts := Options{SegmentBytes: 4096}
		l := mustOpen(t, dir, opts)
		recycleOver(t, l, forgedFrames(4000, 0))
		_, err := l.Append([]byte("one"))
		require.NoError(t, err)
		want := readAll(t, l)
		crashed := copyDir(t, dir) // the process dies: no clean mark
		require.NoError(t, l.Close())

		opts.Salvage = salvage
		c, err := Open(crashed, opts)
		require.NoError(t, err, "a healthy log after a process crash, Salvage %v", salvage)
		requireEntries(t, want, readAll(t, c))
		require.Empty(t, c.Recovery().Salvaged, "nothing was damaged")
		requireNoForged(t, c)
		require.NoError(t, c.Close())
	}
}

// The same where the new segment's records end exactly where a forged
// frame starts in the stale bytes, and that frame claims nothing synced
// past it: without the salt it would read as the next record.
func TestAForgedFrameWhereTheRecordsEndIsNotARecord(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4096}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	body := forgedFrames(0, 0)
	for l.End().Segment() < 4 {
		_, err := l.Append(body)
		require.NoError(t, err)
	}
	_, err := l.RemoveBelow(l.End())
	require.NoError(t, err)
	for l.End().Segment() < 5 {
		_, err := l.Append(body)
		require.NoError(t, err)
	}
	// Fill the segment so that the next one starts on a reused file, and
	// its first record ends where the forged frame naming it begins.
	next := l.End().Segment() + 1
	n := segment.Size(len("forged")) * int(next-2)
	for 4096-l.End().Offset() >= segment.Size(n) {
		_, err := l.Append([]byte("x"))
		require.NoError(t, err)
	}
	_, err = l.Append(bytes.Repeat([]byte("y"), n))
	require.NoError(t, err)
	require.NotZero(t, l.Stats().RecycledSegments, "the segment file was reused")
	want := readAll(t, l)

	c, err := Open(copyDir(t, dir), opts)
	require.NoError(t, err)
	defer c.Close()
	requireEntries(t, want, readAll(t, c))
	requireNoForged(t, c)
}

// A salvage that rewrites a damaged header takes the salt from the
// frames the log wrote, never from frames inside a record's body: a last
// segment of one record carrying frames under the forger's salt, its
// header damaged, opens with that record and nothing forged.
func TestSalvageOfADamagedHeaderTakesNoSaltFromARecordBody(t *testing.T) {
	for _, at := range []int64{21, 17, 29} { // a reserved byte, a byte of the salt, the header's checksum
		dir := t.TempDir()
		opts := Options{SegmentBytes: 1 << 16}
		l := mustOpen(t, dir, opts)
		body := forgedFrames(40, 0xdeadbeef)
		want := []entry{{mustAppend(t, l, body), body}}
		require.NoError(t, l.Close())
		damageByte(t, segFile(dir, 1), at)

		opts.Salvage = true
		c, err := Open(dir, opts)
		require.NoError(t, err, "byte %d", at)
		requireNoForged(t, c)
		if at != 17 {
			// The salt field survived: the record is kept.
			requireEntries(t, want, readAll(t, c))
		}
		require.NoError(t, c.Close())
	}
}

// A header damaged while the log is open does not change the salt its
// appends are written with: the records acknowledged after the damage are
// there once a salvage has rewritten the header, with those before.
func TestAHeaderDamagedSinceOpenDoesNotChangeTheSaltOfAppends(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 16}
	l := mustOpen(t, dir, opts)
	want := appendRecords(t, l, 0, 3)
	damageByte(t, segFile(dir, 1), 17) // a byte of the salt
	want = append(want, appendRecords(t, l, 3, 3)...)
	require.NoError(t, l.Close())

	opts.Salvage = true
	c, err := Open(dir, opts)
	require.NoError(t, err)
	defer c.Close()
	require.Nil(t, c.Recovery().TornTail, "records acknowledged after the damage are not a torn tail")
	requireEntries(t, want, readAll(t, c))
}

// mustAppend appends rec alone and returns its position.
func mustAppend(t *testing.T, l *Log, rec []byte) Position {
	t.Helper()
	pos, err := l.Append(rec)
	require.NoError(t, err)
	return pos[0]
}

// damageByte flips the low bit of the byte at off in the file at path.
func damageByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 1
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}
