package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

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
		return nil, errors.New("wal: open: the directory path is empty")
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

// scanSegments opens each segment of d and reports how its frames end,
// reading as little as what vouches for it allows (a trusted seal, the
// clean mark, a verified position). cleanLast says that the clean mark
// vouched for the last segment's end. The segments opened are in l.segs,
// for Open to close, whatever the error.
func (l *Log) scanSegments(d listing) (segs []*seg, reports []segment.Report, cleanLast bool, err error) {
	fs := l.opts.FS
	seqs, clean, hasClean := d.seqs, d.clean, d.hasClean
	defer func() { l.segs.Store(&segs) }()
	if l.opts.Salvage {
		if err := l.checkVersions(d); err != nil {
			return nil, nil, false, err
		}
	}
	for _, seq := range seqs {
		open := segment.Open
		if _, ok := l.opts.Sealed[seq]; ok && !l.opts.Salvage && seq != seqs[len(seqs)-1] {
			// Vouched for: nothing of it is read now (a cold open of a
			// large log would otherwise read a page or two per segment).
			open = segment.OpenUnread
		}
		var f *segment.File
		var err error
		if d.missing[seq] {
			f, err = l.salvageMissing(seq, seq == seqs[len(seqs)-1])
		} else {
			f, err = open(fs, l.segPath(seq), seq)
		}
		if err != nil && errors.Is(err, segment.ErrBadHeader) && l.opts.Salvage {
			f, err = l.salvageHeader(seq, err)
		}
		if err != nil {
			if errors.Is(err, segment.ErrBadHeader) {
				return segs, nil, false, &CorruptionError{File: l.segPath(seq), Offset: 0, Cause: err}
			}
			if errors.Is(err, segment.ErrVersion) {
				return segs, nil, false, versionError(err)
			}
			return segs, nil, false, fmt.Errorf("wal: open: %w", err)
		}
		segs = append(segs, &seg{file: f, seq: seq})
		if r, ok := l.trustedSeal(f, seq, seq == seqs[len(seqs)-1]); ok {
			reports = append(reports, r)
			continue
		}
		if hasClean && !l.opts.Salvage && seq == clean.Segment() && clean.Offset() > f.Size() {
			return segs, nil, false, &CorruptionError{File: l.segPath(seq), Offset: f.Size(),
				Cause: fmt.Errorf("the file has %d bytes, but the log ended at offset %d when it was last closed: synced records are gone", f.Size(), clean.Offset())}
		}
		if r, ok := l.cleanTail(f, seq, seq == seqs[len(seqs)-1], clean, hasClean); ok {
			reports = append(reports, r)
			cleanLast = true
			continue
		}
		if r, ok := l.verifiedTail(f, seq, seq == seqs[len(seqs)-1]); ok {
			reports = append(reports, r)
			continue
		}
		reports = append(reports, l.scanSegment(f, seq, seq == seqs[len(seqs)-1], l.durableIn(d, seq)))
	}
	return segs, reports, cleanLast, nil
}

// scanSegment scans segment seq, its file f, whole, and reports how its
// frames end: as the last segment (last) or as one a later segment
// follows, where a torn tail is damage, which Salvage steps over; and
// against durable, how far it was known durable (durableIn), before
// which the frames' end is damage, never a torn tail.
func (l *Log) scanSegment(f *segment.File, seq uint32, last bool, durable int) segment.Report {
	r, _ := f.Scan(l.opts.Salvage, func(segment.Frame) error { return nil })
	if !l.opts.Salvage && durable > r.End && r.Tail != segment.EndCorrupt {
		// The valid frames end before bytes known durable (a clean
		// Close, or the caller's verified position, vouched for
		// them): what follows is damage to synced records, not a
		// batch a crash cut short, and zeroing it as a torn tail
		// would drop them.
		cause := r.Cause
		if r.Tail == segment.EndClean {
			r.DamageAt, cause = r.End, errors.New("no frame")
		}
		r.Tail = segment.EndCorrupt
		r.Cause = fmt.Errorf("the log was durable to offset %d, its frames end at %d: %w", durable, r.End, cause)
	}
	for l.opts.Salvage && (!last || durable > r.End) && r.Tail == segment.EndTorn && !r.Sealed {
		// A segment a later one follows, or one known durable past
		// this point, has no tail to tear here: what reads as a torn
		// tail is damage. Step over it to the next group, if there is
		// one far enough for a padding frame, and on over each such
		// damage after it.
		next, ok := segment.Resume(f.Data(), seq, r.End+1)
		if !ok || next-r.End < segment.Size(0) {
			break
		}
		rest, _ := segment.ScanFrom(f.Data(), seq, next, true, func(segment.Frame) error { return nil })
		span := segment.Span{From: r.End, To: next, At: r.DamageAt, Cause: r.Cause}
		rest.Skipped = slices.Concat(r.Skipped, []segment.Span{span}, rest.Skipped)
		if rest.Cause == nil {
			rest.DamageAt, rest.Cause = r.DamageAt, r.Cause
		}
		rest.Records += r.Records
		r = rest
	}
	if l.opts.Salvage && last && durable > r.End && r.Tail != segment.EndCorrupt && !r.Sealed {
		// No frame follows the damage before the durable end (or
		// the file ends before it): the bytes up to it held synced
		// records, lost. They are a salvaged span, never a torn
		// tail; what lies past the durable end is the segment's
		// tail as ever.
		r = salvageToDurable(f, seq, r, durable)
	}
	return r
}

// checkVersions refuses a log any segment of which names a later format
// version than this build writes, before a salvage changes any file:
// scanSegments repairs each segment as it meets it (a damaged header
// rewritten as this build's version, a missing file replaced by an empty
// segment), and would otherwise have changed the segments before the one
// it refuses. A header that fails its checks is left to the salvage: it
// says no version.
func (l *Log) checkVersions(d listing) error {
	for _, seq := range d.seqs {
		if d.missing[seq] {
			continue
		}
		f, err := segment.Open(l.opts.FS, l.segPath(seq), seq)
		switch {
		case err == nil:
			_ = f.Close()
		case errors.Is(err, segment.ErrVersion):
			return versionError(err)
		case !errors.Is(err, segment.ErrBadHeader):
			return fmt.Errorf("wal: open: %w", err)
		}
	}
	return nil
}

// versionError is Open's refusal of a segment of a later format version
// (err wraps segment.ErrVersion). Not damage: a later build's log, which
// only such a build may open (salvage would rewrite the header and drop
// its frames).
func versionError(err error) error {
	return fmt.Errorf("wal: open: %w; open the log with a build that reads that version (Salvage does not apply)", err)
}

// durableIn is how far segment seq of d was known durable: to the clean
// mark, Options.Verified or Options.Durable, whichever is further; 0 when
// none names it.
func (l *Log) durableIn(d listing, seq uint32) int {
	durable := 0
	if d.hasClean && d.clean.Segment() == seq {
		durable = d.clean.Offset()
	}
	return max(durable, l.knownDurableIn(seq))
}

// knownDurableIn is how far the caller knew segment seq durable
// (Options.Verified, Options.Durable, whichever is further); 0 when
// neither names it.
func (l *Log) knownDurableIn(seq uint32) int {
	durable := 0
	for _, p := range []Position{l.opts.Verified, l.opts.Durable} {
		if p.Segment() == seq {
			durable = max(durable, p.Offset())
		}
	}
	return durable
}

// salvageToDurable reports, as a span salvage skips, the bytes of the last
// segment from r.End, where its valid frames end, to durable, where the log
// was known durable (a clean Close's end, Options.Verified or
// Options.Durable): they held synced records, which are lost. The scan goes
// on from durable when the file reaches it; a file cut before it (its size
// less than durable) is rewritten at full size by the salvage, so that the
// padding over the span fits, and appends go on after it.
func salvageToDurable(f *segment.File, seq uint32, r segment.Report, durable int) segment.Report {
	at, cause := r.DamageAt, r.Cause
	if r.Tail == segment.EndClean || cause == nil {
		at, cause = r.End, errors.New("no frame")
	}
	if durable > f.Size() {
		at, cause = f.Size(), fmt.Errorf("the file has %d bytes", f.Size())
	}
	span := segment.Span{From: r.End, To: durable, At: at,
		Cause: fmt.Errorf("the log was durable to offset %d, its frames end at %d: synced records are gone: %w", durable, r.End, cause)}
	if durable > f.Size() {
		r.Skipped = append(slices.Clone(r.Skipped), span)
		r.End, r.Tail, r.DamageAt, r.Cause = durable, segment.EndClean, span.At, span.Cause
		return r
	}
	rest, _ := segment.ScanFrom(f.Data(), seq, durable, true, func(segment.Frame) error { return nil })
	rest.Skipped = slices.Concat(r.Skipped, []segment.Span{span}, rest.Skipped)
	if rest.Cause == nil {
		rest.DamageAt, rest.Cause = span.At, span.Cause
	}
	rest.Records += r.Records
	return rest
}

// dropInterruptedRotation removes the new, empty segments a rotation that
// a crash interrupted can leave after an unsealed one: the writer seals the
// old segment before it writes anything to the new one, so such a segment
// holds no frame at all: its scan finds no record and ends clean, and its
// bytes past the header are what the preparer left there, zeros or the
// frames of the segment a reused file was (segment.Unwritten). One whose
// scan ends torn or corrupt holds a frame that failed to verify, which is
// damage, however few records the scan got to: it is refused as corrupt
// (repair), not removed. So is one whose scan ends clean with no record
// but whose bytes are of neither kind: its first frame was written and
// damaged so that it reads as no frame of the segment (its sequence
// field, say), and removing it would drop every record in it. Salvage
// copies it aside and reports that frame lost instead (writtenFirstFrame).
func (l *Log) dropInterruptedRotation(segs []*seg, reports []segment.Report) ([]*seg, []segment.Report, error) {
	fs := l.opts.FS
	for n := len(segs); n > 1 && reports[n-1].Records == 0 && reports[n-1].Tail == segment.EndClean && len(reports[n-1].Skipped) == 0 && !reports[n-1].Sealed && !reports[n-2].Sealed; n-- {
		s := segs[n-1]
		if !segment.Unwritten(s.file.Data(), s.seq) {
			cause := fmt.Errorf("no frame of the segment verifies, but it is not one a rotation that a crash interrupted left empty (segment %d before it is not sealed): its bytes past the header are neither zeros nor the frames of the segment a reused file held, so a frame written to it was damaged",
				segs[n-2].seq)
			if !l.opts.Salvage {
				return nil, nil, &CorruptionError{File: s.file.Path(), Offset: segment.HeaderSize, Cause: cause}
			}
			reports[n-1] = writtenFirstFrame(s.file, reports[n-1], cause)
			break
		}
		if err := s.close(); err != nil {
			return nil, nil, err
		}
		if err := fs.Remove(s.file.Path()); err != nil {
			return nil, nil, fmt.Errorf("wal: open: %w", err)
		}
		l.recovery.RemovedEmpty = append(l.recovery.RemovedEmpty, s.file.Path())
		segs, reports = segs[:n-1], reports[:n-1]
		l.segs.Store(&segs)
	}
	return segs, reports, nil
}

// writtenFirstFrame reports, as a span salvage skips, the damaged first
// frame of a last segment whose scan r found no frame of its own
// (dropInterruptedRotation): from the header to where the frame's length
// field says it ends, when it gives a length that fits in the file, or
// else (a zeroed one, say) to the file's last byte that is not zero,
// which in a reused file may count bytes of the segment it held before.
// The salvage pads over it (in a file rewritten larger when the span
// leaves no room for the padding), and appends go on after it.
func writtenFirstFrame(f *segment.File, r segment.Report, cause error) segment.Report {
	data := f.Data()
	to := 0
	if at := segment.HeaderSize; at <= len(data)-segment.FrameHeaderSize {
		n := binary.LittleEndian.Uint32(data[at+4:])
		if end := int64(at) + int64(segment.Size(0)) + int64(n); n > 0 && end <= int64(len(data)) {
			to = int(end)
		}
	}
	if to == 0 {
		for to = len(data); to > segment.HeaderSize && data[to-1] == 0; to-- {
		}
	}
	to = max(to, segment.HeaderSize+segment.Size(0))
	r.Skipped = []segment.Span{{From: segment.HeaderSize, To: to, At: segment.HeaderSize, Cause: cause}}
	r.End, r.Tail, r.DamageAt, r.Cause = to, segment.EndClean, segment.HeaderSize, cause
	return r
}

// repair acts on what the scans found: salvage (when asked) what is
// damaged, refuse mid-log corruption and an unsealed segment with a later
// one, zero a torn tail of the last segment, and grow a last segment too
// full to take a frame. It sets each segment's end.
func (l *Log) repair(segs []*seg, reports []segment.Report) error {
	for i, s := range segs {
		last := i == len(segs)-1
		r := &reports[i]
		if l.opts.Salvage && (len(r.Skipped) > 0 || r.Tail == segment.EndCorrupt || !last && !r.Sealed) {
			if err := l.salvage(s, r, last); err != nil {
				return err
			}
		}
		switch {
		case r.Tail == segment.EndCorrupt:
			return &CorruptionError{File: s.file.Path(), Offset: r.DamageAt, Cause: r.Cause}
		case !last && (r.Tail != segment.EndClean || !r.Sealed):
			return &CorruptionError{File: s.file.Path(), Offset: r.End, Cause: unsealedCause(r)}
		case last && r.Tail == segment.EndTorn:
			if err := l.zeroTail(s, r); err != nil {
				return err
			}
		}
		if last && !r.Sealed && s.file.Size()-r.End < segment.Size(0) {
			if err := l.regrow(s, r.End); err != nil {
				return err
			}
		}
		s.end.Store(int64(r.End))
		if r.Records >= 0 {
			l.recovery.Records += r.Records
		}
	}
	return nil
}

// unsealedCause is what is wrong with a segment that a later one follows
// and whose scan r did not end in its seal: what the scan met where the
// frames end, or, when they end cleanly (the file cut short, or its seal
// zeroed), that the seal is missing.
func unsealedCause(r *segment.Report) error {
	if r.Cause != nil {
		return r.Cause
	}
	return errors.New("segment is not sealed but a later segment exists")
}

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

// trustedSeal reports a segment, not the last, that Options.Sealed says is
// sealed, without reading it: its size must hold the end the hint gives.
// Its frames are verified when read; a hint naming a wrong end makes every
// read near it fail, never succeed wrongly.
func (l *Log) trustedSeal(f *segment.File, seq uint32, last bool) (segment.Report, bool) {
	end, ok := l.opts.Sealed[seq]
	if !ok || last || l.opts.Salvage || end < segment.HeaderSize+segment.Size(0) || end > f.Size() {
		return segment.Report{}, false
	}
	return segment.Report{End: end, Sealed: true, Tail: segment.EndClean, Records: -1}, true
}

// cleanTail scans the last segment up to where the clean mark says the log
// ended (from Options.Verified, when that is in the segment), and reports
// the scan if it ends exactly there.
func (l *Log) cleanTail(f *segment.File, seq uint32, last bool, clean Position, ok bool) (segment.Report, bool) {
	if !ok || !last || l.opts.Salvage || clean.Segment() != seq || clean.Offset() < segment.HeaderSize || clean.Offset() > f.Size() {
		return segment.Report{}, false
	}
	// (A mark past the file's size is refused by scanSegments, which
	// recover calls: bytes a clean Close had synced are gone.)
	from, records := segment.HeaderSize, 0
	if l.knownDurableIn(seq) > clean.Offset() {
		// The caller knew records durable past where the clean Close
		// says the log ended: one of the two is wrong, and the scan
		// that checks that durability has to say which.
		return segment.Report{}, false
	}
	if v := l.opts.Verified; v.Segment() == seq && v.Offset() > from {
		from, records = v.Offset(), -1
	}
	r, err := segment.ScanFrom(f.Data()[:clean.Offset()], seq, from, false, func(segment.Frame) error { return nil })
	if err != nil || r.Tail != segment.EndClean || r.End != clean.Offset() {
		return segment.Report{}, false
	}
	if records < 0 {
		r.Records = -1
	}
	return r, true
}

// verifiedTail scans the last segment from Options.Verified, when that
// position is in it, and reports the scan if it ended cleanly.
func (l *Log) verifiedTail(f *segment.File, seq uint32, last bool) (segment.Report, bool) {
	v := l.opts.Verified
	if !last || l.opts.Salvage || v.Segment() != seq || v.Offset() <= segment.HeaderSize || v.Offset() > f.Size() {
		return segment.Report{}, false
	}
	r, err := segment.ScanFrom(f.Data(), seq, v.Offset(), false, func(segment.Frame) error { return nil })
	if err != nil || r.Tail != segment.EndClean {
		return segment.Report{}, false
	}
	if r.End == v.Offset() {
		// Nothing follows v: it may end the last frame, or lie past it
		// (in zero-filled space, or in a recycled file's stale bytes),
		// or inside it (in a body whose rest reads as zeros). The writer
		// would go on at v, after a gap or over the frame, so only the
		// whole scan can tell. The byte before v proves nothing: a body
		// is almost never zero there, nor are stale bytes.
		return segment.Report{}, false
	}
	r.Records = -1 // unknown: the records before v were not counted
	return r, true
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

// zeroTail overwrites the torn tail of the last segment with zeros, so that
// stray frames of the torn batch can never be read as part of a later one.
func (l *Log) zeroTail(s *seg, r *segment.Report) error {
	data := s.file.Data()
	end := len(data)
	for end > r.End && data[end-1] == 0 {
		end--
	}
	d := Damage{File: s.file.Path(), Segment: s.seq, Offset: r.End, Length: end - r.End, Cause: r.Cause}
	l.recovery.TornTail = &d
	l.opts.Logger.Warn("wal: discarding torn tail (bytes past the last complete frame of the last segment, taken as never synced: no append that waited for an fdatasync had them)", "file", d.File, "offset", d.Offset, "bytes", d.Length, "cause", d.Cause)
	if err := zeroRange(s.file, r.End, end); err != nil {
		return fmt.Errorf("wal: open: repair torn tail: %w", err)
	}
	r.Tail = segment.EndClean
	return nil
}

func zeroRange(f *segment.File, from, to int) error {
	zeros := make([]byte, min(1<<20, max(to-from, 0)))
	for off := from; off < to; off += len(zeros) {
		n := min(len(zeros), to-off)
		if err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
	}
	if from < to {
		return f.Sync()
	}
	return nil
}

// regrownSize is the size regrow gives a segment whose frames end at end:
// a segment's, or more if that does not leave room for one more frame
// header (a seal).
func (l *Log) regrownSize(end int) int64 {
	return max(l.opts.SegmentBytes, int64(end+segment.Size(0)))
}

// regrow replaces a last segment too short to take its seal (a file cut
// short from outside the log) with a full-size copy of its intact prefix.
func (l *Log) regrow(s *seg, end int) error {
	return l.regrowTo(s, end, l.regrownSize(end))
}

// regrowTo replaces segment s by a file of size bytes that holds its first
// end bytes.
func (l *Log) regrowTo(s *seg, end int, size int64) error {
	path := s.file.Path()
	l.opts.Logger.Warn("wal: last segment is shorter than a segment; rewriting it at full size", "file", path, "size", s.file.Size())
	f, err := writePrefix(l.opts.FS, path+tmpSuffix, s.seq, s.file.Salt(), size, s.file.Data()[segment.HeaderSize:end])
	if err != nil {
		return fmt.Errorf("wal: open: regrow %s: %w", path, err)
	}
	if err = f.Rename(l.opts.FS, path); err == nil {
		err = l.opts.FS.SyncDir(l.dir)
	}
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("wal: open: regrow %s: %w", path, err)
	}
	_ = s.file.Close()
	s.file = f
	return nil
}

// salvage copies a damaged segment aside, then makes it scan cleanly:
// padding frames over the skipped spans, and a seal where a segment that is
// not the last lost its own.
func (l *Log) salvage(s *seg, r *segment.Report, last bool) error {
	path := s.file.Path()
	copyTo, err := l.keepAside(s.seq, s.file.Data())
	if err != nil {
		return fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	// Every span this segment loses, listed durably before any is
	// repaired (noteSalvage).
	var lost []Damage
	for _, sp := range r.Skipped {
		n := sp.To - sp.From
		if n < segment.Size(0) {
			return fmt.Errorf("wal: salvage %s: damaged span of %d bytes at offset %d is too short to pad: %w",
				path, n, sp.From, &CorruptionError{File: path, Offset: sp.At, Cause: sp.Cause})
		}
		lost = append(lost, Damage{File: path, Segment: s.seq, Offset: sp.From, Length: n, Cause: sp.Cause, CopiedTo: copyTo})
	}
	// The damage took the end of a sealed segment: everything after the
	// valid prefix is lost. It is sealed there, in a file rewritten at a
	// size that holds the seal if it was cut too short for one. The span
	// lost runs to where the segment's records could reach: its size less
	// the room every segment keeps for its seal, or, in a file cut short,
	// every byte a segment can hold (its size is not known, and a caller
	// looks for the records it lost in the span).
	sealEarly := !last && !r.Sealed
	regrow := sealEarly && s.file.Size()-r.End < segment.Size(0)
	if sealEarly {
		length := s.file.Size() - segment.Size(0) - r.End
		if regrow || cutInFrame(s.file.Data(), r) {
			length = MaxSegmentBytes - r.End
		}
		lost = append(lost, Damage{File: path, Segment: s.seq, Offset: r.End, Length: length, Cause: unsealedCause(r), CopiedTo: copyTo})
	}
	if err := l.noteSalvage(lost...); err != nil {
		return err
	}
	if last && len(r.Skipped) > 0 && r.Skipped[len(r.Skipped)-1].To+segment.Size(0) > s.file.Size() {
		// The file was cut before the log's durable end
		// (salvageToDurable): rewritten at a size that holds the padding
		// over what was cut, and a seal after it.
		if err := l.regrowTo(s, s.file.Size(), l.regrownSize(r.Skipped[len(r.Skipped)-1].To)); err != nil {
			return fmt.Errorf("wal: salvage: %w", err)
		}
	}
	for _, d := range lost[:len(r.Skipped)] {
		pad := segment.AppendFrame(nil, s.seq, s.file.Salt(), 0, segment.KindPadding, segment.Full, make([]byte, d.Length-segment.Size(0)))
		if err := s.file.WriteAt(pad, d.Offset); err != nil {
			return fmt.Errorf("wal: salvage: %w", err)
		}
		l.opts.Logger.Error("wal: salvage skipped damaged span; its records are lost", "file", path, "offset", d.Offset, "bytes", d.Length, "copy", copyTo)
	}
	if sealEarly {
		if regrow {
			if err := l.regrow(s, r.End); err != nil {
				return fmt.Errorf("wal: salvage: %w", err)
			}
		}
		seal := segment.AppendFrame(nil, s.seq, s.file.Salt(), 0, segment.KindSeal, segment.Full, nil)
		if err := s.file.WriteAt(seal, r.End); err != nil {
			return fmt.Errorf("wal: salvage: %w", err)
		}
		l.opts.Logger.Error("wal: salvage sealed a damaged segment early; records after the offset are lost", "file", path, "offset", r.End, "copy", copyTo)
	}
	if err := s.file.Sync(); err != nil {
		return fmt.Errorf("wal: salvage: %w", err)
	}
	l.salvaged(lost...)
	// Scan again: the repaired file must now read cleanly.
	again, _ := s.file.Scan(false, func(segment.Frame) error { return nil })
	if again.Tail == segment.EndCorrupt {
		return &CorruptionError{File: path, Offset: again.DamageAt, Cause: fmt.Errorf("still damaged after salvage: %w", again.Cause)}
	}
	if !last && !again.Sealed {
		return &CorruptionError{File: path, Offset: again.End, Cause: fmt.Errorf("still damaged after salvage: %w", unsealedCause(&again))}
	}
	*r = again
	return nil
}

// cutInFrame reports whether the scan r of a segment (data, its file)
// stopped at a frame the file ends inside: its header, or the body its
// length field gives, runs past the last byte. The file was cut short
// there, and its size says nothing of where its records ended. (A length
// field that damage raised reads so too: the span salvage reports then
// runs further than the file, over no record that was not lost.)
func cutInFrame(data []byte, r *segment.Report) bool {
	if r.Tail == segment.EndClean {
		return false // no frame failed: the frames end before the file does
	}
	at := r.DamageAt
	if at > len(data)-segment.FrameHeaderSize {
		return true
	}
	n := int64(binary.LittleEndian.Uint32(data[at+4:]))
	return int64(at)+int64(segment.Size(0))+n > int64(len(data))
}

// salvageHeader copies aside a segment whose header fails its checks,
// writes a good header for segment seq over it (its frames name their
// segment themselves, and give back the salt their checksums were seeded
// with, so nothing else depends on the header) and opens it.
func (l *Log) salvageHeader(seq uint32, cause error) (*segment.File, error) {
	path := l.segPath(seq)
	f, err := segment.OpenUnread(l.opts.FS, path, seq)
	if errors.Is(err, segment.ErrBadHeader) {
		// Too short for a header (the one ErrBadHeader of a file opened
		// unread): every record is gone. Keep what there is aside and
		// put an empty segment in its place (the salvage of the segments
		// then seals it).
		return l.salvageStub(seq, cause)
	}
	if err != nil {
		// Anything else (an I/O error opening, sizing or mapping it) says
		// nothing of the file: taken for one too short, it was replaced
		// by an empty segment and every intact record in it dropped.
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	// The frames' checksums were seeded with the salt the damaged header
	// held; the frames give it back (segment.RecoverSalt). When they do
	// not (no frame, or a lone record that cannot vouch for itself), no
	// frame of the file can be read: the header gets a fresh salt, and the
	// damage reported is the whole file.
	d := Damage{File: path, Segment: seq, Offset: 0, Length: segment.HeaderSize, Cause: cause}
	salt, ok := segment.RecoverSalt(f.Data(), seq)
	if !ok {
		salt, d.Length = segment.NewSalt(), f.Size()
	}
	copyTo, err := l.keepAside(seq, f.Data())
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	d.CopiedTo = copyTo
	if err := l.noteSalvage(d); err != nil {
		return nil, err
	}
	raw, err := l.opts.FS.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	hdr := segment.EncodeHeader(seq, salt)
	_, err = raw.WriteAt(hdr[:], 0)
	if err == nil {
		err = raw.Sync()
	}
	err = errors.Join(err, raw.Close())
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: rewrite header: %w", path, err)
	}
	l.salvaged(d)
	l.opts.Logger.Error("wal: salvage rewrote a damaged segment header", "file", path, "copy", copyTo)
	return segment.Open(l.opts.FS, path, seq)
}

// salvageStub replaces a segment file too short to hold a header by an
// empty segment of full size, after copying what it held aside.
func (l *Log) salvageStub(seq uint32, cause error) (*segment.File, error) {
	fs := l.opts.FS
	path := l.segPath(seq)
	old, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	size, err := old.Size()
	var data []byte
	if err == nil {
		data = make([]byte, size)
		_, err = old.ReadAt(data, 0)
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	_ = old.Close()
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	copyTo, err := l.keepAside(seq, data)
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	d := Damage{File: path, Segment: seq, Offset: 0, Length: int(size), Cause: cause, CopiedTo: copyTo}
	if err := l.noteSalvage(d); err != nil {
		return nil, err
	}
	f, err := l.emptySegment(seq, l.opts.SegmentBytes)
	if err != nil {
		return nil, err
	}
	l.salvaged(d)
	l.opts.Logger.Error("wal: salvage replaced a segment too short for a header; its records are lost", "file", path, "copy", copyTo)
	return f, nil
}

// salvageMissing puts an empty segment in the place of segment seq, whose
// file is gone (listMissing), and reports that: a span of every byte a
// segment can hold (MaxSegmentBytes from offset 0). The scan then finds it
// empty: sealed by the salvage of the segments when a later one follows
// (at the smallest size that holds a seal: its records are gone whatever
// its size), and, as the last, reported lost up to where the log was
// known durable (salvageToDurable), its appends going on after that.
func (l *Log) salvageMissing(seq uint32, last bool) (*segment.File, error) {
	// Every byte a segment can hold is lost: its size is not known.
	d := Damage{File: l.segPath(seq), Segment: seq, Length: MaxSegmentBytes, Cause: errors.New("segment file missing")}
	if err := l.noteSalvage(d); err != nil {
		return nil, err
	}
	size := int64(segment.HeaderSize + segment.Size(0))
	if last {
		size = l.opts.SegmentBytes
	}
	f, err := l.emptySegment(seq, size)
	if err != nil {
		return nil, err
	}
	l.salvaged(d)
	l.opts.Logger.Error("wal: salvage put an empty segment in the place of a missing one; its records are lost", "file", d.File)
	return f, nil
}

// emptySegment makes an empty segment seq of size bytes in its place,
// durably (a salvage's repair of a segment without records).
func (l *Log) emptySegment(seq uint32, size int64) (*segment.File, error) {
	fs := l.opts.FS
	path := l.segPath(seq)
	// A salvage of this segment that failed before its rename left the
	// file it was making: a leftover, removed before it is made again
	// (recover removes the others only after the scan this runs in).
	if err := fs.Remove(path + tmpSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	f, err := segment.Create(fs, path+tmpSuffix, seq, segment.NewSalt(), size)
	if err == nil {
		err = f.Rename(fs, path)
		if err == nil {
			err = fs.SyncDir(l.dir)
		}
		if err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	return f, nil
}

// keepAside writes data, the bytes of segment seq as found, durably into a
// new file of the salvage/ subdirectory, and returns its path.
func (l *Log) keepAside(seq uint32, data []byte) (string, error) {
	fs := l.opts.FS
	dir := filepath.Join(l.dir, salvageDirName)
	if err := vfs.CheckDir(fs, dir); err != nil {
		return "", err
	}
	if err := vfs.MkdirAllDurable(fs, dir, 0o700); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, fmt.Sprintf("%s.%s", segName(seq), time.Now().UTC().Format("20060102T150405.000000000Z")))
	if err := vfs.WriteFile(fs, dst, data); err != nil {
		return "", err
	}
	if err := fs.SyncDir(dir); err != nil {
		return "", err
	}
	return dst, fs.SyncDir(l.dir)
}

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
