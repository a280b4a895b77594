package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// The probe times what the broker's commits cost the disk without the
// broker: pwrite and fdatasync in a loop, on files of the same directory.
const (
	probeWriteBytes = 4 << 10
	// probeLargeBytes is the pwrite of the large-write loop: about one
	// commit of 64 publishes of 1 KiB (each takes 1,057 bytes of log),
	// what a commit of many producers costs where the 4 KiB loop gives
	// what a lone producer's costs. The disk charges a commit for its size
	// more than its sequential bandwidth says (docs/DESIGN.md).
	probeLargeBytes = 64 << 10
	// probeFileBytes is the size of the overwrite probe's file, written
	// full of zeros and synced before its loops; they wrap around in it, so
	// that every fdatasync commits data to blocks already allocated and
	// written, as the log's appends to its pre-written segments do. It is
	// the default segment size.
	probeFileBytes = 64 << 20
	prefillChunk   = 1 << 20
	// The bandwidth loop writes bandwidthChunk bytes per pwrite and
	// fdatasyncs after every bandwidthBatch of them: large enough that the
	// fdatasyncs' own cost hardly counts.
	bandwidthChunk = 1 << 20
	bandwidthBatch = 8
	// publishEventBytes is about what a publish record holds besides the
	// payload: kind, queue, sequence, enqueue instant and key length, as
	// varints (index/doc.go).
	publishEventBytes = 16
)

// probeLoad is the probe of one round: the 4 KiB fdatasync loop for
// duration, then the 64 KiB one, the bandwidth loop and the append loop
// for half that each. ceilings lists the (producers, size) pairs to
// compute the durable-message ceiling for.
type probeLoad struct {
	duration time.Duration
	ceilings []Ceiling
}

// The steps of the probe, in the order they run, as Probe.InterruptedIn
// names them.
const (
	probePrefill   = "prefill"   // the overwrite loops' file written full of zeros
	probeFdatasync = "fdatasync" // pwrite 4 KiB + fdatasync over written blocks
	probeLarge     = "large"     // pwrite 64 KiB + fdatasync over written blocks
	probeWrite     = "write"     // sequential bandwidth
	probeAppend    = "append"    // pwrite 4 KiB + fdatasync at the end of a growing file
)

// probeLoops are the steps of the probe that measure, in the order they
// run.
var probeLoops = []string{probeFdatasync, probeLarge, probeWrite, probeAppend}

// measured reports whether p has figures of the loop step: one that did
// not run has none, nor one Ctrl-C stopped before its first fdatasync.
func (p Probe) measured(step string) bool {
	switch step {
	case probeFdatasync:
		return p.FdatasyncsPerSec != nil
	case probeLarge:
		return p.LargeFdatasyncsPerSec != nil
	case probeWrite:
		return p.WriteMBPerSec != nil
	case probeAppend:
		return p.AppendFdatasyncsPerSec != nil
	}
	return false
}

// measuredAny reports whether p has figures of any of its loops.
func (p Probe) measuredAny() bool { return slices.ContainsFunc(probeLoops, p.measured) }

// probeMeasured reports whether a report's probe measured anything: one
// Ctrl-C stopped in its first prefill is there, every figure nil, to say
// where it stopped, but is not a measurement.
func probeMeasured(p *Probe) bool { return p != nil && p.measuredAny() }

// runProbe runs the probe in a new file of dir, and removes it. ctx ending
// stops it: what was measured until then is returned, Interrupted set and
// InterruptedIn naming the step it stopped.
func runProbe(ctx context.Context, env *env, dir string, l probeLoad) (p Probe, err error) {
	start := time.Now()
	defer func() {
		p.Seconds = time.Since(start).Seconds()
		p.Interrupted = p.InterruptedIn != ""
		// From whatever was measured: a ceiling lacking a figure is nil.
		p.Ceilings = ceilingsOf(p, l.ceilings)
	}()
	// step runs one step of the probe, showing its progress as label for d,
	// and reports whether the probe goes on: not after an error, nor once
	// ctx has ended.
	step := func(name, label string, d time.Duration, run func() error) (bool, error) {
		env.windowOpened("probe: " + name)
		stop := env.progress.trackWindow("probe: "+label, d)
		err := run()
		stop()
		if err != nil {
			return false, err
		}
		if ctx.Err() != nil {
			p.InterruptedIn = name
			return false, nil
		}
		return true, nil
	}

	name := filepath.Join(dir, "probe-overwrite")
	f, err := vfs.Default.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return p, fmt.Errorf("probe: %w", err)
	}
	defer func() {
		err = errors.Join(err, closeErr("probe", f.Close()), removeErr("probe", name))
	}()
	var written atomic.Int64
	env.windowOpened("probe: " + probePrefill)
	stop := env.progress.track(fmt.Sprintf("probe: write a %d MiB file full of zeros", probeFileBytes>>20), probeFileBytes, written.Load,
		func(n int64) string { return fmt.Sprintf("%d/%d MiB", n>>20, probeFileBytes>>20) })
	err = prefill(ctx, f, probeFileBytes, &written)
	stop()
	if err != nil {
		return p, err
	}
	if ctx.Err() != nil {
		p.InterruptedIn = probePrefill
		return p, nil
	}

	// fdatasync after a 4 KiB pwrite over written blocks: what one commit
	// of the log costs.
	if ok, err := step(probeFdatasync, "pwrite 4 KiB + fdatasync", l.duration, func() error {
		h := newLatencies()
		n, secs, err := syncLoop(ctx, f, probeWriteBytes, probeWriteBytes, 0, probeFileBytes, l.duration, h)
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if n > 0 {
			p.Fdatasyncs = n
			p.FdatasyncsPerSec = rate(n, secs)
			lat := percentilesOf(h)
			p.FdatasyncP50Ns, p.FdatasyncP99Ns, p.FdatasyncP999Ns, p.FdatasyncMaxNs = lat.p50, lat.p99, lat.p999, lat.max
		}
		return nil
	}); !ok {
		return p, err
	}

	// fdatasync after a 64 KiB pwrite over written blocks: what one
	// commit of 64 producers costs.
	if ok, err := step(probeLarge, "pwrite 64 KiB + fdatasync", l.duration/2, func() error {
		h := newLatencies()
		n, secs, err := syncLoop(ctx, f, probeLargeBytes, probeLargeBytes, 0, probeFileBytes, l.duration/2, h)
		if err != nil {
			return fmt.Errorf("probe: large writes: %w", err)
		}
		if n > 0 {
			p.LargeFdatasyncsPerSec = rate(n, secs)
			lat := percentilesOf(h)
			p.LargeP50Ns, p.LargeP99Ns, p.LargeP999Ns, p.LargeMaxNs = lat.p50, lat.p99, lat.p999, lat.max
		}
		return nil
	}); !ok {
		return p, err
	}

	// Sequential bandwidth: large writes, an fdatasync now and then.
	if ok, err := step(probeWrite, "sequential write, 1 MiB pwrites", l.duration/2, func() error {
		n, secs, err := syncLoop(ctx, f, bandwidthChunk, bandwidthChunk*bandwidthBatch, 0, probeFileBytes, l.duration/2, nil)
		if err != nil {
			return fmt.Errorf("probe: bandwidth: %w", err)
		}
		if r := rate(n*bandwidthChunk, secs); r != nil && n > 0 {
			p.WriteMBPerSec = ptr(*r / 1e6)
		}
		return nil
	}); !ok {
		return p, err
	}

	// fdatasync after a 4 KiB pwrite past the end of a growing file: each
	// must also commit the new size and extent. What pre-writing saves.
	_, err = step(probeAppend, "pwrite 4 KiB + fdatasync at the end of a growing file", l.duration/2, func() error {
		return appendProbe(ctx, dir, l.duration/2, &p)
	})
	return p, err
}

// appendProbe runs the append loop on a new file of dir, and removes it.
func appendProbe(ctx context.Context, dir string, d time.Duration, p *Probe) (err error) {
	name := filepath.Join(dir, "probe-append")
	f, err := vfs.Default.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer func() {
		err = errors.Join(err, closeErr("probe", f.Close()), removeErr("probe", name))
	}()
	h := newLatencies()
	n, secs, err := syncLoop(ctx, f, probeWriteBytes, probeWriteBytes, 0, -1, d, h)
	if err != nil {
		return fmt.Errorf("probe: append: %w", err)
	}
	if n > 0 {
		p.AppendFdatasyncsPerSec = rate(n, secs)
		lat := percentilesOf(h)
		p.AppendP50Ns, p.AppendP99Ns, p.AppendP999Ns, p.AppendMaxNs = lat.p50, lat.p99, lat.p999, lat.max
	}
	return nil
}

// syncLoop writes f sequentially from start, writeBytes per pwrite, and
// fdatasyncs after every syncBytes, for d or until ctx ends. With wrap > 0
// it goes back to start before passing wrap; otherwise the file grows. It
// records the time of each fdatasync and the writes before it in h (when
// not nil), and returns the pwrites made and the seconds they took.
func syncLoop(ctx context.Context, f vfs.File, writeBytes, syncBytes int, start, wrap int64, d time.Duration, h *hdr.Histogram) (writes int64, secs float64, err error) {
	buf := make([]byte, writeBytes)
	for i := range buf {
		buf[i] = byte(i*7 + 1) // not zeros: nothing below may skip or dedupe it
	}
	off := start
	began := time.Now()
	deadline := began.Add(d)
	for pending := 0; ; {
		if ctx.Err() != nil {
			break
		}
		t0 := time.Now()
		for pending = 0; pending < syncBytes; pending += writeBytes {
			if _, err := f.WriteAt(buf, off); err != nil {
				return writes, 0, fmt.Errorf("pwrite at offset %d: %w", off, err)
			}
			writes++
			off += int64(writeBytes)
			if wrap > 0 && off+int64(writeBytes) > wrap {
				off = start
			}
		}
		if err := f.Sync(); err != nil {
			return writes, 0, err
		}
		now := time.Now()
		if h != nil {
			recordLatency(h, now.Sub(t0))
		}
		if !now.Before(deadline) {
			break
		}
	}
	return writes, time.Since(began).Seconds(), nil
}

// prefill writes f full of zeros up to size and fdatasyncs it, adding
// what it wrote to *written; it stops early, without an error, when ctx
// ends.
func prefill(ctx context.Context, f vfs.File, size int64, written *atomic.Int64) error {
	zeros := make([]byte, prefillChunk)
	for off := int64(0); off < size; off += prefillChunk {
		if ctx.Err() != nil {
			return nil
		}
		if _, err := f.WriteAt(zeros, off); err != nil {
			return fmt.Errorf("probe: prefill: %w", err)
		}
		written.Add(prefillChunk)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("probe: prefill: %w", err)
	}
	return nil
}

// messageBytes is about how many bytes of log one published message of
// size bytes takes: its frame around its publish event.
func messageBytes(size int) int { return segment.Size(size + publishEventBytes) }

// ceiling is the durable-message ceiling the probe p implies for producers
// closed-loop producers of messages of size bytes with perfect group
// commit: each fdatasync carries one message of every producer, so one
// commit takes one fdatasync's time plus the time to write their bytes at
// the sequential bandwidth, and makes producers messages durable:
//
//	producers / (1/fdatasyncs_per_sec + producers × messageBytes(size) / bandwidth)
//
// With producers 0 (unbounded) only the bandwidth bounds it. It is nil
// when p lacks a figure it needs.
func ceiling(p Probe, producers, size int) *float64 {
	if p.WriteMBPerSec == nil || *p.WriteMBPerSec <= 0 {
		return nil
	}
	bw := *p.WriteMBPerSec * 1e6
	b := float64(messageBytes(size))
	if producers == 0 {
		return ptr(bw / b)
	}
	if p.FdatasyncsPerSec == nil || *p.FdatasyncsPerSec <= 0 {
		return nil
	}
	n := float64(producers)
	return ptr(n / (1 / *p.FdatasyncsPerSec + n*b/bw))
}

// ceilingsOf computes want's ceilings from p.
func ceilingsOf(p Probe, want []Ceiling) []Ceiling {
	out := make([]Ceiling, len(want))
	for i, c := range want {
		out[i] = Ceiling{Producers: c.Producers, Size: c.Size, MsgsPerSec: ceiling(p, c.Producers, c.Size)}
	}
	return out
}

// closeErr names what a failed Close belonged to.
func closeErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: close: %w", what, err)
}

// removeErr removes the file name, naming what it belonged to on failure.
func removeErr(what, name string) error {
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
