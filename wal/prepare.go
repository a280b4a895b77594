package wal

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/walbroker/walbroker/segment"
)

// preparer makes the next segment file ready while the writer fills the
// current one, so that rotation costs a rename and a directory sync, and so
// that no fdatasync of a segment ever has to commit a change of its size or
// extents. It reuses a retired segment file when the log has one (no bytes
// to write at all), and otherwise writes a new file full of zeros.
//
// The preparer goroutine owns the files it makes until the writer receives
// them from ready.
type preparer struct {
	l     *Log
	req   chan uint32   // the sequence to prepare next; capacity 1
	ready chan prepared // the prepared file; capacity 1
	done  chan struct{} // closed when the goroutine returns
}

type prepared struct {
	seq  uint32
	file *segment.File
	err  error
}

func newPreparer(l *Log) *preparer {
	p := &preparer{
		l:     l,
		req:   make(chan uint32, 1),
		ready: make(chan prepared, 1),
		done:  make(chan struct{}),
	}
	go p.loop()
	return p
}

// request asks for segment seq. The writer calls it once per rotation, after
// it has taken the previous result, so req never holds two.
func (p *preparer) request(seq uint32) { p.req <- seq }

func (p *preparer) loop() {
	defer close(p.done)
	for seq := range p.req {
		f, err := p.make(seq)
		p.ready <- prepared{seq: seq, file: f, err: err}
	}
}

func (p *preparer) make(seq uint32) (*segment.File, error) {
	l := p.l
	tmp := l.segPath(seq) + tmpSuffix
	if spare, ok := l.takeSpare(); ok {
		f, err := segment.Recycle(l.opts.FS, spare, tmp, seq)
		if err == nil {
			l.stats.recycled.Add(1)
			return f, nil
		}
		_ = l.opts.FS.Remove(spare)
		l.opts.Logger.Warn("wal: could not reuse a retired segment; writing a new one", "file", spare, "err", err)
	}
	f, err := segment.Create(l.opts.FS, tmp, seq, l.opts.SegmentBytes)
	if err != nil {
		return nil, fmt.Errorf("wal: prepare segment %d: %w", seq, err)
	}
	return f, nil
}

// stop ends the goroutine. A file prepared but never used is kept as a
// spare for the next Open, if there is room, and removed otherwise.
func (p *preparer) stop() error {
	close(p.req)
	<-p.done
	select {
	case r := <-p.ready:
		if r.file != nil {
			l := p.l
			path := r.file.Path()
			err := r.file.Close()
			spare := filepath.Join(l.dir, fmt.Sprintf("%s%010d%s", sparePrefix, r.seq, tmpSuffix))
			if l.spareCount() < maxSpares && int64(r.file.Size()) == l.opts.SegmentBytes {
				if rerr := l.opts.FS.Rename(path, spare); rerr == nil {
					return err
				}
			}
			return errors.Join(err, l.opts.FS.Remove(path))
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
