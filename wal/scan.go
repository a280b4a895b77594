package wal

import (
	"errors"
	"fmt"
	"slices"

	"github.com/walbroker/walbroker/segment"
)

// Open's scan of the segments (see recover): how each one's frames end,
// read as little as what vouches for it allows (Options.Sealed, the clean
// mark, Options.Verified), whether its end is a torn tail or damage to
// bytes known durable, and the empty segment a rotation a crash
// interrupted left after an unsealed one.

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
		// Durable before the next (older) one is removed: a file
		// system may keep a later change of names without an earlier
		// one, and an older empty segment removed with a newer one kept
		// would leave a gap, which the next Open refuses. Rare (crashes
		// in rotations), and before anything is appended.
		if err := fs.SyncDir(l.dir); err != nil {
			return nil, nil, fmt.Errorf("wal: open: sync dir: %w", err)
		}
		l.recovery.RemovedEmpty = append(l.recovery.RemovedEmpty, s.file.Path())
		segs, reports = segs[:n-1], reports[:n-1]
		l.segs.Store(&segs)
	}
	return segs, reports, nil
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
