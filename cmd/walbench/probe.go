package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/walbroker/walbroker/segment"
	"golang.org/x/sys/unix"
)

// The raw probes time what the log's own fdatasyncs cost without the log:
// one pwrite and one fdatasync, in a loop, on a file of the same directory.
const (
	probeWriteBytes = 4 << 10
	// probeFileBytes is the least size of an overwrite probe's file,
	// written full of zeros and synced before the loop; the loop wraps
	// around in it, so every fdatasync commits data to blocks already
	// allocated and written, as the log's appends to a pre-written segment
	// do. It is the wal's default segment size.
	probeFileBytes = 64 << 20
	prefillChunk   = 1 << 20
)

// probeMode is what the probe's fdatasyncs have to commit.
type probeMode int

const (
	// probeOverwrite writes 4 KiB at a time over blocks already written
	// and synced: the fdatasync commits data alone.
	probeOverwrite probeMode = iota
	// probeAppend writes 4 KiB at a time past the end of a growing file:
	// the fdatasync must also commit the new size and the new extents.
	probeAppend
	// probeBatchCeiling overwrites as probeOverwrite does, with writes of
	// a WAL run's mean bytes per fdatasync, starting at the offset of a
	// segment's first frame: what one fdatasync of such a batch costs.
	probeBatchCeiling
)

func (m probeMode) String() string {
	switch m {
	case probeOverwrite:
		return "overwrite"
	case probeAppend:
		return "append"
	}
	return "batch ceiling"
}

// probeSpec is one raw probe: what its fdatasyncs commit, and how much
// each pwrite writes where.
type probeSpec struct {
	mode       probeMode
	writeBytes int
	// start is the offset of the first pwrite; the overwriting modes wrap
	// back to it at the end of the file.
	start int64
}

var (
	overwriteProbe = probeSpec{mode: probeOverwrite, writeBytes: probeWriteBytes}
	appendProbe    = probeSpec{mode: probeAppend, writeBytes: probeWriteBytes}
)

// batchCeilingProbe writes batchBytes at a time from offset
// segment.HeaderSize, where a segment's first frame goes: like the log's
// writes, they are not aligned to blocks.
func batchCeilingProbe(batchBytes int) probeSpec {
	return probeSpec{mode: probeBatchCeiling, writeBytes: batchBytes, start: segment.HeaderSize}
}

func (s probeSpec) String() string {
	if s.mode == probeBatchCeiling {
		return fmt.Sprintf("raw batch ceiling probe (%d B)", s.writeBytes)
	}
	return "raw " + s.mode.String() + " probe"
}

// fileBytes is the size of an overwriting probe's file: probeFileBytes, or
// more if one write would not fit in it.
func (s probeSpec) fileBytes() int64 {
	need := s.start + int64(s.writeBytes)
	return max(probeFileBytes, (need+prefillChunk-1)/prefillChunk*prefillChunk)
}

// probeResult is what one probe measured.
type probeResult struct {
	spec        probeSpec
	window      window
	syncs       int64 // pwrite+fdatasync pairs started in the window
	hist        *Histogram
	interrupted bool
}

// syncsPerSec is the probe's rate of pwrite+fdatasync pairs.
func (p probeResult) syncsPerSec() float64 { return rate(p.syncs, p.window.elapsed.Seconds()) }

// probe runs one raw fdatasync probe for d in a new file in dir, and
// removes the file. ctx ending stops it early; what was measured until then
// is returned with interrupted set.
func probe(ctx context.Context, progress io.Writer, dir string, spec probeSpec, d time.Duration) (res probeResult, err error) {
	res = probeResult{spec: spec, hist: new(Histogram)}
	if spec.writeBytes < 1 {
		return res, fmt.Errorf("%v: nothing to write", spec)
	}
	name := filepath.Join(dir, "probe-"+strings.ReplaceAll(spec.mode.String(), " ", "-"))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return res, fmt.Errorf("%v: %w", spec, err)
	}
	defer func() {
		err = errors.Join(err, closeErr(spec.String(), f.Close()))
		if rerr := os.Remove(name); rerr != nil {
			err = errors.Join(err, fmt.Errorf("%v: %w", spec, rerr))
		}
	}()
	fd := int(f.Fd())

	overwrite := spec.mode != probeAppend
	size := spec.fileBytes()
	if overwrite {
		if interrupted, err := prefill(ctx, f, fd, size); err != nil || interrupted {
			res.interrupted = interrupted
			if err != nil {
				err = fmt.Errorf("%v: %w", spec, err)
			}
			return res, err
		}
	}

	buf := make([]byte, spec.writeBytes)
	for i := range buf {
		buf[i] = byte(i*7 + 1) // not zeros: nothing below may skip or dedupe it
	}
	var g gate
	done := make(chan struct{})
	var loopErr error
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				loopErr = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		off := spec.start
		for {
			phase := g.load()
			if phase == phaseStopped {
				return
			}
			t0 := time.Now()
			if _, err := f.WriteAt(buf, off); err != nil {
				loopErr = fmt.Errorf("pwrite at offset %d: %w", off, err)
				return
			}
			if err := unix.Fdatasync(fd); err != nil {
				loopErr = &os.PathError{Op: "fdatasync", Path: name, Err: err}
				return
			}
			lat := time.Since(t0)
			if phase == phaseMeasuring {
				res.hist.Record(lat)
			}
			off += int64(spec.writeBytes)
			if overwrite && off+int64(spec.writeBytes) > size {
				off = spec.start
			}
		}
	}()
	// A failed pwrite or fdatasync ends the loop; the window learns it
	// through loopCtx.
	loopCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-loopCtx.Done():
		}
	}()
	res.window = runWindow(loopCtx, progress, spec.String(), 0, d, &g, func() {}, func() {})
	<-done // one fdatasync at most; a disk that never returns one is not ours to time out
	if loopErr != nil {
		return res, fmt.Errorf("%v: %w", spec, loopErr)
	}
	res.syncs = int64(res.hist.Count())
	res.interrupted = ctx.Err() != nil
	return res, nil
}

// prefill writes f full of zeros up to size and fdatasyncs it. It reports
// whether ctx ended it first.
func prefill(ctx context.Context, f *os.File, fd int, size int64) (interrupted bool, err error) {
	zeros := make([]byte, prefillChunk)
	for off := int64(0); off < size; off += prefillChunk {
		if ctx.Err() != nil {
			return true, nil
		}
		if _, err := f.WriteAt(zeros, off); err != nil {
			return false, fmt.Errorf("prefill: %w", err)
		}
	}
	if err := unix.Fdatasync(fd); err != nil {
		return false, fmt.Errorf("prefill: %w", &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err})
	}
	return false, nil
}

// closeErr names what a failed Close belonged to.
func closeErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: close: %w", what, err)
}
