package index

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/klauspost/crc32"

	"github.com/walbroker/walbroker/segment"
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
//	 8  version  uint32, 1
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
// its declaration, stream state, active messages and dedup keys; then the
// chunk files the table needs. The file is written under a temporary name,
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
// the table's unflushed entries for the Flush that writes them. No queue
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
	x.Table.Detach()
	next := x.nextSeq.Load()
	return &Snapshot{LogPos: logPos, NextSeq: next, body: e.b, taken: next, maxQueue: x.maxQueue}, nil
}

// encode appends the queue to a checkpoint's body: its declaration, its
// stream's bounds, its active messages and its dedup keys.
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

// checkpointHead is what a checkpoint's header holds besides its framing.
type checkpointHead struct {
	logPos   wal.Position
	nextSeq  uint64
	maxQueue uint32
}

// readCheckpoint reads and verifies dir's checkpoint file, and returns its
// header's fields and its body.
func readCheckpoint(fs vfs.FS, dir string) (checkpointHead, []byte, error) {
	path := filepath.Join(dir, checkpointName)
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return checkpointHead{}, nil, err
	}
	defer f.Close()
	damaged := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrDamaged, path, fmt.Sprintf(format, args...))
	}
	// A checkpoint that opens but is no file to read (a directory in its
	// place: EISDIR), or holds fewer bytes than its size (EOF), is no more
	// usable than one that fails its checks. Any other error reading it
	// (EIO) says nothing of what it holds: it is not ErrDamaged, and a
	// caller that took it for damage would drop a checkpoint that may be
	// whole, and with it what only the checkpoint knows (the messages a
	// later salvage names lost).
	unreadable := func(err error) error {
		if errors.Is(err, syscall.EISDIR) || errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: %s: %w", ErrDamaged, path, err)
		}
		return fmt.Errorf("index: read checkpoint %s: %w", path, err)
	}
	size, err := f.Size()
	if err != nil {
		return checkpointHead{}, nil, unreadable(err)
	}
	// The header first: a file that is not a checkpoint, or whose length
	// disagrees with its header, costs no buffer of its size.
	var hdr [checkpointHeader]byte
	if size < checkpointHeader {
		return checkpointHead{}, nil, damaged("no checkpoint header")
	}
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return checkpointHead{}, nil, unreadable(err)
	}
	if [8]byte(hdr[:8]) != checkpointMagic {
		return checkpointHead{}, nil, damaged("no checkpoint header")
	}
	if v := binary.LittleEndian.Uint32(hdr[8:]); v != checkpointVersion {
		return checkpointHead{}, nil, damaged("version %d, want %d", v, checkpointVersion)
	}
	if size > maxCheckpointBytes {
		return checkpointHead{}, nil, damaged("%d bytes, more than a checkpoint may hold (%d)", size, int64(maxCheckpointBytes))
	}
	if n := binary.LittleEndian.Uint64(hdr[16:]); n != uint64(size-checkpointHeader) {
		return checkpointHead{}, nil, damaged("body of %d bytes, file holds %d", n, size-checkpointHeader)
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil {
		return checkpointHead{}, nil, unreadable(err)
	}
	body := data[checkpointHeader:]
	if crc := crc32.Update(crc32.Checksum(data[16:checkpointHeader], castagnoli), castagnoli, body); crc != binary.LittleEndian.Uint32(data[12:]) {
		return checkpointHead{}, nil, damaged("checksum mismatch")
	}
	return checkpointHead{
		logPos:   wal.Position(binary.LittleEndian.Uint64(data[24:])),
		nextSeq:  binary.LittleEndian.Uint64(data[32:]),
		maxQueue: binary.LittleEndian.Uint32(data[40:]),
	}, body, nil
}

// LogHints returns what dir's checkpoint knows of the log, for wal.Open:
// the sealed segments with the offset past each one's seal
// (wal.Options.Sealed), and the log position the checkpoint reflects,
// before which every record was verified (wal.Options.Verified). Without a
// usable checkpoint, or with one marked suspect or that cannot be told not
// to be (see Suspect), it returns nothing. It only reads. The hints are
// true only of the log the checkpoint was taken of: see CheckpointLog.
func LogHints(fs vfs.FS, dir string) (map[uint32]int, wal.Position) {
	if Suspect(fs, dir) {
		return nil, 0
	}
	cl, ok := ReadCheckpointLog(fs, dir)
	if !ok {
		return nil, 0
	}
	return cl.Sealed, cl.Pos
}

// CheckpointLog is what a checkpoint says of the log it was taken of.
type CheckpointLog struct {
	// Sealed and Pos are LogHints' hints: the sealed segments with the
	// offset past each one's seal, and the position the checkpoint
	// reflects.
	Sealed map[uint32]int
	Pos    wal.Position
	// Secret is the store secret the checkpoint holds (nil for none):
	// the one the meta events of that log carry, which ties the
	// checkpoint to it. Another store's checkpoint holds another.
	Secret []byte
}

// ReadCheckpointLog returns what dir's checkpoint says of its log, marked
// suspect or not (LogHints leaves out what a suspect one says); ok is false
// when there is no checkpoint, it fails the checks of its header,
// checksum, sealed segments and secret, or it cannot be read (see
// LoadCheckpointLog, which tells these apart). It only reads.
func ReadCheckpointLog(fs vfs.FS, dir string) (cl CheckpointLog, ok bool) {
	cl, err := LoadCheckpointLog(fs, dir)
	return cl, err == nil
}

// LoadCheckpointLog is ReadCheckpointLog with the reason it gives
// nothing: os.ErrNotExist when there is no checkpoint, ErrDamaged when it
// fails its checks, and any other error (an I/O error reading it, a file
// planted in its place: vfs.ErrForeign) as it is, naming the file. Only
// the first two say that the checkpoint is unusable. It only reads.
func LoadCheckpointLog(fs vfs.FS, dir string) (CheckpointLog, error) {
	if fs == nil {
		return CheckpointLog{}, fmt.Errorf("index: read checkpoint %s: %w", dir, errNilFS)
	}
	head, body, err := readCheckpoint(fs, dir)
	if err != nil {
		return CheckpointLog{}, err
	}
	d := decoder{b: body}
	sealed := d.sealed()
	secret := []byte(d.string("secret"))
	if d.err == nil && len(secret) != 0 && len(secret) != SecretSize {
		d.fail(fmt.Sprintf("secret of %d bytes, want %d", len(secret), SecretSize))
	}
	if d.err != nil {
		return CheckpointLog{}, fmt.Errorf("%w: %s: %v", ErrDamaged, filepath.Join(dir, checkpointName), d.err)
	}
	if len(secret) == 0 {
		secret = nil
	}
	return CheckpointLog{Sealed: sealed, Pos: head.logPos, Secret: secret}, nil
}

// count reads the number of items that follow, each at least a byte.
func (d *decoder) count(field string) int {
	v := d.uvarint(field)
	if v > uint64(len(d.b)) {
		d.failField(field, fmt.Sprintf("%d exceeds the %d bytes left", v, len(d.b)))
		return 0
	}
	return int(v)
}

// int reads a count kept as an int: one above math.MaxInt would be taken
// for a negative count.
func (d *decoder) int(field string) int {
	v := d.uvarint(field)
	if v > math.MaxInt {
		d.failField(field, fmt.Sprintf("%d exceeds an int", v))
		return 0
	}
	return int(v)
}

// upTo reads a count that cannot exceed limit, the most there can be of
// what it counts (the what of the error that refuses more).
func (d *decoder) upTo(field string, limit uint64, what string) uint64 {
	v := d.uvarint(field)
	if v > limit {
		d.failField(field, fmt.Sprintf("%d exceeds the %d %s", v, limit, what))
		return 0
	}
	return v
}

// What one log segment's use (SegmentUse) can count. A record's offset in
// its segment is 32 bits (wal.Position), and the segment package opens no
// file longer than 2^32-1 bytes: the records of a segment lie in what
// follows its header within those bytes. (wal.MaxSegmentBytes, the size
// of the segments the log makes, is lower, but the log opens any segment
// the segment package does, one regrown at open may pass it by a frame,
// and a checkpoint holding a count the log allows must load.) Each
// message counted there has its publish record there, and each dedup key
// the record of its message's publish or copy, one record each, of a
// frame of at least one byte of body. Counts above these are damage: so
// is one that would wrap negative as an int or int64.
const (
	maxSegmentRecordBytes = 1<<32 - 1 - segment.HeaderSize
	maxSegmentRecords     = maxSegmentRecordBytes / (segment.FrameHeaderSize + 1)
)

func (d *decoder) sealed() map[uint32]int {
	n := d.count("sealed segment count")
	out := make(map[uint32]int, n)
	for range n {
		seq := d.u32("sealed segment")
		out[seq] = int(d.u32("sealed segment's seal offset"))
	}
	return out
}

// Load opens the index in dir from its checkpoint and returns it with the
// log position to replay from. A missing checkpoint is os.ErrNotExist; one
// that is no file to read (a directory in its place) or fails any check
// (checksum, bounds, counts that disagree with the messages and keys it
// holds, a chunk file missing, of the wrong size or a directory) is
// ErrDamaged: the caller may rebuild from the log, which is
// the source of truth. Any other error (an I/O error opening, reading or mapping the
// checkpoint or a chunk file, or listing or syncing the directory) is
// returned as it is, naming the file: it says nothing of what the
// checkpoint holds, and a caller that rebuilt (removing the checkpoint)
// would lose what only the checkpoint knows. Such a caller fails instead,
// and the next attempt finds the checkpoint as it was.
func Load(fs vfs.FS, dir string) (*Index, wal.Position, error) {
	if fs == nil {
		return nil, 0, fmt.Errorf("index: load %s: %w", dir, errNilFS)
	}
	head, body, err := readCheckpoint(fs, dir)
	logPos, nextSeq := head.logPos, head.nextSeq
	if err != nil {
		return nil, 0, err
	}
	damaged := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrDamaged, filepath.Join(dir, checkpointName), fmt.Sprintf(format, args...))
	}
	if nextSeq == 0 || nextSeq == math.MaxUint64 {
		return nil, 0, damaged("next sequence %d", nextSeq)
	}
	if head.maxQueue > maxQueueID {
		return nil, 0, damaged("highest queue number %d, above %d", head.maxQueue, uint32(maxQueueID))
	}
	d := decoder{b: body}
	d.sealed()
	secret := []byte(d.string("secret"))
	if d.err == nil && len(secret) != 0 && len(secret) != SecretSize {
		// The store writes its secret into every segment's preamble as a
		// meta event, which holds exactly SecretSize bytes: a secret of
		// another length would make the log unreadable.
		d.fail(fmt.Sprintf("secret of %d bytes, want %d", len(secret), SecretSize))
	}
	orphans := d.int("orphans")
	type segUse struct {
		seg uint32
		u   SegmentUse
	}
	var segs []segUse
	for range d.count("segment use count") {
		s := segUse{seg: d.u32("segment")}
		s.u.Messages = int(d.upTo("segment messages", maxSegmentRecords, "records a segment holds"))
		s.u.Bytes = int64(d.upTo("segment bytes", maxSegmentRecordBytes, "bytes a segment's records fill"))
		s.u.Keys = int(d.upTo("segment keys", maxSegmentRecords, "records a segment holds"))
		s.u.MinSeq, s.u.MaxSeq = d.uvarint("segment min seq"), d.uvarint("segment max seq")
		segs = append(segs, s)
	}
	liveChunks := map[uint64]int{}
	for range d.count("live chunk count") {
		c := d.uvarint("live chunk")
		liveChunks[c] = d.int("live chunk's messages")
	}
	x := NewWithTable(nil)
	x.Secret, x.Orphans = secret, orphans
	x.maxQueue = head.maxQueue
	x.CheckpointBytes = int64(checkpointHeader + len(body))
	if len(secret) == 0 {
		x.Secret = nil
	}
	x.nextSeq.Store(nextSeq)
	for _, s := range segs {
		u := s.u
		x.segs[s.seg] = &u
	}
	x.chunks = liveChunks
	for range d.count("queue count") {
		q := x.decodeQueue(&d, nextSeq)
		if d.err != nil {
			break
		}
		if x.queues[q.ID] != nil || x.byName[q.Name] != nil {
			d.fail(fmt.Sprintf("queue %d %q twice", q.ID, q.Name))
			break
		}
		x.queues[q.ID], x.byName[q.Name] = q, q
		x.maxQueue = max(x.maxQueue, q.ID)
	}
	var want []uint64
	for range d.count("table file count") {
		c := d.uvarint("table file")
		if slices.Contains(want, c) {
			d.fail(fmt.Sprintf("table file %d named twice", c))
			break
		}
		want = append(want, c)
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return nil, 0, damaged("%v", d.err)
	}
	// The counts it keeps must agree with the messages and keys it holds
	// (as far as they can without the table's entries, which are read
	// only when a walk of a stream reaches them): a log segment counted
	// as holding fewer messages than it does may be removed under them,
	// and one counting more, or keys it does not hold, is never removed.
	h, err := x.countHeld()
	if err == nil {
		err = x.checkHeld(h)
	}
	if err != nil {
		return nil, 0, damaged("%v", err)
	}
	t, err := OpenTable(fs, dir, want)
	if err != nil {
		return nil, 0, err
	}
	x.Table = t
	return x, logPos, nil
}

// decodeQueue reads a queue that Queue.encode wrote, checking it against
// the sequences the checkpoint says were taken (below nextSeq).
func (x *Index) decodeQueue(d *decoder, nextSeq uint64) *Queue {
	id := d.queue()
	name := d.string("queue name")
	q := newQueue(x, id, name, d.policy())
	q.cursor = d.uvarint("stream cursor")
	q.streamMax = d.uvarint("stream max")
	q.streamEnq = d.varint("stream enqueuedAt")
	if q.streamMax == 0 {
		// No message joined the stream: its lower bound is the earliest
		// instant. A checkpoint written while streams started at 0 holds
		// 0 here, which would keep a backlog published before 1970 off
		// the stream; no other value means anything else, so the format
		// is unchanged.
		q.streamEnq = math.MinInt64
	}
	if q.cursor == 0 || q.streamMax >= nextSeq || q.cursor > q.streamMax+1 {
		d.fail(fmt.Sprintf("queue %d: stream [%d, %d] outside the sequences taken (below %d)", id, q.cursor, q.streamMax, nextSeq))
		return q
	}
	// The stream holds at most one message per sequence in [cursor,
	// streamMax] (fewer: the others are another queue's, active or gone).
	// A count above that would stand for messages that do not exist, in
	// Live and the ready count, until a walk of the stream found them
	// missing and stopped the store.
	fresh, span := d.int("stream count"), q.streamMax+1-q.cursor
	if d.err == nil && uint64(fresh) > span {
		d.failField("stream count", fmt.Sprintf("queue %d: %d messages in its stream [%d, %d] of %d sequences", id, fresh, q.cursor, q.streamMax, span))
		return q
	}
	q.fresh = fresh
	q.lastEvicts.Store(d.varint("last eviction clock"))
	for range d.count("gone message count") {
		seq := d.uvarint("gone message")
		if seq > q.streamMax {
			d.fail(fmt.Sprintf("queue %d: message %d marked gone past its stream's end (%d)", id, seq, q.streamMax))
			return q
		}
		if seq < q.cursor {
			// Behind the cursor, where nothing reads the stream: a walk
			// that jumped over a dropped table file once left it there
			// (see Queue.passGone). Harmless, so dropped rather than taken
			// for damage, which rebuilt the index at every open until the
			// stream drained.
			continue
		}
		q.gone[seq] = struct{}{}
	}
	for range d.count("message count") {
		m, st := decodeMessage(d)
		if st != Ready && st != Leased && st != Dead {
			d.fail(fmt.Sprintf("message %d in state %d", m.Seq, st))
			return q
		}
		if m.Seq == 0 || m.Seq >= nextSeq || q.msgs[m.Seq] != nil {
			d.fail(fmt.Sprintf("message %d outside the sequences taken (below %d), or twice", m.Seq, nextSeq))
			return q
		}
		q.msgs[m.Seq] = m
		q.attach(m, st)
		// The checkpoint holds the bytes of the messages' publish
		// records (SegmentUse.Bytes), not those of the events that
		// restate their state: counted again from the state.
		m.restate = restateSize(q.ID, m)
		if u := x.segs[m.Pos.Segment()]; u != nil && m.Pos != 0 {
			u.StateBytes += int64(m.restate)
		}
	}
	for range d.count("seen key count") {
		k := seenKey{key: d.string("seen key"), seq: d.uvarint("seen key's seq"), enqueuedAt: d.varint("seen key's enqueuedAt"), seg: d.u32("seen key's segment")}
		if u := x.segs[k.seg]; u != nil && k.seg != 0 {
			if _, twice := q.seen[k.key]; !twice {
				u.KeyBytes += int64(len(k.key)) // the checkpoint holds Keys, not their length
			}
		}
		q.seen[k.key] = k
		q.seenOrder.push(k)
	}
	return q
}

// decodeMessage reads an active message that Message.encode wrote, and
// the state to attach it in.
func decodeMessage(d *decoder) (*Message, State) {
	m := &Message{Seq: d.uvarint("message seq"), heapIdx: -1}
	m.EnqueuedAt = d.varint("message enqueuedAt")
	m.Pos = wal.Position(d.uvarint("message position"))
	m.Key = d.string("message key")
	v := d.uvarint("message state")
	st := State(v)
	if uint64(st) != v {
		// A State is a byte: 2052 would read as Dead.
		d.fail(fmt.Sprintf("message %d in state %d", m.Seq, v))
	}
	m.Deliveries = d.u32("message deliveries")
	m.At = d.varint("message at")
	m.Nonce = d.uvarint("message nonce")
	m.FailedAt = d.varint("message failedAt")
	m.Code = d.u32("message code")
	m.Reason = d.string("message reason")
	m.Cause = d.string("message cause")
	m.Size = d.u32("message size")
	return m, st
}

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
