package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReopenRound fills a small store and runs one round of the reopen
// workload on it: both opens are timed, each hands out a message of the
// store, and the heap is read.
func TestReopenRound(t *testing.T) {
	l := reopenLoad{messages: 500, payloadBytes: 200, segmentBytes: 64 << 10}
	dir := t.TempDir()
	fill, interrupted, err := fillReopen(context.Background(), io.Discard, dir, l)
	defer func() {
		var err error
		if fill.st.release(&err); err != nil {
			t.Error(err)
		}
		assertDirEmpty(t, dir, "store directory left behind: %v")
	}()
	if err != nil || interrupted {
		t.Fatalf("fillReopen: %v (interrupted: %v)", err, interrupted)
	}
	// 500 messages of 200 B take two 64 KiB segments.
	if fill.segments < 2 || fill.indexBytes <= 0 || fill.elapsed <= 0 {
		t.Errorf("after the fill: %d segments, index %d bytes, %v; want several, some, some", fill.segments, fill.indexBytes, fill.elapsed)
	}
	res, interrupted, err := reopenRound(context.Background(), fill.st.dir, l)
	if err != nil || interrupted {
		t.Fatalf("reopenRound: %v (interrupted: %v)", err, interrupted)
	}
	for _, o := range []struct {
		how string
		t   openTiming
	}{{"from the checkpoint", res.checkpoint}, {"rebuilding", res.rebuild}} {
		if o.t.elapsed <= 0 || o.t.first.ID == "" || len(o.t.first.Payload) != l.payloadBytes {
			t.Errorf("open %s: %v, first message %q of %d bytes; want a time, and a message of %d bytes",
				o.how, o.t.elapsed, o.t.first.ID, len(o.t.first.Payload), l.payloadBytes)
		}
	}
	if res.checkpoint.first.ID == res.rebuild.first.ID {
		t.Errorf("both opens received message %s: the first one's lease was lost", res.checkpoint.first.ID)
	}
	if res.checkpoint.heapBefore == 0 || res.checkpoint.heapInUse == 0 {
		t.Errorf("heap in use %d before the open, %d after; want both", res.checkpoint.heapBefore, res.checkpoint.heapInUse)
	}
	if len(res.notes) > 0 {
		t.Errorf("notes: %q", res.notes)
	}
}

// TestRunReopen runs walbench with -reopen-messages, two rounds, and
// checks the reopen table and the reopen figures of the JSON.
func TestRunReopen(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(t.TempDir(), "bench.json")
	stdout := runOK(t,
		"-dir", dir, "-rounds", "2", "-time", "50ms", "-probe-time", "0", "-warmup", "0",
		"-appenders", "1", "-size", "200", "-segment-bytes", "65536", "-broker=false",
		"-reopen-messages", "500", "-json", jsonFile,
	)
	for _, want := range []string{"broker reopen, 500 pending, 200 B, sync=all", "from checkpoint", "forced rebuild", "heap B/message"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table has no %q", want)
		}
	}
	if strings.Contains(stdout, "note:") {
		t.Errorf("notes in the table")
	}
	assertDirEmpty(t, dir, "left behind in -dir: %v")

	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("-json: %v", err)
	}
	r := rep.Reopen
	if len(rep.Rows) != 1 || r == nil {
		t.Fatalf("-json: %d rows, reopen %v; want the WAL row and the reopen figures", len(rep.Rows), r)
	}
	if r.Messages != 500 || r.BytesPerOp != 200 || r.Rounds != 2 || len(r.PerRound) != 2 || r.Interrupted {
		t.Errorf("reopen: %d messages of %d B, %d rounds, %d per round, interrupted %v; want 500 of 200 B, 2, 2, false",
			r.Messages, r.BytesPerOp, r.Rounds, len(r.PerRound), r.Interrupted)
	}
	if r.FillSeconds <= 0 || r.Segments < 2 || r.SegmentFileBytes <= 0 || r.IndexBytes <= 0 {
		t.Errorf("reopen fill: %vs, %d segments of %d bytes, index %d bytes; want all positive", r.FillSeconds, r.Segments, r.SegmentFileBytes, r.IndexBytes)
	}
	for _, p := range append([]reopenRow{*r}, r.PerRound...) {
		if p.CheckpointOpenNs <= 0 || p.RebuildOpenNs <= 0 || p.HeapInUseBytes <= 0 || p.HeapBytesPerMessage <= 0 {
			t.Errorf("reopen round %d: from checkpoint %d ns, rebuild %d ns, heap %d B, %v B/message; want all positive",
				p.Round, p.CheckpointOpenNs, p.RebuildOpenNs, p.HeapInUseBytes, p.HeapBytesPerMessage)
		}
		if len(p.Notes) > 0 {
			t.Errorf("reopen round %d: notes %q", p.Round, p.Notes)
		}
	}
	for k, p := range r.PerRound {
		want := float64(p.RebuildOpenNs) / float64(p.CheckpointOpenNs)
		if p.Round != k+1 || math.Abs(p.RebuildVsCheckpoint-want) > 1e-9*want {
			t.Errorf("reopen per round %d: round %d, rebuild ÷ checkpoint %v; want %d, %v", k, p.Round, p.RebuildVsCheckpoint, k+1, want)
		}
	}
	ratios := []float64{r.PerRound[0].RebuildVsCheckpoint, r.PerRound[1].RebuildVsCheckpoint}
	if math.Abs(r.RebuildVsCheckpoint-(ratios[0]+ratios[1])/2) > 1e-9 || r.RebuildVsCheckpointMin == nil ||
		*r.RebuildVsCheckpointMin != min(ratios[0], ratios[1]) || *r.RebuildVsCheckpointMax != max(ratios[0], ratios[1]) {
		t.Errorf("reopen: rebuild ÷ checkpoint %v (%v–%v); the rounds' are %v", r.RebuildVsCheckpoint, r.RebuildVsCheckpointMin, r.RebuildVsCheckpointMax, ratios)
	}
}

func TestReopenMessagesNegative(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-dir", t.TempDir(), "-reopen-messages", "-1"}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("run = %d, want %d; stderr:\n%s", code, exitUsage, &stderr)
	}
}
