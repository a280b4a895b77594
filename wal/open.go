package wal

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// Recovery is what Open found in the directory and what it did about it.
type Recovery struct {
	// Segments counts the segments the log holds after recovery; Records
	// the records in those it scanned (not those Options.Sealed vouched for).
	Segments int
	Records  int
	// TornTail is set when the last segment ended, past every point Open
	// knew durable (a clean Close's end, Options.Verified and
	// Options.Durable), in bytes that do not read as frames: taken as a
	// write a crash cut short, which no fdatasync had covered, they were
	// zeroed. Bytes before such a point are never taken for a torn tail:
	// Open refuses their damage, and Salvage reports it in Salvaged.
	// (Damage on the device to records synced after the last such point
	// reads as a torn tail too: no format tells them apart; see the
	// segment package.) Its Length runs to the file's last non-zero
	// byte: in a reused file, that may count bytes of the segment it
	// held before, zeroed with the tail.
	TornTail *Damage
	// Salvaged lists the spans Options.Salvage skipped. Their records are
	// lost; the damaged files were copied aside first (Damage.CopiedTo).
	// They include, in the last segment, the bytes from the end of its
	// valid frames to where the log was known durable, when damage or a
	// cut file took records there; and a span for each segment file that
	// was gone (Options.Salvage), with no copy (CopiedTo is empty).
	Salvaged []Damage
	// Unfinished is set when some of Salvaged were listed by an earlier
	// Open with Salvage that did not finish (see Options.Salvage): a
	// caller that builds its own report of a salvage looks for what it
	// kept of that Open's.
	Unfinished bool
	// RemovedEmpty lists empty segment files left by a rotation that a
	// crash interrupted; they never held a record and were removed.
	RemovedEmpty []string
}

// Damage describes bytes of a segment that recovery discarded.
type Damage struct {
	File     string
	Segment  uint32 // the segment's sequence
	Offset   int    // first byte discarded
	Length   int    // bytes discarded (up to MaxSegmentBytes for a segment file that is gone, or cut short: its size is not known)
	Cause    error
	CopiedTo string // where salvage copied the damaged file, if it did
}

func (d Damage) String() string {
	return fmt.Sprintf("%s: %d bytes at offset %d (%v)", d.File, d.Length, d.Offset, d.Cause)
}

// Open opens the log in dir, creating the directory (0700) if it is missing
// and making its name durable whether it created it or found it (an Open
// that created it may have died before it did: see vfs.MkdirAllDurable),
// and recovers it:
//
//   - a torn tail of the last segment (bytes past where the log was known
//     durable that do not read as frames, taken as never made durable)
//     is zeroed and the log continues before it;
//   - mid-log corruption is refused with a *CorruptionError naming the file
//     and offset, unless Options.Salvage is set; so is a missing segment
//     file (between two that are there, or after the last up to where the
//     log was known durable), which Salvage replaces by an empty segment;
//   - an empty segment that a rotation a crash interrupted left after an
//     unsealed one is removed (one after a sealed segment is the log's
//     last, where the rotation had got to, and is kept);
//   - a segment of a later format version than this build writes, or
//     whose header sets a flag or reserved byte a later build gave a
//     meaning (segment.ErrVersion, which wraps errors.ErrUnsupported), is refused,
//     Salvage or not, and no file is changed: it is not damage, and only a
//     build that reads that version may open the log. Only a header Open
//     reads is checked: that of the last segment, and of every segment
//     Options.Sealed does not vouch for (nor any with Salvage);
//   - an I/O error reading a file (the clean mark, a salvage's list, a
//     segment) fails Open, naming the file and the cause: only a file
//     that is not there, or that fails its checks, is taken for missing
//     or damaged and repaired or dropped.
//
// Open takes an exclusive lock on the directory: a second Open, in this
// process or another, fails with ErrLocked until the first Log is closed or
// its process dies.
func Open(dir string, opts Options) (*Log, error) {
	if dir == "" {
		// Not the current directory by default: a log is opened where
		// its caller means it to be.
		return nil, fmt.Errorf("wal: open: the directory path is empty: %w", iofs.ErrInvalid)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// Resolved once, as the kernel takes the names ("link/.." climbs out
	// of the link's target): the directory made and synced, its lock and
	// its segments are then one place, whatever links and ".." dir holds.
	if err := vfs.CheckPath(dir); err != nil {
		return nil, fmt.Errorf("wal: open: %w", err) // quoted there: the path holds a NUL
	}
	given := dir
	if dir, err = vfs.Resolve(dir); err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", given, err)
	}
	fs := opts.FS
	if err := vfs.MkdirAllDurable(fs, dir, 0o700); err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	lock, err := fs.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	l := &Log{
		dir:        dir,
		opts:       opts,
		lock:       lock,
		kick:       make(chan struct{}, 1),
		open:       newBatch(nil),
		writerDone: make(chan struct{}),
	}
	l.segs.Store(&[]*seg{})
	if err := l.recover(); err != nil {
		for _, s := range *l.segs.Load() {
			_ = s.close()
		}
		_ = lock.Close()
		return nil, err
	}
	// The next segment is asked for at the first write (commit), not
	// here: a caller that refuses what the log holds (a record of a later
	// build's) closes it having written nothing, and the preparer would
	// have reused a spare (its name and header rewritten) or made a new
	// file, changing the directory of a store that was refused.
	l.prep = newPreparer(l)
	go l.writeLoop()
	return l, nil
}

// recover scans every segment, repairs what may be repaired and leaves the
// writer positioned at the end of the last segment: it reads the directory,
// opens and scans each segment, drops the empty segment a crash in a
// rotation may leave, repairs or refuses what the scans found, forgets the
// clean mark, and makes durable what the log is about to build on.
func (l *Log) recover() error {
	if err := vfs.CheckDir(l.opts.FS, filepath.Join(l.dir, salvageDirName)); err != nil {
		// A salvage writes its copies and its list there: a link
		// planted in its place would have them written wherever it
		// points, payloads included.
		return fmt.Errorf("wal: open %s: %w", l.dir, err)
	}
	prior, listed, err := l.readUnfinished()
	if err != nil {
		return err
	}
	if listed {
		if !l.opts.Salvage {
			return l.unfinishedError(prior)
		}
		l.recovery.Salvaged, l.recovery.Unfinished, l.unfinished = prior, true, true
	}
	d, err := l.readDir()
	if err != nil {
		return err
	}
	segs, reports, cleanLast, err := l.scanSegments(d)
	if err != nil {
		return err
	}
	for _, path := range d.stale {
		if err := l.opts.FS.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wal: open %s: %w", l.dir, err)
		}
	}
	scanned := len(segs)
	if segs, reports, err = l.dropInterruptedRotation(segs, reports); err != nil {
		return err
	}
	if n := len(segs); l.opts.Salvage && n > 0 && n < scanned {
		// The segment a dropped rotation left last was scanned as one a
		// later segment followed, where a torn tail is damage that
		// Salvage steps over and reports lost. It is the last: scanned
		// again as such, its torn tail (a batch the rotation had not yet
		// synced when a crash cut it) is zeroed as without Salvage, and
		// only what it lost before its durable end is reported.
		s := segs[n-1]
		reports[n-1] = l.scanSegment(s.file, s.seq, true, l.durableIn(d, s.seq))
	}
	if err := l.repair(segs, reports); err != nil {
		return err
	}
	if err := l.forgetCleanMark(d); err != nil {
		return err
	}
	if err := l.startWriting(segs, reports, cleanLast); err != nil {
		return err
	}
	if l.opts.KeepSalvageList {
		return nil // SalvageDone
	}
	if err := l.finishSalvage(); err != nil {
		// The log is open and its report is built: a list that stays (or
		// comes back, its removal not durable) only makes the next Open
		// without Salvage refuse the log until one with it reports the
		// spans again.
		l.logLater(func(log *slog.Logger) {
			log.Warn("wal: open: the salvage is reported, but the list of the spans it repaired could not be removed", "dir", l.dir, "err", err)
		})
	}
	return nil
}

// listing is what recover found in the directory.
type listing struct {
	names []string
	stale []string // temporary files to remove once the log is accepted
	seqs  []uint32 // the segments, in order, without gaps
	// missing lists the segments of seqs whose files are gone: those
	// between two that are there, and those after the last up to where
	// the log was known durable. Only Salvage lists any (readDir refuses
	// them otherwise); it puts an empty segment in their place.
	missing  map[uint32]bool
	clean    Position // where the log ended at its last Close, if hasClean
	hasClean bool
}

// readDir lists the directory: it keeps retired segments of full size as
// spares, lists other temporary files for removal, and refuses a gap
// between segments, or a clean mark or a position the caller knows durable
// (Options.Verified, Options.Durable) that names a segment that is gone;
// with Salvage, it lists those segments as missing instead (listMissing).
func (l *Log) readDir() (listing, error) {
	fs := l.opts.FS
	names, err := fs.ReadDir(l.dir)
	if err != nil {
		return listing{}, fmt.Errorf("wal: open %s: %w", l.dir, err)
	}
	d := listing{names: names}
	if d.clean, d.hasClean, err = readCleanMark(fs, l.dir); err != nil {
		return listing{}, fmt.Errorf("wal: open %s: %w", l.dir, err)
	}
	for _, name := range names {
		if name == cleanName {
			continue // removed once recovery has succeeded (forgetCleanMark)
		}
		if strings.HasSuffix(name, tmpSuffix) {
			// Never part of the log. A retired segment of full size is
			// kept for reuse (the directory sync in forgetCleanMark makes
			// its name durable before it is); anything else — a segment
			// whose preparation a crash cut short, say — is removed, but
			// only once the segments are known to be in a format this
			// build reads (see recover): an Open that refuses a later
			// build's log changes none of its files.
			path := filepath.Join(l.dir, name)
			if strings.HasPrefix(name, sparePrefix) && len(l.spares) < maxSpares && l.fullSize(path) {
				l.spares = append(l.spares, path)
				continue
			}
			d.stale = append(d.stale, path)
			continue
		}
		if seq, ok := parseSegName(name); ok {
			d.seqs = append(d.seqs, seq) // ReadDir sorts, and the names are fixed-width
		}
	}
	if l.opts.Salvage {
		if err := l.listMissing(&d); err != nil {
			return listing{}, err
		}
	}
	seqs, clean := d.seqs, d.clean
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			// Both neighbours named: the file after the gap may be the
			// one that does not belong (a stray name far past the last
			// segment), which the missing file's name alone hides.
			return listing{}, &CorruptionError{File: l.segPath(seqs[i-1] + 1),
				Cause: fmt.Errorf("segment file missing: %s is followed by %s", segName(seqs[i-1]), segName(seqs[i]))}
		}
	}
	if d.hasClean && !l.opts.Salvage && (len(seqs) == 0 || clean.Segment() > seqs[len(seqs)-1] || clean.Segment() < seqs[0]) {
		return listing{}, &CorruptionError{File: l.segPath(clean.Segment()), Offset: clean.Offset(),
			Cause: fmt.Errorf("the log ended at %v when it was last closed, and that segment is gone", clean)}
	}
	// A position the caller knows durable vouches as the clean mark does
	// for the segments up to its own: one past the last segment there,
	// and past that segment's header, held synced records. (One before
	// the first is not: the log removes its oldest segments as it goes.)
	if known := max(l.opts.Verified, l.opts.Durable); !l.opts.Salvage && known.Offset() > segment.HeaderSize && (len(seqs) == 0 || known.Segment() > seqs[len(seqs)-1]) {
		return listing{}, &CorruptionError{File: l.segPath(known.Segment()), Offset: known.Offset(),
			Cause: fmt.Errorf("segment file missing: the log was known durable to %v (Options.Verified or Options.Durable): synced records are gone", known)}
	}
	return d, nil
}

// listMissing adds to d the segments whose files are gone (d.missing):
// those between two segments that are there, and those after the last up
// to where the log was known durable (the clean mark, Options.Verified or
// Options.Durable), when that is past the segment's header: they held
// synced records. Segments before the first are not missing: the log
// removes its oldest segments as it goes. When none is there, the segment
// where the log was known durable is the one missing (those before it
// may have been removed). More than maxMissing of them is no lost file
// or two but a stray name (a file of another log, or a sequence far past
// the last): refused, as without Salvage, rather than a file made for
// each.
func (l *Log) listMissing(d *listing) error {
	durable := max(l.opts.Verified, l.opts.Durable)
	if d.hasClean {
		durable = max(durable, d.clean)
	}
	if len(d.seqs) == 0 {
		if durable.Offset() > segment.HeaderSize {
			d.seqs, d.missing = []uint32{durable.Segment()}, map[uint32]bool{durable.Segment(): true}
		}
		return nil
	}
	last := d.seqs[len(d.seqs)-1]
	if durable.Segment() > last && durable.Offset() > segment.HeaderSize {
		last = durable.Segment()
	}
	if n := uint64(last) - uint64(d.seqs[0]) + 1 - uint64(len(d.seqs)); n > maxMissing {
		return &CorruptionError{File: l.segPath(last), Cause: fmt.Errorf("%d segment files missing between segments %d and %d: more than Salvage replaces (%d); is a file of another log in the directory?",
			n, d.seqs[0], last, maxMissing)}
	}
	d.missing = map[uint32]bool{}
	var seqs []uint32
	for seq := d.seqs[0]; ; seq++ {
		if _, there := slices.BinarySearch(d.seqs, seq); !there {
			d.missing[seq] = true
		}
		seqs = append(seqs, seq)
		if seq == last {
			break
		}
	}
	d.seqs = seqs
	return nil
}

// maxMissing is the most segment files Salvage replaces by empty ones
// (see listMissing).
const maxMissing = 64

// forgetCleanMark removes the clean mark, if there is one, and syncs the
// directory as recovery leaves it.
func (l *Log) forgetCleanMark(d listing) error {
	fs := l.opts.FS
	if d.hasClean || slices.Contains(d.names, cleanName) {
		// Removed (durably, below) before anything is appended: a later
		// crash must not find a mark this open's writes made false. Kept
		// when recovery fails, so that the next attempt knows it too.
		if err := fs.Remove(filepath.Join(l.dir, cleanName)); err != nil {
			return fmt.Errorf("wal: open %s: %w", l.dir, err)
		}
	}
	// The directory as this open leaves it, durably, before anything is
	// appended: the removals above, and names a crash may have left only
	// in the page cache (a segment renamed into place just before it),
	// which the log is about to build on.
	if err := fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("wal: open: sync dir: %w", err)
	}
	return nil
}

// startWriting makes durable what the log is about to build on (the
// segment before the one appended to, and the last one's content, unless
// the clean mark vouched for them) and positions the writer at the end of
// the last segment, or at the start of a new one after a sealed one.
func (l *Log) startWriting(segs []*seg, reports []segment.Report, cleanLast bool) error {
	if n := len(segs); n > 0 && !cleanLast {
		// A crash between a rotation's seal and its fdatasync leaves the
		// seal only in the page cache (a rotation of an earlier build,
		// which did not sync the records before the seal first, may have
		// left them there too), with the next segment, durable and
		// empty, after it: the segment before the one appended to must
		// be made durable before anything is, or a power loss would
		// leave records behind a segment that reads as unsealed.
		// Rotation syncs the old segment before it writes to the new
		// one, so no segment before that one can be in this state.
		i := n - 1 // the last, if sealed, precedes a new one
		if !reports[i].Sealed {
			i--
		}
		if i >= 0 {
			if err := l.makeDurableAgain(segs[i], reports[i], i == n-1); err != nil {
				return err
			}
		}
	}
	if len(segs) == 0 || reports[len(reports)-1].Sealed {
		next := uint32(1)
		if len(segs) > 0 {
			var err error
			if next, err = l.nextSeq(segs[len(segs)-1].seq); err != nil {
				return fmt.Errorf("wal: open: %w", err)
			}
		}
		s, err := l.createSegment(next)
		if err != nil {
			return err
		}
		segs = *l.segs.Load() // install appended it
		l.w.active, l.w.writeOff = s, segment.HeaderSize
	} else {
		s := segs[len(segs)-1]
		// Whatever the last segment holds may so far be only in the page
		// cache (a process crash keeps it there): make it durable before
		// frames claim it is. After a clean Close it already is.
		if !cleanLast {
			beforeRewrite(s.file)
			if err := l.makeDurableAgain(s, reports[len(reports)-1], true); err != nil {
				return err
			}
		}
		l.w.active, l.w.writeOff = s, reports[len(reports)-1].End
	}
	l.w.syncedOff = l.w.writeOff
	l.recovery.Segments = len(segs)
	return nil
}

// fullSize reports whether the file at path has the size of a segment.
func (l *Log) fullSize(path string) bool {
	f, err := l.opts.FS.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	size, err := f.Size()
	return err == nil && size == l.opts.SegmentBytes
}

// rewriteAndSync writes the segment's first end bytes again, as the page
// cache holds them, and fdatasyncs it. An fdatasync alone is not enough:
// after a writeback error (an fdatasync that failed, in this process or in
// one that died) Linux leaves the pages that failed clean in the page
// cache, so that reads see bytes no later fdatasync writes, and a power
// loss takes them from under records appended after them. Writing them
// again makes them dirty, and the fdatasync then writes them or fails.
func rewriteAndSync(f *segment.File, end int) error {
	data := f.Data()
	end = min(end, len(data))
	buf := make([]byte, min(1<<20, max(end-segment.HeaderSize, 0)))
	for off := segment.HeaderSize; off < end; off += len(buf) {
		n := copy(buf, data[off:end])
		if err := f.WriteAt(buf[:n], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// makeDurableAgain writes segment s again up to the end of its frames (r,
// its scan's report), as the page cache holds it, fdatasyncs it, and
// checks that it is unchanged; last says whether s is the log's last
// segment.
func (l *Log) makeDurableAgain(s *seg, r segment.Report, last bool) error {
	if err := rewriteAndSync(s.file, r.End); err != nil {
		return fmt.Errorf("wal: open: %w", err)
	}
	if from, ok := l.scannedFrom(r, last); ok {
		return unchanged(s, r, from)
	}
	return nil
}

// unchanged checks that segment s, made durable again by rewriteAndSync,
// still holds the frames its scan found (r): that its frames end where they
// did, and it is sealed if it was. The rewrite writes what the page cache
// holds, and a page that a failed writeback left clean in it may have been
// dropped since the scan, so that a read shows the device's bytes instead;
// those are durable now, and the scan no longer tells what the segment
// holds. Open then fails, and the next Open scans what is there.
//
// It scans again what the scan read, from offset from: the bytes before
// the position Options.Verified gives, where the scan of the last segment
// began, were durable, and the device holds what the page cache does
// there. (A segment Options.Sealed vouched for, unread, is durable too, and
// is not scanned.)
func unchanged(s *seg, r segment.Report, from int) error {
	again, err := segment.ScanFrom(s.file.Data(), s.seq, from, false, func(segment.Frame) error { return nil })
	if err != nil {
		return fmt.Errorf("wal: open: %w", err)
	}
	if again.End != r.End || again.Sealed != r.Sealed {
		return fmt.Errorf("wal: open: %s changed while it was made durable again: its frames end at offset %d (sealed: %t), where the scan found them ending at %d (sealed: %t); the page cache dropped bytes a failed writeback had left in it, and the device's show instead: open the log again",
			s.file.Path(), again.End, again.Sealed, r.End, r.Sealed)
	}
	return nil
}

// scannedFrom returns where the scan that reported r began: the header's
// end, or, for the last segment (last) scanned from Options.Verified
// (verifiedTail), that position; false for a segment Options.Sealed
// vouched for unread (trustedSeal).
func (l *Log) scannedFrom(r segment.Report, last bool) (int, bool) {
	switch {
	case r.Records >= 0:
		return segment.HeaderSize, true
	case last:
		return l.opts.Verified.Offset(), true
	}
	return 0, false
}

// beforeRewrite runs in Open before the last segment is made durable
// again (tests change the page cache there).
var beforeRewrite = func(*segment.File) {}

// createSegment makes segment seq synchronously and puts it in place:
// prepared under a temporary name, renamed, directory synced.
func (l *Log) createSegment(seq uint32) (*seg, error) {
	tmp := l.segPath(seq) + tmpSuffix
	f, err := segment.Create(l.opts.FS, tmp, seq, segment.NewSalt(), l.opts.SegmentBytes)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	s := &seg{file: f, seq: seq}
	if err := l.install(s); err != nil {
		_ = f.Close()
		return nil, err
	}
	s.end.Store(segment.HeaderSize)
	return s, nil
}
