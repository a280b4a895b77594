package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/edsrzf/mmap-go"
	"github.com/klauspost/crc32"

	"github.com/walbroker/walbroker/internal/mapfault"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// The table holds one fixed-width entry per published message, addressed by
// its sequence number, in chunk files of ChunkEntries entries each. An
// entry says where the message's publish record is, when it was enqueued,
// which queue it belongs to and whether it joined its queue's stream. It
// never changes after the publish except for its position (a copy moved
// the record forward), so a backlog costs disk and page cache, not heap.
//
// Entry layout, 32 bytes, little-endian:
//
//	 0  pos         uint64  the publish record's log position
//	 8  enqueuedAt  int64   Unix ns
//	16  queue       uint32  bit 31 set: the message joined the stream
//	20  size        uint32  the publish record's frame length (record
//	                        and frame header: Message.Size)
//	24  reserved    uint32  zero
//	28  crc         uint32  CRC-32C of the 8-byte little-endian sequence
//	                        number, then bytes 0 to 27
//
// An all-zero entry is absent. Entries reach the files only through Flush,
// which the checkpointer calls (and an open's replay, before the store
// runs, with entries of records it read back from the log): between
// checkpoints new entries live in memory (the overlay), so the files only
// ever hold entries of publish records that were durable when they were
// written. (An entry zeroed whole on disk reads as absent: the stream
// skips it, and the damage shows only when the queue's stream runs dry
// with messages still counted fresh, which stops the store.)
const (
	EntrySize    = 32
	ChunkEntries = 1 << 16
	chunkBytes   = EntrySize * ChunkEntries
	streamBit    = 1 << 31
	maxQueueID   = streamBit - 1 // the highest queue number: below the stream bit
	chunkPrefix  = "tbl-"
	chunkSuffix  = ".idx"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrDamaged is returned when an index file fails its checks. The log is
// the source of truth: a damaged index is rebuilt from it. Check with
// errors.Is.
var ErrDamaged = errors.New("index: damaged index file")

// ErrLaterVersion is returned by Load for a checkpoint whose header names
// a version above the one this build writes: a later build wrote it. It is
// not damage, and is not rebuilt over: the index is left for a build that
// reads it. It wraps [errors.ErrUnsupported], and not [ErrDamaged].
var ErrLaterVersion = fmt.Errorf("index: checkpoint version this build does not read: %w", errors.ErrUnsupported)

// A nil vfs.FS given to a function of this package is refused with an
// error wrapping io/fs.ErrInvalid that names the directory, before anything
// is done; Suspect, which returns no error, reports true for it (it cannot
// tell), and LogHints gives no hints.

// Entry is one message's table entry.
type Entry struct {
	Seq        uint64
	Pos        wal.Position
	EnqueuedAt int64
	Queue      uint32
	Stream     bool   // joined its queue's stream
	Size       uint32 // of the publish record
}

// queueField is an entry's queue field: the queue's number, with the stream
// bit if the message joined its queue's stream.
func queueField(queue uint32, stream bool) uint32 {
	if stream {
		return queue | streamBit
	}
	return queue
}

func (e *Entry) encode(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], uint64(e.Pos))
	binary.LittleEndian.PutUint64(b[8:], uint64(e.EnqueuedAt))
	binary.LittleEndian.PutUint32(b[16:], queueField(e.Queue, e.Stream))
	binary.LittleEndian.PutUint32(b[20:], e.Size)
	binary.LittleEndian.PutUint32(b[24:], 0)
	binary.LittleEndian.PutUint32(b[28:], entryCRC(e.Seq, b))
}

// entryCRC is the checksum of seq's entry b: CRC-32C over the sequence
// and the entry's first 28 bytes (see entrySum, which a scan calls with a
// buffer of its own).
func entryCRC(seq uint64, b []byte) uint32 {
	var buf crcBuf
	return entrySum(&buf, seq, b)
}

// absent reports whether b, an entry of the chunk files, is all zeros: the
// entry of a sequence never written there.
func absent(b []byte) bool {
	return binary.LittleEndian.Uint64(b[0:]) == 0 && binary.LittleEndian.Uint64(b[8:]) == 0 &&
		binary.LittleEndian.Uint64(b[16:]) == 0 && binary.LittleEndian.Uint64(b[24:]) == 0
}

// crcBuf is a buffer for entrySum.
type crcBuf [8 + 28]byte

// entrySum is entryCRC computed in buf, the caller's: any slice given to
// crc32.Update escapes to the heap, and entryCRC's own buffer costs an
// allocation per entry, which a scan of many entries does not pay.
func entrySum(buf *crcBuf, seq uint64, b []byte) uint32 {
	binary.LittleEndian.PutUint64(buf[:8], seq)
	copy(buf[8:], b[:28])
	return crc32.Update(0, castagnoli, buf[:])
}

// intact reports whether b, the entry of seq in the chunk files, is absent
// or passes its checksum, which it computes in buf.
func intact(buf *crcBuf, seq uint64, b []byte) bool {
	return absent(b) || binary.LittleEndian.Uint32(b[28:]) == entrySum(buf, seq, b)
}

// entryDamage is the error of seq's entry in chunk file path failing its
// checksum.
func entryDamage(path string, seq uint64) error {
	return fmt.Errorf("%w: %s: the entry of message %d, at offset %d, fails its checksum",
		ErrDamaged, path, seq, (seq%ChunkEntries)*EntrySize)
}

// decodeEntry decodes the entry of seq from b: ok false for an absent
// (all-zero) entry, damaged set for one that fails its checksum.
func decodeEntry(seq uint64, b []byte) (e Entry, ok, damaged bool) {
	if absent(b) {
		return Entry{}, false, false
	}
	if binary.LittleEndian.Uint32(b[28:]) != entryCRC(seq, b) {
		return Entry{}, false, true
	}
	q := binary.LittleEndian.Uint32(b[16:])
	return Entry{
		Seq:        seq,
		Pos:        wal.Position(binary.LittleEndian.Uint64(b[0:])),
		EnqueuedAt: int64(binary.LittleEndian.Uint64(b[8:])),
		Queue:      q &^ streamBit,
		Stream:     q&streamBit != 0,
		Size:       binary.LittleEndian.Uint32(b[20:]),
	}, true, false
}

// ErrClosed is returned by a Table's Get, NextStream, Flush, Remove and
// SyncDir once Close has been called, and, wrapped, by every call on a nil *Table or
// *Index and by Apply and Commit on a nil *Queue (see errNilTable,
// errNilIndex and errNilQueue). Check with errors.Is.
var ErrClosed = errors.New("index: table closed")

// errNilTable is the error of a method called on a nil *Table: what a
// caller holds that went on past OpenTable's error. It wraps ErrClosed,
// since such a table takes no call, and the methods that return no error
// answer as for an empty table that has no files (Bytes, Chunks,
// Unflushed and NextStream return zero values; Put and Detach do
// nothing): a panic would end the process from a call given nothing to act
// on.
var errNilTable = fmt.Errorf("index: a method of a nil *index.Table was called (was OpenTable's error ignored?): %w", ErrClosed)

// Table is the entry table of one store. It is safe for concurrent use,
// with one rule: Detach (through Index.Snapshot), Flush and Remove are
// called by one goroutine at a time, the checkpointer (the broker holds
// its checkpoint lock around them), or an open's replay before the index
// is shared, so only it writes the files, and
// Flush reads the detached entries, and writes a chunk it looked up,
// without holding mu.
//
// A Table that OpenTable did not make (New's, or the zero Table) has no
// files: it holds its entries in memory, and a Flush of any entry, or a
// SyncDir, fails saying so.
//
// A nil *Table, what a caller holds that went on past OpenTable's error,
// refuses every call with an error wrapping ErrClosed that says so; the
// methods that return no error answer as for an empty table.
type Table struct {
	fs  vfs.FS // nil: the table lives in memory only
	dir string

	// mu guards every field below. Readers hold it shared while they read a
	// mapped chunk, so a chunk is unmapped only under the exclusive lock.
	mu       sync.RWMutex
	chunks   map[uint64]*chunk
	overlay  *entrySet       // entries not yet flushed; nil (the zero Table) reads as empty
	flushing *entrySet       // entries being flushed, until they are in the files; nil when none
	dirty    map[uint64]bool // chunks written since their last fdatasync
	dirDirty bool            // a chunk file was created or removed since the directory's last sync
	closed   bool            // Close was called: the files are unmapped and closed
	// leftover holds the chunks whose file Remove could not unlink: out
	// of the table (unmapped, closed, named by no later checkpoint), on
	// disk still until RemoveLeftovers takes them. No entry is written to
	// one again: Remove is for chunks none of whose messages is live and
	// all of whose sequences are taken.
	leftover map[uint64]bool
}

// errMemoryOnly is the failure of a Table without files to do what needs
// them.
func errMemoryOnly(what string) error {
	return fmt.Errorf("index: %s: the table lives in memory only (it was not opened with OpenTable)", what)
}

type chunk struct {
	f vfs.File
	m mmap.MMap
}

func chunkName(n uint64) string { return fmt.Sprintf("%s%012d%s", chunkPrefix, n, chunkSuffix) }

// chunkPath is the path of chunk n's file.
func (t *Table) chunkPath(n uint64) string { return filepath.Join(t.dir, chunkName(n)) }

func parseChunkName(name string) (uint64, bool) {
	if !strings.HasPrefix(name, chunkPrefix) || !strings.HasSuffix(name, chunkSuffix) {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, chunkPrefix), chunkSuffix), 10, 64)
	return n, err == nil
}

// ChunkOf returns the chunk that holds seq's entry.
func ChunkOf(seq uint64) uint64 { return seq / ChunkEntries }

// OpenTable opens the table in dir, which it creates if missing, mapping
// the chunk files named in want; files of other chunks are removed. A
// wanted chunk that is missing, of the wrong size or no file (a directory
// in its place) is ErrDamaged.
func OpenTable(fs vfs.FS, dir string, want []uint64) (*Table, error) {
	if err := vfs.MkdirAllDurable(fs, dir, 0o700); err != nil {
		return nil, err
	}
	t := &Table{fs: fs, dir: dir, chunks: map[uint64]*chunk{}, overlay: newEntrySet(), dirty: map[uint64]bool{}}
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if n, ok := parseChunkName(name); ok && !slices.Contains(want, n) {
			if err := fs.Remove(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range want {
		if t.chunks[n] != nil {
			continue // named twice: one mapping is enough
		}
		c, err := t.openChunk(n, false)
		if err != nil {
			t.Close()
			return nil, err
		}
		t.chunks[n] = c
	}
	return t, nil
}

func (t *Table) openChunk(n uint64, create bool) (*chunk, error) {
	path := filepath.Join(t.dir, chunkName(n))
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_EXCL
	}
	f, err := t.fs.OpenFile(path, flag, 0o600)
	if err != nil {
		if !create && errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s is missing", ErrDamaged, path)
		}
		if !create && errors.Is(err, syscall.EISDIR) {
			// No file to map, as for one missing: damage a rebuild
			// repairs, not an I/O error that a retry may get past.
			return nil, fmt.Errorf("%w: %s is a directory, not a table file: %w", ErrDamaged, path, err)
		}
		return nil, err
	}
	if create {
		if err := f.Truncate(chunkBytes); err != nil {
			return nil, t.abandonChunk(f, path, create, err)
		}
	} else if size, err := f.Size(); err != nil || size != chunkBytes {
		_ = f.Close()
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s has %d bytes, want %d", ErrDamaged, path, size, chunkBytes)
	}
	m, err := f.Map(chunkBytes)
	if err != nil {
		return nil, t.abandonChunk(f, path, create, fmt.Errorf("index: %w", err)) // err names the call and the file
	}
	return &chunk{f: f, m: m}, nil
}

// abandonChunk closes the chunk file that openChunk could not make usable
// and returns err. A file it created is removed too: nothing records it,
// and left behind it would fail every later Flush of its chunk (the
// O_EXCL create meets it), where a retry should write what this one did
// not. A removal that fails is joined to err.
func (t *Table) abandonChunk(f vfs.File, path string, created bool, err error) error {
	_ = f.Close()
	if !created {
		return err
	}
	if rerr := t.fs.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return errors.Join(err, fmt.Errorf("index: remove %s, created but not made usable: %w", path, rerr))
	}
	return err
}

// Get returns seq's entry: ok false if there is none, an ErrDamaged error if
// the stored one fails its checksum or its file was cut short under the
// mapping (see cutShort).
func (t *Table) Get(seq uint64) (Entry, bool, error) {
	if t == nil {
		return Entry{}, false, errNilTable
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		// Its files are closed: an entry there would read as absent.
		return Entry{}, false, fmt.Errorf("index: entry of message %d: %w", seq, ErrClosed)
	}
	if e, ok := t.overlay.get(seq); ok {
		return e, true, nil
	}
	if e, ok := t.flushing.get(seq); ok {
		return e, true, nil
	}
	c := t.chunks[ChunkOf(seq)]
	if c == nil {
		return Entry{}, false, nil
	}
	e, ok, damaged, err := c.entry(seq)
	if err != nil {
		return Entry{}, false, t.cutShort(ChunkOf(seq), err)
	}
	if damaged {
		return Entry{}, false, entryDamage(t.chunkPath(ChunkOf(seq)), seq)
	}
	return e, ok, nil
}

// entry decodes seq's entry from the mapping, as decodeEntry does; err is
// set, wrapping mapfault.ErrFault, when the file no longer backs the page
// (see cutShort). The caller holds the table's mu, shared.
func (c *chunk) entry(seq uint64) (e Entry, ok, damaged bool, err error) {
	defer mapfault.Catch(mapfault.Guard(), &err, c.m)
	off := int(seq%ChunkEntries) * EntrySize
	e, ok, damaged = decodeEntry(seq, c.m[off:off+EntrySize])
	return e, ok, damaged, nil
}

// cutShort is the error of a read of chunk n's mapping that faulted
// (err): a page the file no longer backs, the file cut short since it was
// mapped (OpenTable checks its size). Reading such a page raises SIGBUS,
// which would end the process; it is damage to the file, as an entry that
// fails its checksum is, and the table is rebuilt from the log.
func (t *Table) cutShort(n uint64, err error) error {
	return fmt.Errorf("%w: %s, cut short since it was opened: %w", ErrDamaged, t.chunkPath(n), err)
}

// NextStream returns the smallest sequence in [from, to] whose entry says
// it is a stream message of queue, and ok false if there is none. It
// reads the queue field of each entry on the way (Get reads and checks
// the entry it lands on), so a queue whose messages are few among another
// queue's many steps over those without decoding them. It checks the
// checksum of every entry of the chunk files it steps over, though: a
// damaged queue field makes an entry of this queue read as another
// queue's, or as no stream message, and passed over unseen it left the
// messages after it to be handed out first. The first entry that fails
// its checksum before the answer ends the search with an ErrDamaged error
// naming its file and offset; a file cut short under its mapping ends it
// with an ErrDamaged error naming the file (see cutShort). (An entry in
// memory, newer than the files' or not in them yet, takes the place of
// the files' one, which a Flush may be writing: that one is not judged.) Once Close has been called it
// fails with ErrClosed, as Get does: its files are gone, and an answer
// from the entries in memory alone, or none, would be taken for the
// stream's. So does it on a nil *Table (errNilTable), which has no
// stream to answer for either.
func (t *Table) NextStream(queue uint32, from, to uint64) (uint64, bool, error) {
	if t == nil {
		return 0, false, errNilTable
	}
	want := queueField(queue, true)
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return 0, false, fmt.Errorf("index: next stream entry of queue %d from message %d: %w", queue, from, ErrClosed)
	}
	best, found := to, false
	damaged, bad := uint64(0), false
	var faulted error // the file of the chunk being read was cut short: see cutShort
	buf := new(crcBuf)
	// scan looks for the first entry in chunk n, up to best, checking
	// each one it steps over.
	scan := func(n uint64) bool {
		c := t.chunks[n]
		if c == nil {
			return false
		}
		base := n * ChunkEntries
		lo, hi := max(from, base)-base, min(best, base+ChunkEntries-1)-base
		i, hit, broken, err := t.scanChunk(c, base, lo, hi, want, buf)
		switch {
		case err != nil:
			best, faulted, bad = base+i, t.cutShort(n, err), true
		case hit:
			best, found = base+i, true
		case broken:
			best, damaged, bad = base+i, base+i, true
		}
		return err != nil || hit || broken
	}
	// The chunks of the range, in order: stepped through, or, when the
	// range spans more chunk numbers than there are chunks, picked out.
	if first, last := ChunkOf(from), ChunkOf(to); last-first < uint64(len(t.chunks)) {
		for n := first; n <= last; n++ {
			if scan(n) {
				break
			}
		}
	} else {
		var in []uint64
		for n := range t.chunks {
			if n >= first && n <= last {
				in = append(in, n)
			}
		}
		slices.Sort(in)
		for _, n := range in {
			if scan(n) {
				break
			}
		}
	}
	// An entry in memory is newer than the files' (or not in them yet): look
	// for one before what the files gave. One before the damage comes
	// first; the damage is met by the next search, from past it.
	for _, set := range []*entrySet{t.overlay, t.flushing} {
		if seq, ok := set.nextOf(queue, from, best); ok && (!(found || bad) || seq < best) {
			best, found, bad = seq, true, false
		}
	}
	if bad && faulted != nil {
		return 0, false, faulted
	}
	if bad {
		return 0, false, entryDamage(t.chunkPath(ChunkOf(damaged)), damaged)
	}
	if !found {
		return 0, false, nil
	}
	return best, true, nil
}

// scanChunk looks through the entries lo to hi of chunk c, whose first
// sequence is base, for the first whose queue field is want (hit) or that
// fails its checksum, computed in buf, with no entry in memory to take its
// place (broken), and returns its index. err is set, wrapping
// mapfault.ErrFault, when the file no longer backs a page read (see
// cutShort), i then at or before the entry whose read faulted. The caller
// holds mu, shared.
func (t *Table) scanChunk(c *chunk, base, lo, hi uint64, want uint32, buf *crcBuf) (i uint64, hit, broken bool, err error) {
	defer mapfault.Catch(mapfault.Guard(), &err, c.m)
	for i = lo; i <= hi; i++ {
		e := c.m[i*EntrySize : i*EntrySize+EntrySize]
		if binary.LittleEndian.Uint32(e[16:]) == want {
			return i, true, false, nil
		}
		if !intact(buf, base+i, e) && !t.inMemory(base+i) {
			return i, false, true, nil
		}
	}
	return i, false, false, nil
}

// inMemory reports whether the table holds seq's entry in memory (the
// overlay, or a flush under way), which takes the place of the files'.
// The caller holds mu.
func (t *Table) inMemory(seq uint64) bool {
	if _, ok := t.overlay.get(seq); ok {
		return true
	}
	_, ok := t.flushing.get(seq)
	return ok
}

// Put records e, in memory until the next Flush.
func (t *Table) Put(e Entry) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if t.overlay == nil {
		t.overlay = newEntrySet() // the zero Table
	}
	t.overlay.put(e)
	t.mu.Unlock()
}

// Unflushed is the number of entries held in memory.
func (t *Table) Unflushed() int {
	if t == nil {
		return 0
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.overlay.len()
}

// Detach takes the entries recorded so far for the next Flush. Entries Put
// after it wait for the Flush after that. Until Flush returns, Get still
// finds the detached entries.
func (t *Table) Detach() { t.detach(nil) }

// detach is Detach, leaving out the entries of the chunks gone reports
// true for (nil: none), which Get no longer finds in memory: Index.Snapshot
// leaves out those of the chunks that hold no live message (see there).
func (t *Table) detach(gone func(chunk uint64) bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.overlay == nil {
		t.overlay = newEntrySet() // the zero Table
	}
	if t.flushing != nil {
		// A flush that failed: keep what it did not write, behind the
		// newer entries.
		t.overlay.putAll(t.flushing)
	}
	if gone != nil {
		t.overlay.dropChunks(gone)
	}
	t.flushing = t.overlay
	t.overlay = newEntrySet()
}

// Flush writes the detached entries to their chunk files (creating those
// that are missing) and, when sync is set, fdatasyncs every chunk written
// since its last sync and the directory. It returns the chunks that were
// created. A table in memory only flushes nothing: with entries detached,
// it fails and keeps them.
func (t *Table) Flush(sync bool) ([]uint64, error) {
	if t == nil {
		return nil, errNilTable
	}
	t.mu.RLock()
	pending, closed := t.flushing, t.closed
	t.mu.RUnlock()
	if closed {
		return nil, fmt.Errorf("index: flush: %w", ErrClosed)
	}
	if t.fs == nil {
		if n := pending.len(); n > 0 {
			return nil, errMemoryOnly(fmt.Sprintf("flush of %d entries", n))
		}
		return nil, nil
	}
	var created []uint64
	var buf []byte
	// The entries come in order, in runs of consecutive sequences within
	// a chunk: one write per run, not one per entry (a checkpoint after a
	// busy half segment writes hundreds of thousands of them).
	var err error
	if pending != nil {
		err = pending.runs(func(run []Entry) error {
			n := ChunkOf(run[0].Seq)
			for _, e := range run {
				// A queue number takes 31 bits: above them it would be
				// written as another queue's stream message.
				if e.Queue > maxQueueID {
					return fmt.Errorf("index: flush: the entry of message %d names queue %d, above the highest queue number %d: %w",
						e.Seq, e.Queue, maxQueueID, os.ErrInvalid)
				}
			}
			t.mu.RLock()
			c, closed := t.chunks[n], t.closed
			t.mu.RUnlock()
			if closed {
				return fmt.Errorf("index: flush: %w", ErrClosed)
			}
			if c == nil {
				var err error
				if c, err = t.openChunk(n, true); err != nil {
					return fmt.Errorf("index: create %s: %w", chunkName(n), err)
				}
				t.mu.Lock()
				if t.closed {
					// Close ran while the file was made: it closed every
					// chunk it knew, so this one is given up here.
					t.mu.Unlock()
					err := errors.Join(c.m.Unmap(), c.f.Close(), t.fs.Remove(filepath.Join(t.dir, chunkName(n))))
					return errors.Join(fmt.Errorf("index: flush: %w", ErrClosed), err)
				}
				t.chunks[n] = c
				t.dirDirty = true
				t.mu.Unlock()
				created = append(created, n)
			}
			buf = slices.Grow(buf[:0], len(run)*EntrySize)[:len(run)*EntrySize]
			for i, e := range run {
				e.encode(buf[i*EntrySize:])
			}
			if _, err := c.f.WriteAt(buf, int64(run[0].Seq%ChunkEntries)*EntrySize); err != nil {
				return fmt.Errorf("index: write %s: %w", chunkName(n), t.closedOr(err))
			}
			t.mu.Lock()
			t.dirty[n] = true
			t.mu.Unlock()
			return nil
		})
	}
	if err != nil {
		return created, err
	}
	if sync {
		t.mu.RLock()
		var dirty []*chunk
		for n := range t.dirty {
			if c := t.chunks[n]; c != nil {
				dirty = append(dirty, c)
			}
		}
		dirDirty, closed := t.dirDirty, t.closed
		t.mu.RUnlock()
		if closed {
			// Close took the chunks written above: none can be synced.
			return created, fmt.Errorf("index: flush: %w", ErrClosed)
		}
		for _, c := range dirty {
			if err := c.f.Sync(); err != nil {
				return created, fmt.Errorf("index: sync %s: %w", c.f.Name(), t.closedOr(err))
			}
		}
		// The directory too, for a chunk created or removed by an earlier
		// call (an open's replay flushes without a sync).
		if dirDirty {
			if err := t.syncDir(); err != nil {
				return created, err
			}
		}
		t.mu.Lock()
		clear(t.dirty)
		t.mu.Unlock()
	}
	t.mu.Lock()
	t.flushing = nil
	t.mu.Unlock()
	return created, nil
}

// closedOr is ErrClosed once Close has run (it closed the files under a
// write or a sync that then failed), and err otherwise.
func (t *Table) closedOr(err error) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return ErrClosed
	}
	return err
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Chunks returns the chunks that have files, sorted.
func (t *Table) Chunks() []uint64 {
	if t == nil {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]uint64, 0, len(t.chunks))
	for n := range t.chunks {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Remove deletes chunk n's file. The removal is durable after the next
// SyncDir of the table's directory (Flush with sync, or SyncDir). The
// chunk leaves the table whatever happens; a file that cannot be unlinked
// stays on disk as a leftover (see Leftovers), named in the error, for
// RemoveLeftovers to try again. Remove is for a chunk none of whose
// messages is live and all of whose sequences are taken: no entry is
// written to it again.
func (t *Table) Remove(n uint64) error {
	if t == nil {
		return errNilTable
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return fmt.Errorf("index: remove %s: %w", chunkName(n), ErrClosed)
	}
	c := t.chunks[n]
	delete(t.chunks, n)
	delete(t.dirty, n)
	if c != nil {
		t.dirDirty = true
	}
	t.mu.Unlock()
	if c == nil {
		return nil
	}
	err := errors.Join(c.m.Unmap(), c.f.Close())
	return errors.Join(err, t.unlink(n))
}

// unlink removes chunk n's file, which is out of the table, and keeps n
// among the leftovers while it fails.
func (t *Table) unlink(n uint64) error {
	err := t.fs.Remove(t.chunkPath(n))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if t.leftover == nil {
			t.leftover = map[uint64]bool{}
		}
		t.leftover[n] = true
		return err
	}
	delete(t.leftover, n)
	t.dirDirty = true
	return nil
}

// Leftovers returns the chunks, sorted, whose file Remove could not unlink
// and no RemoveLeftovers has removed since: files on disk that the table
// no longer has (LeftoverBytes is their size).
func (t *Table) Leftovers() []uint64 {
	if t == nil {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Sorted(maps.Keys(t.leftover))
}

// LeftoverBytes is the size of the leftover files (see Leftovers).
func (t *Table) LeftoverBytes() int64 { return int64(len(t.Leftovers())) * chunkBytes }

// RemoveLeftovers tries again to unlink every leftover file (see Remove)
// and returns the failures, each naming its file; those it removes leave
// the leftovers, durably after the next SyncDir. The checkpointer calls
// it, as it calls Remove. After Close it does nothing: the next OpenTable
// removes every file of a chunk not wanted.
func (t *Table) RemoveLeftovers() error {
	if t == nil {
		return errNilTable
	}
	t.mu.RLock()
	closed := t.closed
	t.mu.RUnlock()
	if closed {
		return nil
	}
	var errs []error
	for _, n := range t.Leftovers() {
		errs = append(errs, t.unlink(n))
	}
	return errors.Join(errs...)
}

// SyncDir makes removals durable.
func (t *Table) SyncDir() error {
	if t == nil {
		return errNilTable
	}
	if t.closedOr(nil) != nil {
		return fmt.Errorf("index: sync %s: %w", t.dir, ErrClosed)
	}
	if t.fs == nil {
		return errMemoryOnly("sync of the directory")
	}
	return t.syncDir()
}

// syncDir syncs the table's directory and, when that succeeds, marks the
// names made or removed before it as durable. A name made or removed
// while it ran is marked again by its maker.
func (t *Table) syncDir() error {
	t.mu.Lock()
	t.dirDirty = false
	t.mu.Unlock()
	if err := t.fs.SyncDir(t.dir); err != nil {
		t.mu.Lock()
		t.dirDirty = true
		t.mu.Unlock()
		return fmt.Errorf("index: sync %s: %w", t.dir, err)
	}
	return nil
}

// Bytes is the size of the chunk files, leftovers not included (see
// Leftovers).
func (t *Table) Bytes() int64 {
	if t == nil {
		return 0
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return int64(len(t.chunks)) * chunkBytes
}

// Close unmaps and closes every chunk file. Entries not flushed are lost.
// After it, Get, NextStream, Flush, Remove and SyncDir fail with
// ErrClosed; closing again does nothing.
func (t *Table) Close() error {
	if t == nil {
		return errNilTable
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	var err error
	for n, c := range t.chunks {
		err = errors.Join(err, c.m.Unmap(), c.f.Close())
		delete(t.chunks, n)
	}
	return err
}
