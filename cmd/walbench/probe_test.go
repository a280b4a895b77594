package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/vfs"
)

// TestCeiling checks the ceiling's arithmetic on round figures: 5000
// fdatasyncs/s (200 µs each) and 500 MB/s.
func TestCeiling(t *testing.T) {
	p := Probe{FdatasyncsPerSec: ptr(5000.0), WriteMBPerSec: ptr(500.0)}
	b := float64(messageBytes(1024)) // 17 + 16 + 1024 = 1057
	if b != 1057 {
		t.Fatalf("messageBytes(1024) = %v, want 1057", b)
	}
	for _, tc := range []struct {
		producers int
		want      float64
	}{
		// One message per commit: 200 µs + 1057 B at 500 MB/s.
		{1, 1 / (200e-6 + 1057/500e6)},
		// 64 messages per commit: 200 µs + 64 × 1057 B at 500 MB/s.
		{64, 64 / (200e-6 + 64*1057/500e6)},
		// Any number: the bandwidth alone.
		{0, 500e6 / 1057},
	} {
		got := ceiling(p, tc.producers, 1024)
		if got == nil || !near(*got, tc.want) {
			t.Errorf("ceiling(%d producers) = %v, want %v", tc.producers, got, tc.want)
		}
	}
	// More producers, more per commit: the ceiling grows toward the
	// bandwidth's, never past it.
	prev := 0.0
	for _, n := range []int{1, 2, 16, 64, 1024, 1 << 20} {
		c := *ceiling(p, n, 1024)
		if c <= prev || c >= *ceiling(p, 0, 1024) {
			t.Errorf("ceiling(%d) = %v after %v, bound %v", n, c, prev, *ceiling(p, 0, 1024))
		}
		prev = c
	}
	for _, q := range []Probe{{FdatasyncsPerSec: ptr(5000.0)}, {WriteMBPerSec: ptr(500.0)}, {FdatasyncsPerSec: ptr(0.0), WriteMBPerSec: ptr(500.0)}} {
		if c := ceiling(q, 4, 1024); c != nil {
			t.Errorf("ceiling from %+v = %v, want none", q, *c)
		}
	}
}

// TestProbe runs the probe for a few milliseconds: every figure is there,
// and its files are gone.
func TestProbe(t *testing.T) {
	dir := benchDir(t)
	want := []Ceiling{{Producers: 1, Size: 100}, {Producers: 0, Size: 100}}
	p, err := runProbe(context.Background(), &env{progress: newProgress(os.Stderr)}, dir, probeLoad{duration: 30 * time.Millisecond, ceilings: want})
	if err != nil {
		t.Fatal(err)
	}
	if p.Interrupted || p.Fdatasyncs == 0 || p.FdatasyncsPerSec == nil || p.FdatasyncP50Ns == nil || p.FdatasyncP999Ns == nil ||
		p.LargeFdatasyncsPerSec == nil || p.LargeP50Ns == nil || p.LargeP99Ns == nil || p.LargeP999Ns == nil || p.LargeMaxNs == nil ||
		p.WriteMBPerSec == nil || p.AppendFdatasyncsPerSec == nil || p.AppendP99Ns == nil || p.Seconds <= 0 {
		t.Errorf("probe: %+v", p)
	}
	if len(p.Ceilings) != 2 || p.Ceilings[0].MsgsPerSec == nil || !near(*p.Ceilings[0].MsgsPerSec, *ceiling(p, 1, 100)) {
		t.Errorf("ceilings %+v", p.Ceilings)
	}
	assertDirEmpty(t, dir)
}

func TestProbeInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := benchDir(t)
	p, err := runProbe(ctx, &env{progress: newProgress(os.Stderr)}, dir, probeLoad{duration: time.Hour})
	if err != nil || !p.Interrupted || p.FdatasyncsPerSec != nil {
		t.Errorf("probe after cancel: %+v, %v; want interrupted, nothing measured, no error", p, err)
	}
	assertDirEmpty(t, dir)
}

// createFile creates a new file the way the probe opens its own.
func createFile(name string) (vfs.File, error) {
	return vfs.Default.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
}

// TestSyncLoopWraps: an overwriting loop stays inside its file, and an
// appending one grows it by what it wrote.
func TestSyncLoopWraps(t *testing.T) {
	dir := benchDir(t)
	f, err := createFile(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const wrap = 10 * 4096
	writes, _, err := syncLoop(context.Background(), f, 4096, 8192, 32, wrap, 20*time.Millisecond, nil)
	if err != nil || writes < 2 {
		t.Fatalf("syncLoop: %d writes, %v", writes, err)
	}
	if size, _ := f.Size(); size > wrap {
		t.Errorf("overwriting loop grew the file to %d bytes, past %d", size, wrap)
	}
	g, err := createFile(filepath.Join(dir, "g"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	h := newLatencies()
	writes, _, err = syncLoop(context.Background(), g, 4096, 4096, 0, -1, 20*time.Millisecond, h)
	if err != nil {
		t.Fatal(err)
	}
	if size, _ := g.Size(); size != writes*4096 || h.TotalCount() != writes {
		t.Errorf("appending loop: %d bytes, %d latencies after %d writes of 4096", size, h.TotalCount(), writes)
	}
}

// TestSyncLoopOverwritesItsWholeFile: an overwriting loop writes every
// block of its file before it goes back to the start, the last one too.
func TestSyncLoopOverwritesItsWholeFile(t *testing.T) {
	f, err := createFile(filepath.Join(benchDir(t), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// One fdatasync after three pwrites, in a file of three blocks.
	const wrap = 3 * 4096
	if _, _, err := syncLoop(context.Background(), f, 4096, wrap, 0, wrap, time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if size, _ := f.Size(); size != wrap {
		t.Errorf("the file has %d bytes after the first three pwrites; want %d, its last block written", size, wrap)
	}
}

// TestProbeFiguresAgree checks relations that hold between the probe's
// figures however fast the disk is: each loop's percentiles in order; at
// least half of a loop's fdatasyncs took its p50 or more (less the width
// of a histogram bucket, under 0.1%), so the loop made at most two per
// p50; and the bandwidth loop wrote at least one batch of 8 MiB within
// the probe's seconds.
func TestProbeFiguresAgree(t *testing.T) {
	p, err := runProbe(context.Background(), &env{progress: newProgress(io.Discard)}, benchDir(t), probeLoad{duration: 60 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, loop := range []struct {
		name                string
		perSec              *float64
		p50, p99, p999, max *int64
	}{
		{"fdatasync", p.FdatasyncsPerSec, p.FdatasyncP50Ns, p.FdatasyncP99Ns, p.FdatasyncP999Ns, p.FdatasyncMaxNs},
		{"64 KiB", p.LargeFdatasyncsPerSec, p.LargeP50Ns, p.LargeP99Ns, p.LargeP999Ns, p.LargeMaxNs},
		{"append", p.AppendFdatasyncsPerSec, p.AppendP50Ns, p.AppendP99Ns, p.AppendP999Ns, p.AppendMaxNs},
	} {
		if loop.perSec == nil || loop.p50 == nil || loop.p99 == nil || loop.p999 == nil || loop.max == nil {
			t.Errorf("%s loop: a figure is missing: %+v", loop.name, p)
			continue
		}
		if !(*loop.p50 <= *loop.p99 && *loop.p99 <= *loop.p999 && *loop.p999 <= *loop.max) {
			t.Errorf("%s loop: p50 %d, p99 %d, p99.9 %d, max %d ns; want them in order", loop.name, *loop.p50, *loop.p99, *loop.p999, *loop.max)
		}
		if most := 2 / (0.99 * float64(*loop.p50) / 1e9); *loop.perSec > most {
			t.Errorf("%s loop: %.0f fdatasyncs/s with a p50 of %d ns; at most %.0f can be", loop.name, *loop.perSec, *loop.p50, most)
		}
	}
	if least := float64(p.Fdatasyncs) / p.Seconds; p.FdatasyncsPerSec != nil && *p.FdatasyncsPerSec < least {
		t.Errorf("%v fdatasyncs/s, but %d fdatasyncs in the probe's %v s", *p.FdatasyncsPerSec, p.Fdatasyncs, p.Seconds)
	}
	if least := float64(bandwidthBatch*bandwidthChunk) / p.Seconds / 1e6; p.WriteMBPerSec == nil || *p.WriteMBPerSec < least {
		t.Errorf("bandwidth %v MB/s; want at least %v: %d MiB written within the probe's %v s", deref(p.WriteMBPerSec), least, bandwidthBatch, p.Seconds)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{64 << 20: "64 MiB", 16 << 10: "16 KiB", 1000: "1000 B", 1 << 30: "1 GiB", 1536: "1536 B"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
		if back, err := parseBytes(formatBytesFlag(n)); err != nil || back != n {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", formatBytesFlag(n), back, err, n)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the progress goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestProbeProgress: every loop of the probe shows its progress, not the
// first alone. (Here every step shows a line at once; walbench waits two
// seconds before the first.) A line shows only while its loop runs, half
// the probe's duration for most: a loaded machine that does not run the
// progress goroutine for that long shows none, so a probe that misses a
// line is run again, with loops twice as long.
func TestProbeProgress(t *testing.T) {
	labels := []string{"probe: pwrite 4 KiB + fdatasync: ", "probe: pwrite 64 KiB + fdatasync: ", "probe: sequential write, 1 MiB pwrites: ",
		"probe: pwrite 4 KiB + fdatasync at the end of a growing file: "}
	var missing []string
	var out syncBuffer
	d := 200 * time.Millisecond
	for try := 0; try < 5; try, d = try+1, 2*d {
		out = syncBuffer{}
		pr := newProgress(&out)
		pr.quiet, pr.every, pr.poll = 0, 0, time.Millisecond
		if _, err := runProbe(context.Background(), &env{progress: pr}, benchDir(t), probeLoad{duration: d}); err != nil {
			t.Fatal(err)
		}
		missing = missing[:0]
		for _, label := range labels {
			if !strings.Contains(out.String(), label) {
				missing = append(missing, label)
			}
		}
		if len(missing) == 0 {
			return
		}
		t.Logf("a probe of %v showed no progress line %q", d, missing)
	}
	t.Errorf("no progress line %q even in a probe of %v:\n%s", missing, d/2, out.String())
}

// TestProbeInterruptedInAppend stops the probe as its last loop starts:
// that loop's row alone is marked, and the ceilings are computed from the
// figures the earlier loops measured.
func TestProbeInterruptedInAppend(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var steps []string
	e := &env{progress: newProgress(io.Discard), onWindow: func(name string) {
		steps = append(steps, name)
		if name == "probe: "+probeAppend {
			cancel()
		}
	}}
	dir := benchDir(t)
	p, err := runProbe(ctx, e, dir, probeLoad{duration: 30 * time.Millisecond, ceilings: []Ceiling{{Producers: 4, Size: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	assertDirEmpty(t, dir)
	if want := []string{"probe: prefill", "probe: fdatasync", "probe: large", "probe: write", "probe: append"}; !slices.Equal(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
	if !p.Interrupted || p.InterruptedIn != probeAppend || p.FdatasyncsPerSec == nil || p.WriteMBPerSec == nil || p.AppendFdatasyncsPerSec != nil {
		t.Fatalf("probe: %+v; want it interrupted in the append loop, with the figures of the others", p)
	}
	if len(p.Ceilings) != 1 || p.Ceilings[0].MsgsPerSec == nil || !near(*p.Ceilings[0].MsgsPerSec, *ceiling(p, 4, 100)) {
		t.Errorf("ceilings %+v; want the one asked for, from the figures measured", p.Ceilings)
	}
	tb := probeTable(&p, 1)
	for i, row := range tb.rows[:4] {
		if marked := strings.HasSuffix(row[0], " (interrupted)"); marked != (i == 3) {
			t.Errorf("row %q: marked %v; only the append loop's row was cut", row[0], marked)
		}
	}
}

// TestProbeTableMarksTheStepCut: the probe's table marks the row of the
// step Ctrl-C stopped, whichever it was.
func TestProbeTableMarksTheStepCut(t *testing.T) {
	for i, step := range []string{probeFdatasync, probeLarge, probeWrite, probeAppend} {
		tb := probeTable(&Probe{Interrupted: true, InterruptedIn: step}, 1)
		for j, row := range tb.rows[:4] {
			if marked := strings.HasSuffix(row[0], " (interrupted)"); marked != (i == j) {
				t.Errorf("cut in %s: row %q marked %v", step, row[0], marked)
			}
		}
	}
	tb := probeTable(&Probe{Interrupted: true, InterruptedIn: probePrefill}, 1)
	if !slices.ContainsFunc(tb.notes, func(n string) bool { return strings.Contains(n, "interrupted while writing its 64 MiB file") }) {
		t.Errorf("cut in the prefill: notes %q", tb.notes)
	}
}

// TestProbeTableOfRoundsMarksEachLoopByItsRounds: of several rounds, each
// loop's row says in how many rounds it was measured, and is marked
// interrupted only when a round Ctrl-C cut in it measured something in it;
// each cut round has a note of its own.
func TestProbeTableOfRoundsMarksEachLoopByItsRounds(t *testing.T) {
	whole := Probe{Round: 1, FdatasyncsPerSec: ptr(5000.0), LargeFdatasyncsPerSec: ptr(2000.0), WriteMBPerSec: ptr(500.0), AppendFdatasyncsPerSec: ptr(1000.0)}
	// Round 2 cut partway through its 64 KiB loop, which measured; round 3
	// at the start of its bandwidth loop, which did not.
	cutInLarge := Probe{Round: 2, Interrupted: true, InterruptedIn: probeLarge, FdatasyncsPerSec: ptr(5000.0), LargeFdatasyncsPerSec: ptr(2000.0)}
	cutInWrite := Probe{Round: 3, Interrupted: true, InterruptedIn: probeWrite, FdatasyncsPerSec: ptr(5000.0), LargeFdatasyncsPerSec: ptr(2000.0)}
	p := summarize([]Probe{whole, cutInLarge, cutInWrite}, true)
	tb := probeTable(&p, 3)
	want := []string{
		"fdatasync after pwrite 4 KiB over written blocks",
		"fdatasync after pwrite 64 KiB over written blocks (interrupted)",
		"sequential write, 1 MiB pwrites, fdatasync every 8 MiB (1 of 3 rounds)",
		"fdatasync after pwrite 4 KiB at the end of a growing file (1 of 3 rounds)",
	}
	for i, row := range tb.rows[:4] {
		if row[0] != want[i] {
			t.Errorf("row %d named %q, want %q", i, row[0], want[i])
		}
	}
	for _, n := range []string{
		"note: probe: round 2: interrupted in its 64 KiB overwrite loop; the loops after it did not run in that round",
		"note: probe: round 3: interrupted in its sequential write loop; the loops after it did not run in that round",
	} {
		if !slices.Contains(tb.notes, n) {
			t.Errorf("no note %q in %q", n, tb.notes)
		}
	}
}
