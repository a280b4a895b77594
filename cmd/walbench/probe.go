package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"
)

// The raw probes time what the log's own fdatasyncs cost without the log:
// one 4 KiB pwrite and one fdatasync, in a loop, on a file of the same
// directory.
const (
	probeWriteBytes = 4 << 10
	// probeFileBytes is the size of the overwrite probe's file, written full
	// of zeros and synced before the loop; the loop wraps around in it, so
	// every fdatasync commits data to blocks already allocated and written,
	// as the log's appends to a pre-written segment do.
	probeFileBytes = 64 << 20
	prefillChunk   = 1 << 20
)

// probeMode is what the probe's fdatasyncs have to commit.
type probeMode int

const (
	// probeOverwrite writes over blocks already written and synced: the
	// fdatasync commits data alone.
	probeOverwrite probeMode = iota
	// probeAppend writes past the end of a growing file: the fdatasync must
	// also commit the new size and the new extents.
	probeAppend
)

func (m probeMode) String() string {
	if m == probeOverwrite {
		return "overwrite"
	}
	return "append"
}

// probeResult is what one probe measured.
type probeResult struct {
	mode        probeMode
	window      window
	syncs       int64 // pwrite+fdatasync pairs started in the window
	hist        *Histogram
	interrupted bool
}

// probe runs one raw fdatasync probe for d in a new file in dir, and
// removes the file. ctx ending stops it early; what was measured until then
// is returned with interrupted set.
func probe(ctx context.Context, progress io.Writer, dir string, mode probeMode, d time.Duration) (res probeResult, err error) {
	res = probeResult{mode: mode, hist: new(Histogram)}
	name := filepath.Join(dir, "probe-"+mode.String())
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return res, fmt.Errorf("raw %s probe: %w", mode, err)
	}
	defer func() {
		err = errors.Join(err, closeErr("raw "+mode.String()+" probe", f.Close()))
		if rerr := os.Remove(name); rerr != nil {
			err = errors.Join(err, fmt.Errorf("raw %s probe: %w", mode, rerr))
		}
	}()
	fd := int(f.Fd())

	if mode == probeOverwrite {
		if interrupted, err := prefill(ctx, f, fd); err != nil || interrupted {
			res.interrupted = interrupted
			return res, err
		}
	}

	buf := make([]byte, probeWriteBytes)
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
		var off int64
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
			off += probeWriteBytes
			if mode == probeOverwrite && off+probeWriteBytes > probeFileBytes {
				off = 0
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
	res.window = runWindow(loopCtx, progress, "raw "+mode.String()+" probe", 0, d, &g, func() {}, func() {})
	<-done // one fdatasync at most; a disk that never returns one is not ours to time out
	if loopErr != nil {
		return res, fmt.Errorf("raw %s probe: %w", mode, loopErr)
	}
	res.syncs = int64(res.hist.Count())
	res.interrupted = ctx.Err() != nil
	return res, nil
}

// prefill writes the overwrite probe's file full of zeros and fdatasyncs
// it. It reports whether ctx ended it first.
func prefill(ctx context.Context, f *os.File, fd int) (interrupted bool, err error) {
	zeros := make([]byte, prefillChunk)
	for off := int64(0); off < probeFileBytes; off += prefillChunk {
		if ctx.Err() != nil {
			return true, nil
		}
		if _, err := f.WriteAt(zeros, off); err != nil {
			return false, fmt.Errorf("raw overwrite probe: prefill: %w", err)
		}
	}
	if err := unix.Fdatasync(fd); err != nil {
		return false, fmt.Errorf("raw overwrite probe: prefill: %w", &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err})
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
