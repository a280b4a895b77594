package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"
)

// report is everything walbench measured; its JSON form is documented in
// main.go.
type report struct {
	Machine machine `json:"machine"`
	Rows    []row   `json:"rows"`
}

// row is one line of the table. Pointer fields are nil where the column
// does not apply: "-" in the table, null in the JSON.
type row struct {
	Workload     string  `json:"workload"`
	Kind         string  `json:"kind"`
	Sync         string  `json:"sync,omitempty"`
	Appenders    int     `json:"appenders,omitempty"`
	BytesPerOp   int     `json:"bytes_per_op"`
	SegmentBytes int64   `json:"segment_bytes,omitempty"`
	Seconds      float64 `json:"seconds"`
	Interrupted  bool    `json:"interrupted"`

	Ops            int64  `json:"ops"`
	Fdatasyncs     int64  `json:"fdatasyncs"`
	FileBytes      int64  `json:"file_bytes,omitempty"`
	Rotations      int64  `json:"rotations,omitempty"`
	LatencySamples uint64 `json:"latency_samples"`

	AppendsPerSec       *float64 `json:"appends_per_sec"`
	MBPerSec            float64  `json:"mb_per_sec"`
	P50Ns               *int64   `json:"p50_ns"`
	P99Ns               *int64   `json:"p99_ns"`
	MeanNs              *int64   `json:"mean_ns"`
	MaxNs               *int64   `json:"max_ns"`
	FdatasyncsPerSec    float64  `json:"fdatasyncs_per_sec"`
	RecordsPerFdatasync *float64 `json:"records_per_fdatasync"`
	VsRawOverwrite      *float64 `json:"vs_raw_overwrite"`

	Notes []string `json:"notes,omitempty"`
}

const (
	kindRawOverwrite = "raw-overwrite"
	kindRawAppend    = "raw-append"
	kindWAL          = "wal"
)

func probeRow(p probeResult) row {
	secs := p.window.elapsed.Seconds()
	r := row{
		Workload:         fmt.Sprintf("raw %v: pwrite 4 KiB + fdatasync", p.mode),
		Kind:             kindRawAppend,
		BytesPerOp:       probeWriteBytes,
		Seconds:          secs,
		Interrupted:      p.interrupted,
		Ops:              p.syncs,
		Fdatasyncs:       p.syncs,
		MBPerSec:         rate(p.syncs*probeWriteBytes, secs) / 1e6,
		FdatasyncsPerSec: rate(p.syncs, secs),
	}
	if p.mode == probeOverwrite {
		r.Kind = kindRawOverwrite
	}
	r.setLatency(p.hist)
	return r
}

// walRow makes the row of w; overwriteRate is the raw overwrite probe's
// fdatasyncs/s, zero if it did not run.
func walRow(w walResult, overwriteRate float64) row {
	secs := w.window.elapsed.Seconds()
	r := row{
		Workload:         w.load.String(),
		Kind:             kindWAL,
		Sync:             w.load.sync.String(),
		Appenders:        w.load.appenders,
		BytesPerOp:       w.load.recordBytes,
		SegmentBytes:     w.load.segmentBytes,
		Seconds:          secs,
		Interrupted:      w.interrupted,
		Ops:              w.records,
		Fdatasyncs:       w.syncs,
		FileBytes:        w.fileBytes,
		Rotations:        w.rotations,
		MBPerSec:         rate(w.records*int64(w.load.recordBytes), secs) / 1e6,
		FdatasyncsPerSec: rate(w.syncs, secs),
		Notes:            w.notes,
	}
	appends := rate(w.records, secs) // one record per Append
	r.AppendsPerSec = &appends
	if w.syncs > 0 {
		r.RecordsPerFdatasync = ptr(float64(w.records) / float64(w.syncs))
	}
	if overwriteRate > 0 {
		r.VsRawOverwrite = ptr(appends / overwriteRate)
	}
	r.setLatency(w.hist)
	return r
}

func (r *row) setLatency(h *Histogram) {
	r.LatencySamples = h.Count()
	if h.Count() == 0 {
		return
	}
	r.P50Ns = ptr(int64(h.Percentile(0.50)))
	r.P99Ns = ptr(int64(h.Percentile(0.99)))
	r.MeanNs = ptr(int64(h.Mean()))
	r.MaxNs = ptr(int64(h.Max()))
}

// rate is n per second over secs, zero for an empty interval.
func rate(n int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

func ptr[T any](v T) *T { return &v }

// printTable writes the rows as an aligned table, the notes and then the
// machine facts.
func printTable(out io.Writer, rep report) error {
	width := len("workload")
	names := make([]string, len(rep.Rows))
	for i, r := range rep.Rows {
		names[i] = r.Workload
		if r.Interrupted {
			names[i] += " (interrupted)"
		}
		width = max(width, len([]rune(names[i])))
	}
	// Numbers read best right-aligned. The workload column is padded here
	// so that it stays left-aligned, and every other cell starts with the
	// gap, so that the table does not start with one.
	tw := tabwriter.NewWriter(out, 0, 0, 0, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\t  appends/s\t  MB/s\t  p50\t  p99\t  fdatasyncs/s\t  records/fdatasync\t  ÷ raw overwrite fsync\t\n", width, "workload")
	for i, r := range rep.Rows {
		fmt.Fprintf(tw, "%-*s\t  %s\t  %.2f\t  %s\t  %s\t  %.0f\t  %s\t  %s\t\n", width, names[i],
			orDash(r.AppendsPerSec, "%.0f"), r.MBPerSec,
			latency(r.P50Ns), latency(r.P99Ns),
			r.FdatasyncsPerSec,
			orDash(r.RecordsPerFdatasync, "%.1f"),
			orDash(r.VsRawOverwrite, "%.2f"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		for _, n := range r.Notes {
			fmt.Fprintf(out, "note: %s: %s\n", r.Workload, n)
		}
	}

	m := rep.Machine
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fs := m.Filesystem
	if m.FSMagic != "" {
		fs += " (statfs f_type " + m.FSMagic + ")"
	}
	for _, kv := range [][2]string{
		{"date", m.Date},
		{"cpus", strconv.Itoa(m.NumCPU)},
		{"os/arch", m.GOOS + "/" + m.GOARCH},
		{"kernel", m.Kernel},
		{"go", m.GoVersion},
		{"filesystem", fs},
		{"directory", m.Dir + " (removed)"},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
	}
	return tw.Flush()
}

func orDash(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// latency formats nanoseconds with three significant digits.
func latency(ns *int64) string {
	if ns == nil {
		return "-"
	}
	d := time.Duration(*ns)
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", *ns)
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%.2fµs", float64(d)/1e3)
	case d < 100*time.Microsecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.0fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// writeJSON writes rep to the file name.
func writeJSON(name string, rep report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("-json %s: %w", name, err)
	}
	if err := os.WriteFile(name, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	return nil
}
