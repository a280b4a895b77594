package index

import (
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
	switch v := binary.LittleEndian.Uint32(hdr[8:]); {
	case v > checkpointVersion:
		// The version is outside the checksum, which a later version may
		// compute otherwise: a version damaged upwards reads so too, and
		// the error says what to do then.
		return checkpointHead{}, nil, fmt.Errorf("%w: %s: version %d, written by a later build; this build reads version %d (if no later build wrote it, remove the directory %s: Open then rebuilds the index from the log)",
			ErrLaterVersion, path, v, checkpointVersion, filepath.Dir(path))
	case v != checkpointVersion:
		return checkpointHead{}, nil, damaged("version %d, want %d", v, checkpointVersion)
	}
	if size > maxCheckpointBytes {
		return checkpointHead{}, nil, damaged("%d bytes, more than a checkpoint may hold (%d)", size, int64(maxCheckpointBytes))
	}
	if size > math.MaxInt {
		// A 32-bit build: no buffer holds it (one of its writing could
		// not either), and make would panic.
		return checkpointHead{}, nil, damaged("%d bytes, more than this build can hold in memory (%d)", size, int64(math.MaxInt))
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
	// A position in segment 0, or past the end of any segment, names no
	// place of a log: wal.Open refuses it as a bad option, so a checkpoint
	// that gave it would keep the store from opening rather than be
	// rebuilt over.
	if pos := wal.Position(binary.LittleEndian.Uint64(data[24:])); pos != 0 && (pos.Segment() == 0 || pos.Offset() > wal.MaxSegmentBytes) {
		return checkpointHead{}, nil, damaged("log position %v, which no segment holds", pos)
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
		if _, twice := out[seq]; twice {
			d.twice("sealed segment", fmt.Sprint(seq))
			return nil
		}
		out[seq] = int(d.u32("sealed segment's seal offset"))
	}
	return out
}

// twice fails for entry, listed twice in field's list. The lists of a
// checkpoint come from maps (and sets), so the store never repeats an
// entry: a repeat is damage, whichever of the two a reader would keep.
func (d *decoder) twice(field, entry string) {
	d.failField(field, entry+" listed twice")
}

// Load opens the index in dir from its checkpoint and returns it with the
// log position to replay from. A missing checkpoint is os.ErrNotExist; one
// that is no file to read (a directory in its place) or fails any check
// (checksum, bounds, an entry listed twice, counts that disagree with the
// messages and keys it holds, a chunk file missing, of the wrong size or
// a directory) is ErrDamaged: the caller may rebuild from the log, which
// is the source of truth. Any other error (an I/O error opening, reading
// or mapping the checkpoint or a chunk file, or listing or syncing the
// directory) is returned as it is, naming the file: it says nothing of
// what the checkpoint holds, and a caller that rebuilt (removing the
// checkpoint) would lose what only the checkpoint knows. Such a caller
// fails instead, and the next attempt finds the checkpoint as it was.
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
	used := map[uint32]bool{}
	for range d.count("segment use count") {
		s := segUse{seg: d.u32("segment")}
		if used[s.seg] {
			d.twice("segment", fmt.Sprint(s.seg))
			break
		}
		used[s.seg] = true
		s.u.Messages = int(d.upTo("segment messages", maxSegmentRecords, "records a segment holds"))
		s.u.Bytes = int64(d.upTo("segment bytes", maxSegmentRecordBytes, "bytes a segment's records fill"))
		s.u.Keys = int(d.upTo("segment keys", maxSegmentRecords, "records a segment holds"))
		s.u.MinSeq, s.u.MaxSeq = d.uvarint("segment min seq"), d.uvarint("segment max seq")
		segs = append(segs, s)
	}
	liveChunks := map[uint64]int{}
	for range d.count("live chunk count") {
		c := d.uvarint("live chunk")
		if _, twice := liveChunks[c]; twice {
			d.twice("live chunk", fmt.Sprint(c))
			break
		}
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
	named := map[uint64]bool{} // a set, so that a long damaged list costs linear time
	for range d.count("table file count") {
		c := d.uvarint("table file")
		if named[c] {
			d.fail(fmt.Sprintf("table file %d named twice", c))
			break
		}
		named[c] = true
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
	if err == nil {
		err = streamChunksNamed(x.chunks, h.chunks, named)
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

// streamChunksNamed returns an error naming the first table chunk that
// counts more messages (live) than the active ones it holds (active), and
// so holds stream messages, which only its table file has, when the
// checkpoint names no file for it (named): OpenTable would remove the
// file, and the stream's walk pass over those messages without a word.
func streamChunksNamed(live, active map[uint64]int, named map[uint64]bool) error {
	for _, c := range slices.Sorted(maps.Keys(live)) {
		if n := live[c] - active[c]; n > 0 && !named[c] {
			return fmt.Errorf("table chunk %d counts %d messages of the stream, and no table file is named for it", c, n)
		}
	}
	return nil
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
	var behind map[uint64]bool // the gone marks dropped, behind the cursor
	for range d.count("gone message count") {
		seq := d.uvarint("gone message")
		if _, twice := q.gone[seq]; twice || behind[seq] {
			d.twice("gone message", fmt.Sprintf("queue %d: message %d", id, seq))
			return q
		}
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
			if behind == nil {
				behind = map[uint64]bool{}
			}
			behind[seq] = true
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
		if _, twice := q.seen[k.key]; twice {
			// Read twice, a key would stand twice in seenOrder, beside
			// the one entry seen keeps of the two.
			d.twice("seen key", fmt.Sprintf("queue %d: %q", id, k.key))
			return q
		}
		if u := x.segs[k.seg]; u != nil && k.seg != 0 {
			u.KeyBytes += int64(len(k.key)) // the checkpoint holds Keys, not their length
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
