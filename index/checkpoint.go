package index

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/klauspost/crc32"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// A checkpoint is the file "checkpoint" in the index directory: the state
// of the index when the log ended at its position, less the table entries,
// which the chunk files it names hold. Open loads it and replays only the
// log after that position.
//
// Layout: a 64-byte header, then the body.
//
//	 0  magic    "WALBCKP\x00"
//	 8  version  uint32, 1 (a later one is a later build's checkpoint,
//	             refused with ErrLaterVersion; every version keeps the
//	             magic and this field where they are)
//	12  crc      uint32, CRC-32C of header bytes 16 to 63, then the body
//	16  bodyLen  uint64
//	24  logPos   uint64, the log position the state reflects
//	32  nextSeq  uint64
//	40  maxQueue uint32, the highest queue number an event named, declared
//	             or not (0 in a checkpoint written before it was kept:
//	             then the highest declared one)
//	44  zero
//
// The body is, in uvarints (signed values zig-zag, strings and byte strings
// length first): the sealed log segments and the offset past each one's
// seal; the secret; the dead-event orphan count; per log segment its
// SegmentUse (less KeyBytes and StateBytes, which Load counts again from
// the keys and the messages); per table chunk its live count; per queue
// its declaration, stream state, latest clock reading (LastEvicts), gone
// marks, active messages and dedup keys; then the chunk files the table
// needs. The file is written under a temporary name,
// the header last, fdatasynced, renamed into place and the directory
// synced: a checkpoint is either wholly there or not at all.
const (
	checkpointName    = "checkpoint"
	checkpointHeader  = 64
	checkpointVersion = 1
)

var checkpointMagic = [8]byte{'W', 'A', 'L', 'B', 'C', 'K', 'P', 0}

// Snapshot is the state of an index at one log position, taken while
// nothing changes it (see Index.Snapshot).
//
// A nil *Snapshot, what a caller holds that went on past the error of
// Index.Snapshot, makes no checkpoint file (WriteCheckpoint refuses it):
// Size and FileSize answer 0 rather than end the process with a nil
// dereference.
type Snapshot struct {
	LogPos  wal.Position
	NextSeq uint64 // may be raised (sequences reserved since), never lowered
	body    []byte
	// taken is the next sequence when the snapshot was taken: every
	// message it holds is below it, so a lower NextSeq makes a checkpoint
	// Load refuses.
	taken uint64
	// maxQueue is the index's maxQueue when the snapshot was taken.
	maxQueue uint32
}

// Size is the size of the checkpoint file the snapshot makes, give or take
// its list of chunks.
func (s *Snapshot) Size() int {
	if s == nil {
		return 0
	}
	return checkpointHeader + len(s.body)
}

// FileSize is the size of the checkpoint file WriteCheckpoint makes of s
// with chunks: Size and the list of chunk files it appends.
func (s *Snapshot) FileSize(chunks []uint64) int64 {
	if s == nil {
		return 0
	}
	n := s.Size() + uvarintLen(uint64(len(chunks)))
	for _, c := range chunks {
		n += uvarintLen(c)
	}
	return int64(n)
}

// Snapshot encodes the whole index as of logPos, which must be the end of
// the log with every event before it applied and none after, and detaches
// the table's unflushed entries for the Flush that writes them, less those
// of the table chunks that hold no live message, which no one reads. No queue
// may hold a Pending message. sealed maps each sealed log segment to the
// offset past its seal, which fits in 32 bits. What a checkpoint could not
// hold (an offset out of range, a secret of another length than
// SecretSize) is refused, and nothing is detached.
func (x *Index) Snapshot(logPos wal.Position, sealed map[uint32]int) (*Snapshot, error) {
	if x == nil {
		return nil, errNilIndex
	}
	for seg, off := range sealed {
		if off < 0 || uint64(off) > math.MaxUint32 {
			return nil, fmt.Errorf("index: snapshot: segment %d sealed at offset %d, outside [0, 2^32)", seg, off)
		}
	}
	if len(x.Secret) != 0 && len(x.Secret) != SecretSize {
		return nil, fmt.Errorf("index: snapshot: secret of %d bytes, want %d", len(x.Secret), SecretSize)
	}
	var e encoder
	segs := slices.Sorted(maps.Keys(sealed))
	e.uvarint(uint64(len(segs)))
	for _, seq := range segs {
		e.uvarint(uint64(seq))
		e.uvarint(uint64(sealed[seq]))
	}

	e.string(string(x.Secret))
	e.uvarint(uint64(x.Orphans))
	x.useMu.Lock()
	segs = slices.Sorted(maps.Keys(x.segs))
	e.uvarint(uint64(len(segs)))
	for _, s := range segs {
		u := x.segs[s]
		e.uvarint(uint64(s))
		e.uvarint(uint64(max(u.Messages, 0)))
		e.uvarint(uint64(max(u.Bytes, 0)))
		e.uvarint(uint64(max(u.Keys, 0)))
		e.uvarint(u.MinSeq)
		e.uvarint(u.MaxSeq)
	}
	chunks := slices.Sorted(maps.Keys(x.chunks))
	e.uvarint(uint64(len(chunks)))
	for _, c := range chunks {
		e.uvarint(c)
		e.uvarint(uint64(x.chunks[c]))
	}
	x.useMu.Unlock()

	ids := slices.Sorted(maps.Keys(x.queues))
	e.uvarint(uint64(len(ids)))
	for _, id := range ids {
		if err := x.queues[id].encode(&e); err != nil {
			return nil, err
		}
	}
	// The entries of a chunk none of whose messages is live are read by
	// no one: every message acknowledged since its entry was put is
	// behind its queue's cursor, or marked gone ahead of it, and a walk
	// that finds no entry there jumps on as it does over a removed file.
	// Written, they cost a chunk file of 2 MiB created and fdatasynced for
	// nothing: the checkpoint names no file of such a chunk once all its
	// sequences are taken, and the broker removes it.
	x.Table.detach(func(c uint64) bool { _, live := slices.BinarySearch(chunks, c); return !live })
	next := x.nextSeq.Load()
	return &Snapshot{LogPos: logPos, NextSeq: next, body: e.b, taken: next, maxQueue: x.maxQueue}, nil
}

// encode appends the queue to a checkpoint's body: its declaration, its
// stream's bounds and count, its latest clock reading, its gone marks, its
// active messages and its dedup keys.
func (q *Queue) encode(e *encoder) error {
	e.uvarint(uint64(q.ID))
	e.string(q.Name)
	e.b = q.Policy.append(e.b)
	e.uvarint(q.cursor)
	e.uvarint(q.streamMax)
	e.varint(q.streamEnq)
	e.uvarint(uint64(q.fresh))
	e.varint(q.lastEvicts.Load())
	gone := slices.Sorted(maps.Keys(q.gone))
	e.uvarint(uint64(len(gone)))
	for _, s := range gone {
		e.uvarint(s)
	}
	seqs := slices.Sorted(maps.Keys(q.msgs))
	e.uvarint(uint64(len(seqs)))
	for _, s := range seqs {
		m := q.msgs[s]
		if m.State == Pending {
			return fmt.Errorf("index: snapshot: message %d of queue %s is pending", s, q.Name)
		}
		m.encode(e)
	}
	keys := slices.Sorted(maps.Keys(q.seen))
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		sk := q.seen[k]
		e.string(k)
		e.uvarint(sk.seq)
		e.varint(sk.enqueuedAt)
		e.uvarint(uint64(sk.seg))
	}
	return nil
}

// encode appends an active message to a checkpoint's body.
func (m *Message) encode(e *encoder) {
	e.uvarint(m.Seq)
	e.varint(m.EnqueuedAt)
	e.uvarint(uint64(m.Pos))
	e.string(m.Key)
	e.uvarint(uint64(m.State))
	e.uvarint(uint64(m.Deliveries))
	e.varint(m.At)
	e.uvarint(m.Nonce)
	e.varint(m.FailedAt)
	e.uvarint(uint64(m.Code))
	e.string(m.Reason)
	e.string(m.Cause)
	e.uvarint(uint64(m.Size))
}

// encoder appends the fields a decoder reads.
type encoder struct{ b []byte }

func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) string(s string)  { e.b = appendString(e.b, s) }

// WriteCheckpoint makes snap, with the chunk files it needs, the directory's
// checkpoint. The table must have been flushed (with sync) first. A
// checkpoint whose own content Load would refuse is not written, and the
// one in place is kept: a snapshot Index.Snapshot did not make (a zero
// Snapshot), a NextSeq lowered below the snapshot's or out of range, a
// chunk named twice, a file larger than Load reads. The chunk files are
// not looked at: chunks must name those of the table just flushed
// (Table.Chunks), or Load refuses the checkpoint for a missing one.
func WriteCheckpoint(fs vfs.FS, dir string, snap *Snapshot, chunks []uint64) error {
	if fs == nil {
		return fmt.Errorf("index: checkpoint %s: %w", dir, errNilFS)
	}
	if err := snap.check(chunks); err != nil {
		return fmt.Errorf("index: checkpoint: %w", err)
	}
	body := slices.Clip(snap.body)
	body = binary.AppendUvarint(body, uint64(len(chunks)))
	for _, c := range chunks {
		body = binary.AppendUvarint(body, c)
	}
	hdr := make([]byte, checkpointHeader)
	copy(hdr, checkpointMagic[:])
	binary.LittleEndian.PutUint32(hdr[8:], checkpointVersion)
	binary.LittleEndian.PutUint64(hdr[16:], uint64(len(body)))
	binary.LittleEndian.PutUint64(hdr[24:], uint64(snap.LogPos))
	binary.LittleEndian.PutUint64(hdr[32:], snap.NextSeq)
	binary.LittleEndian.PutUint32(hdr[40:], snap.maxQueue)
	binary.LittleEndian.PutUint32(hdr[12:], crc32.Update(crc32.Checksum(hdr[16:], castagnoli), castagnoli, body))

	tmp := filepath.Join(dir, checkpointName+".tmp")
	f, err := fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("index: checkpoint: %w", err)
	}
	err = func() error {
		if _, err := f.WriteAt(body, checkpointHeader); err != nil {
			return err
		}
		if _, err := f.WriteAt(hdr, 0); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("index: checkpoint: %w", err)
	}
	if err := fs.Rename(tmp, filepath.Join(dir, checkpointName)); err != nil {
		return fmt.Errorf("index: checkpoint: %w", err)
	}
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("index: checkpoint: %w", err)
	}
	return nil
}

// check refuses a checkpoint of snap and chunks that Load would refuse.
func (s *Snapshot) check(chunks []uint64) error {
	switch {
	case s == nil:
		return errors.New("nil snapshot")
	case len(s.body) == 0:
		return errors.New("the snapshot was not made by Index.Snapshot")
	case s.NextSeq == 0 || s.NextSeq == math.MaxUint64:
		return fmt.Errorf("next sequence %d is out of range", s.NextSeq)
	case s.NextSeq < s.taken:
		return fmt.Errorf("next sequence %d is below %d, which the snapshot's messages reach", s.NextSeq, s.taken)
	}
	if n := s.FileSize(chunks); n > maxCheckpointBytes {
		return fmt.Errorf("%d bytes, more than a checkpoint may hold (%d)", n, int64(maxCheckpointBytes))
	}
	seen := make(map[uint64]bool, len(chunks))
	for _, c := range chunks {
		if seen[c] {
			return fmt.Errorf("table file %d named twice", c)
		}
		seen[c] = true
	}
	return nil
}

// RemoveCheckpoint deletes the directory's checkpoint and every table file,
// durably, so that the next open rebuilds the index from the log. An
// empty directory in the place of one is removed with them; one with
// files in it is refused with an error naming it and wrapping
// vfs.ErrForeign.
func RemoveCheckpoint(fs vfs.FS, dir string) error {
	if fs == nil {
		return fmt.Errorf("index: remove checkpoint %s: %w", dir, errNilFS)
	}
	names, err := fs.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, ok := parseChunkName(n); ok || n == checkpointName || n == checkpointName+".tmp" {
			if err := fs.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return foreignDir(filepath.Join(dir, n), err)
			}
		}
	}
	return fs.SyncDir(dir)
}

// foreignDir is RemoveCheckpoint's error for err, met removing path: a
// directory with files in it (which the removal leaves) is none the store
// made, and is refused as a planted file is (vfs.ErrForeign), naming it;
// an empty one, removed, is taken for a file that is not there.
func foreignDir(path string, err error) error {
	if !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		return err
	}
	return &os.PathError{Op: "remove", Path: path, Err: fmt.Errorf("is a directory with files in it, where the index keeps a file; a store's directory holds only what it made: remove it if it does not belong there: %w", vfs.ErrForeign)}
}

// CopyCheckpoint copies dir's checkpoint and table files into dst, which
// must exist, each fdatasynced, then syncs dst. ctx is checked before each
// file: a canceled copy returns ctx's error and leaves the files it copied
// (the caller removes dst). The caller keeps checkpoints from being
// written in dir meanwhile.
func CopyCheckpoint(ctx context.Context, fs vfs.FS, dir, dst string) error {
	if fs == nil {
		return fmt.Errorf("index: copy checkpoint %s to %s: %w", dir, dst, errNilFS)
	}
	if ctx == nil {
		return fmt.Errorf("index: copy checkpoint %s to %s: nil context: %w", dir, dst, os.ErrInvalid)
	}
	names, err := fs.ReadDir(dir)
	if err != nil {
		return err
	}
	if !slices.Contains(names, checkpointName) {
		return fmt.Errorf("index: copy: no checkpoint in %s", dir)
	}
	for _, n := range names {
		if _, ok := parseChunkName(n); ok || n == checkpointName {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := vfs.CopyFile(fs, filepath.Join(dir, n), filepath.Join(dst, n)); err != nil {
				return fmt.Errorf("index: copy: %w", err)
			}
		}
	}
	return fs.SyncDir(dst)
}

// maxCheckpointBytes bounds a checkpoint file: far above what the active
// messages of any store take, and below what a process should allocate
// on a file's word.
const maxCheckpointBytes = 1 << 34

// Rebuild returns an empty index over an empty table in dir, after removing
// any checkpoint and table file there: the caller replays the whole log.
func Rebuild(fs vfs.FS, dir string) (*Index, error) {
	if err := vfs.MkdirAllDurable(fs, dir, 0o700); err != nil {
		return nil, err
	}
	if err := RemoveCheckpoint(fs, dir); err != nil {
		return nil, err
	}
	t, err := OpenTable(fs, dir, nil)
	if err != nil {
		return nil, err
	}
	return NewWithTable(t), nil
}
