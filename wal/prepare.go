package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"time"

	"github.com/walbroker/walbroker/segment"
)

// preparer makes the next segment file ready while the writer fills the
// current one (from the log's first write on: see Open), so that rotation costs a rename and a directory sync, and so
// that no fdatasync of a segment has to commit a change of its size or
// extents (but in a rushed file's allocated rest; below). It reuses a retired segment file when the log has one (no bytes
// to write at all), and otherwise writes a new file full of zeros.
//
// The preparer goroutine owns the files it makes until the writer receives
// them from ready.
//
// A new file's zeros are written at the pace the writer fills the active
// segment (see pacer), a chunk at a time, each sent to the device before the
// next: written all at once, they reached the device in one burst that held
// up every commit's fdatasync behind it for tens of milliseconds. When the
// writer has to wait for the file, the rest of it is allocated rather than
// written. A file still being filled when the log closes is abandoned.
type preparer struct {
	l     *Log
	req   chan prepRequest // the segment to prepare next; capacity 1
	ready chan prepared    // the prepared file; capacity 1
	quit  chan struct{}    // closed by stop: abandon a file still being filled
	rush  chan uint32      // the writer waits for this segment: finish it without pacing; capacity 1
	done  chan struct{}    // closed when the goroutine returns

	asked uint32        // the segment last requested; the writer's alone
	begun bool          // the first segment was requested (at the log's first write); the writer's alone
	idle  time.Duration // the pacers' idle window (paceIdle); set before the first request
	// failed is set by the writer when the segment it took could not be
	// put in place: nothing is asked for then, and the next rotation asks
	// again and waits for that attempt. Asked at once, the preparer met
	// the same failure (a disk still full) and the rotation after space
	// was freed took that stale result. The writer's alone.
	failed bool
}

type prepRequest struct {
	seq    uint32
	active *seg // the segment the writer fills meanwhile
}

type prepared struct {
	seq      uint32
	file     *segment.File
	recycled bool // file is a retired segment reused
	err      error
}

func newPreparer(l *Log) *preparer {
	p := &preparer{
		l:     l,
		req:   make(chan prepRequest, 1),
		ready: make(chan prepared, 1),
		quit:  make(chan struct{}),
		rush:  make(chan uint32, 1),
		done:  make(chan struct{}),
		idle:  paceIdle,
	}
	go p.loop()
	return p
}

// request asks for segment seq, to be ready before the writer has filled
// active. The writer calls it once per rotation, after it has taken the
// previous result, so req never holds two.
func (p *preparer) request(seq uint32, active *seg) {
	p.asked, p.begun = seq, true
	p.req <- prepRequest{seq, active}
}

func (p *preparer) loop() {
	defer close(p.done)
	for r := range p.req {
		f, recycled, err := p.make(r.seq, r.active)
		p.ready <- prepared{seq: r.seq, file: f, recycled: recycled, err: err}
	}
}

// make returns segment seq's file, and whether it is a retired one reused.
func (p *preparer) make(seq uint32, active *seg) (*segment.File, bool, error) {
	l := p.l
	tmp := l.segPath(seq) + tmpSuffix
	rushed := false // a pacer given up for a spare took the writer's rush
	cleared := false
	for {
		if spare, ok := l.takeSpare(); ok {
			f, err := segment.Recycle(l.opts.FS, spare, tmp, seq, segment.NewSalt())
			if errors.Is(err, fs.ErrExist) && !cleared {
				// Refused before anything changed: a file is at tmp
				// (below). Removed, the spare is still the one to reuse.
				cleared = true
				if p.removeLeftover(tmp) {
					f, err = segment.Recycle(l.opts.FS, spare, tmp, seq, segment.NewSalt())
				}
			}
			if err == nil && !reusable(f, seq) {
				// Not an error of the spare's: the next Open would not
				// know it for a file nothing was written to.
				_ = f.Close()
				_ = l.opts.FS.Remove(tmp)
				l.logLater(func(log *slog.Logger) {
					log.Warn("wal: not reusing a retired segment whose first frame is neither a record nor the seal of an empty segment; writing a new one", "file", spare)
				})
				continue
			}
			if err == nil {
				return f, true, nil
			}
			_ = l.opts.FS.Remove(spare)
			l.logLater(func(log *slog.Logger) {
				log.Warn("wal: could not reuse a retired segment; writing a new one", "file", spare, "err", err)
			})
		}
		pc := newPacer(seq, &active.end, int64(active.file.Size()), l.opts.SegmentBytes, p.quit, p.rush)
		pc.idle = p.idle
		pc.spare = l.hasSpare
		pc.rushed = rushed
		f, err := segment.CreatePaced(l.opts.FS, tmp, seq, segment.NewSalt(), l.opts.SegmentBytes, pc.wait)
		if errors.Is(err, errSpareArrived) {
			// CreatePaced removed the zeros written so far. If the spare
			// cannot be reused, the next fill is still rushed.
			l.stats.fillsDropped.Add(1)
			rushed = pc.rushed
			continue
		}
		if errors.Is(err, fs.ErrExist) && !cleared {
			// CreatePaced and Recycle make only a new file. One is left
			// at tmp only by an earlier attempt at this segment whose
			// cleanup failed too (a rename into place, then the removal);
			// no other file of the log has that name. Remove it, once.
			cleared = true
			if p.removeLeftover(tmp) {
				continue
			}
		}
		if err != nil {
			return nil, false, fmt.Errorf("wal: prepare segment %d: %w", seq, err)
		}
		if pc.rushed {
			l.stats.fillsRushed.Add(1)
		}
		return f, false, nil
	}
}

// removeLeftover removes the file an earlier attempt at a segment left at
// tmp, its temporary name, and reports whether it did.
func (p *preparer) removeLeftover(tmp string) bool {
	l := p.l
	if err := l.opts.FS.Remove(tmp); err != nil {
		return false
	}
	l.logLater(func(log *slog.Logger) {
		log.Warn("wal: removed a segment file an earlier rotation left", "file", tmp)
	})
	return true
}

// take returns the prepared file, waiting for it if it is not ready: then
// the writer is waiting, and the preparer stops pacing. Only the writer
// sends on rush, so after taking out a rush the preparer never read (it
// finished first), the send cannot block. After a failure (failed), it
// asks for the segment again first, and waits for that attempt. So it
// does when the preparer failed before the writer needed the file: that
// failure may be old (a disk full for a moment while the file was being
// filled, with room again since), and a preparation writes no record, so
// trying it again risks nothing; the rotation fails only if that attempt,
// made now, fails too.
func (p *preparer) take(active *seg) prepared {
	if p.failed {
		// Asked again now: what comes back, even at once, is this
		// attempt's, and the rotation's answer.
		p.failed = false
		p.request(p.asked, active)
		afterRetryRequest()
	} else {
		select {
		case r := <-p.ready:
			if r.err == nil {
				return r
			}
			p.l.logLater(func(log *slog.Logger) {
				log.Warn("wal: preparing the next segment failed before it was needed; trying again", "segment", r.seq, "err", r.err)
			})
			p.request(p.asked, active)
		default:
		}
	}
	select {
	case <-p.rush:
	default:
	}
	p.rush <- p.asked
	return <-p.ready
}

// afterRetryRequest runs in take once it asked again for a segment a
// rotation could not put in place (tests wait there for the attempt).
var afterRetryRequest = func() {}

// stop ends the goroutine. A file prepared but never used is kept as a
// spare for the next Open, if there is room, and removed otherwise; one
// still being filled is abandoned (CreatePaced removes it).
func (p *preparer) stop() error {
	close(p.quit)
	close(p.req)
	<-p.done
	select {
	case r := <-p.ready:
		if r.file != nil {
			l := p.l
			path := r.file.Path()
			err := r.file.Close()
			var keepErr error
			if l.spareCount() < maxSpares && int64(r.file.Size()) == l.opts.SegmentBytes {
				if _, keepErr = l.keepSpare(path, r.seq); keepErr == nil {
					return err
				}
			}
			if rerr := l.opts.FS.Remove(path); rerr != nil {
				// Left under its temporary name, which the next Open
				// removes; Close says why it is there.
				return errors.Join(err, keepErr, rerr)
			}
			if keepErr != nil {
				l.spareNotKept(path, keepErr)
			}
			return err
		}
	default:
	}
	return nil
}

// takeSpare returns a retired segment file to reuse, if there is one.
func (l *Log) takeSpare() (string, bool) {
	l.listMu.Lock()
	defer l.listMu.Unlock()
	if len(l.spares) == 0 {
		return "", false
	}
	p := l.spares[len(l.spares)-1]
	l.spares = l.spares[:len(l.spares)-1]
	return p, true
}

// hasSpare reports whether a retired segment file is ready for reuse.
func (l *Log) hasSpare() bool {
	return l.spareCount() > 0
}

// install renames a prepared segment into place, syncs the directory (so
// the file survives a power loss before any record in it is acknowledged)
// and appends it to the list.
func (l *Log) install(s *seg) error {
	if err := s.file.Rename(l.opts.FS, l.segPath(s.seq)); err != nil {
		return fmt.Errorf("wal: install segment %d: %w", s.seq, err)
	}
	if err := l.opts.FS.SyncDir(l.dir); err != nil {
		return fmt.Errorf("wal: install segment %d: sync dir: %w", s.seq, err)
	}
	l.addSegment(s)
	return nil
}

// addSegment appends s to the list readers see (copy on write).
func (l *Log) addSegment(s *seg) {
	l.listMu.Lock()
	defer l.listMu.Unlock()
	old := *l.segs.Load()
	segs := make([]*seg, len(old), len(old)+1)
	copy(segs, old)
	segs = append(segs, s)
	l.segs.Store(&segs)
}

// reusable reports whether f, a retired file recycled as segment seq,
// holds past its header what segment.Unwritten recognises as the content
// of the segment it was. A crash after the rotation that renames it into
// place, before the segment before it is sealed, leaves it empty after an
// unsealed segment: Open removes it only if it reads so, and refuses the
// log otherwise. A retired segment's first frames fail that when they
// were damaged, or when salvage sealed the segment at its header over
// frames it could not read, whose bytes then follow the seal. A file
// whose first frame header is zeros is taken for one prepared for a
// segment and never used (Close keeps those), zeros to its end: telling
// it apart would read the whole file.
func reusable(f *segment.File, seq uint32) bool {
	data := f.Data()
	first := data[segment.HeaderSize:min(len(data), segment.HeaderSize+segment.FrameHeaderSize)]
	return !slices.ContainsFunc(first, func(b byte) bool { return b != 0 }) || segment.Unwritten(data, seq)
}
