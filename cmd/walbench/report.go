package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/wal"
)

// report is everything walbench measured; its JSON form is documented in
// main.go.
type report struct {
	Machine machine `json:"machine"`
	Rounds  int     `json:"rounds"` // the -rounds asked for
	Rows    []row   `json:"rows"`
	// Reopen holds the reopen workload's figures, with -reopen-messages.
	Reopen *reopenRow `json:"reopen,omitempty"`
}

// row is one line of the table. Pointer fields are nil where the column
// does not apply: "-" in the table, null in the JSON.
//
// A row is either one round's measurement of a workload (Round set) or
// the summary of its rounds (Rounds and PerRound set): see summarize.
type row struct {
	Workload     string  `json:"workload"`
	Kind         string  `json:"kind"`
	Sync         string  `json:"sync,omitempty"`
	Appenders    int     `json:"appenders,omitempty"`
	Producers    int     `json:"producers,omitempty"` // broker publish
	Method       string  `json:"method,omitempty"`    // broker drain: drainMethod
	Consumers    int     `json:"consumers,omitempty"` // broker drain
	Batch        int     `json:"batch,omitempty"`     // broker drain
	Messages     int     `json:"messages,omitempty"`  // broker drain: prefilled and drained, each round
	BytesPerOp   int     `json:"bytes_per_op"`
	SegmentBytes int64   `json:"segment_bytes,omitempty"`
	Round        int     `json:"round,omitempty"`  // 1-based; one round's row only
	Rounds       int     `json:"rounds,omitempty"` // rounds summarized; a summary only
	Seconds      float64 `json:"seconds"`
	FillSeconds  float64 `json:"fill_seconds,omitempty"` // broker drain: the untimed prefill
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
	VsRawOverwriteMin   *float64 `json:"vs_raw_overwrite_min,omitempty"`
	VsRawOverwriteMax   *float64 `json:"vs_raw_overwrite_max,omitempty"`

	// The batch ceiling: the raw probe run right after a sync=always WAL
	// workload, writing that workload's mean bytes per fdatasync.
	BytesPerFdatasync            *float64 `json:"bytes_per_fdatasync"`
	BatchCeilingFdatasyncsPerSec *float64 `json:"batch_ceiling_fdatasyncs_per_sec"`
	BatchCeilingPerSec           *float64 `json:"batch_ceiling_records_per_sec"`
	VsBatchCeiling               *float64 `json:"vs_batch_ceiling"`
	VsBatchCeilingMin            *float64 `json:"vs_batch_ceiling_min,omitempty"`
	VsBatchCeilingMax            *float64 `json:"vs_batch_ceiling_max,omitempty"`

	// A broker publish row's msgs/s ÷ the appends/s of the same round's
	// sync=always WAL row with as many appenders as it has producers.
	VsWALSameN    *float64 `json:"vs_wal_same_n"`
	VsWALSameNMin *float64 `json:"vs_wal_same_n_min,omitempty"`
	VsWALSameNMax *float64 `json:"vs_wal_same_n_max,omitempty"`

	Notes    []string `json:"notes,omitempty"`
	PerRound []row    `json:"per_round,omitempty"`
}

const (
	kindRawOverwrite  = "raw-overwrite"
	kindRawAppend     = "raw-append"
	kindWAL           = "wal"
	kindBrokerPublish = "broker-publish"
	kindBrokerDrain   = "broker-drain"
)

func probeRow(p probeResult) row {
	secs := p.window.elapsed.Seconds()
	r := row{
		Workload:         fmt.Sprintf("raw %v: pwrite 4 KiB + fdatasync", p.spec.mode),
		Kind:             kindRawAppend,
		BytesPerOp:       probeWriteBytes,
		Seconds:          secs,
		Interrupted:      p.interrupted,
		Ops:              p.syncs,
		Fdatasyncs:       p.syncs,
		MBPerSec:         rate(p.syncs*probeWriteBytes, secs) / 1e6,
		FdatasyncsPerSec: rate(p.syncs, secs),
	}
	if p.spec.mode == probeOverwrite {
		r.Kind = kindRawOverwrite
	}
	r.setLatency(p.hist)
	return r
}

// walRow makes the row of w; overwriteRate is the fdatasyncs/s of the raw
// overwrite probe of the same round, zero if it did not run.
func walRow(w walResult, overwriteRate float64) row {
	r := row{
		Workload:     w.load.String(),
		Kind:         kindWAL,
		Sync:         w.load.sync.String(),
		Appenders:    w.load.appenders,
		BytesPerOp:   w.load.recordBytes,
		SegmentBytes: w.load.segmentBytes,
		Seconds:      w.window.elapsed.Seconds(),
		Interrupted:  w.interrupted,
		Ops:          w.records,
		Fdatasyncs:   w.syncs,
		FileBytes:    w.fileBytes,
		Rotations:    w.rotations,
		Notes:        w.notes,
	}
	r.setClosedLoop(overwriteRate, w.hist) // one record per Append
	if w.syncs > 0 {
		r.BytesPerFdatasync = ptr(float64(w.fileBytes) / float64(w.syncs))
	}
	return r
}

// brokerPublishRow makes the row of b; overwriteRate is the fdatasyncs/s
// of the raw overwrite probe of the same round, zero if it did not run.
// Its VsWALSameN is set by setVsWALSameN, once the round has its rows.
func brokerPublishRow(b brokerPublishResult, overwriteRate float64) row {
	r := row{
		Workload:     b.load.String(),
		Kind:         kindBrokerPublish,
		Sync:         broker.SyncAll.String(),
		Producers:    b.load.producers,
		BytesPerOp:   b.load.payloadBytes,
		SegmentBytes: b.load.segmentBytes,
		Seconds:      b.window.elapsed.Seconds(),
		Interrupted:  b.interrupted,
		Ops:          b.records,
		Fdatasyncs:   b.commits,
		Notes:        b.notes,
	}
	r.setClosedLoop(overwriteRate, b.hist) // one record per Publish
	return r
}

// setClosedLoop sets the rates of the row of a closed-loop workload, in
// which each operation wrote one record, from its Ops, Fdatasyncs,
// BytesPerOp and Seconds, and its latency from h. overwriteRate is the
// fdatasyncs/s of the raw overwrite probe of the same round, zero if it
// did not run.
func (r *row) setClosedLoop(overwriteRate float64, h *Histogram) {
	secs := r.Seconds
	r.MBPerSec = rate(r.Ops*int64(r.BytesPerOp), secs) / 1e6
	r.FdatasyncsPerSec = rate(r.Fdatasyncs, secs)
	ops := rate(r.Ops, secs)
	r.AppendsPerSec = &ops
	if r.Fdatasyncs > 0 {
		r.RecordsPerFdatasync = ptr(float64(r.Ops) / float64(r.Fdatasyncs))
	}
	if overwriteRate > 0 {
		r.VsRawOverwrite = ptr(ops / overwriteRate)
	}
	r.setLatency(h)
}

// brokerDrainRow makes the row of d: messages drained per second, and the
// store's records (leases and acks) per commit.
func brokerDrainRow(d brokerDrainResult) row {
	secs := d.elapsed.Seconds()
	r := row{
		Workload:         d.load.String(),
		Kind:             kindBrokerDrain,
		Sync:             d.load.sync.String(),
		Method:           d.load.method.String(),
		Consumers:        d.load.consumers,
		Batch:            d.load.batch,
		Messages:         d.load.messages,
		BytesPerOp:       d.load.payloadBytes,
		SegmentBytes:     d.load.segmentBytes,
		Seconds:          secs,
		FillSeconds:      d.fill.Seconds(),
		Interrupted:      d.interrupted,
		Ops:              d.handled,
		Fdatasyncs:       d.commits,
		MBPerSec:         rate(d.handled*int64(d.load.payloadBytes), secs) / 1e6,
		FdatasyncsPerSec: rate(d.commits, secs),
		Notes:            d.notes,
	}
	r.AppendsPerSec = ptr(rate(d.handled, secs))
	if d.commits > 0 {
		r.RecordsPerFdatasync = ptr(float64(d.records) / float64(d.commits))
	}
	return r // no latencies: the drain times no single call
}

// setVsWALSameN sets, in the rows of one round, each broker publish row's
// VsWALSameN: its msgs/s ÷ the appends/s of the first sync=always WAL row
// of the round with as many appenders as the row has producers. Under
// SyncAll every Publish waits for an fdatasync as every such Append does;
// WAL rows under another -sync are no measure for it, and leave the ratio
// nil, as does a round without the WAL row or with a rate of zero.
func setVsWALSameN(rows []row) {
	walRate := map[int]float64{}
	for _, r := range rows {
		if r.Kind != kindWAL || r.Sync != wal.SyncAlways.String() || r.AppendsPerSec == nil {
			continue
		}
		if _, ok := walRate[r.Appenders]; !ok {
			walRate[r.Appenders] = *r.AppendsPerSec
		}
	}
	for i := range rows {
		r := &rows[i]
		if r.Kind != kindBrokerPublish || r.AppendsPerSec == nil {
			continue
		}
		r.VsWALSameN = nil
		if w := walRate[r.Producers]; w > 0 {
			r.VsWALSameN = ptr(*r.AppendsPerSec / w)
		}
	}
}

// setBatchCeiling adds to a WAL row the batch ceiling probe p, which wrote
// the row's bytes per fdatasync: the records per second a writer that did
// nothing but pwrite and fdatasync such batches would make durable.
func (r *row) setBatchCeiling(p probeResult) {
	syncRate := p.syncsPerSec()
	ceiling := batchCeiling(p.spec.writeBytes, r.BytesPerOp, syncRate)
	r.BatchCeilingFdatasyncsPerSec = &syncRate
	r.BatchCeilingPerSec = &ceiling
	if ceiling > 0 && r.AppendsPerSec != nil {
		r.VsBatchCeiling = ptr(*r.AppendsPerSec / ceiling)
	}
	r.Interrupted = r.Interrupted || p.interrupted
}

// batchCeiling is the records per second that syncsPerSec fdatasyncs of
// batchBytes each make durable, with records of recordBytes in frames.
func batchCeiling(batchBytes, recordBytes int, syncsPerSec float64) float64 {
	return float64(batchBytes) / float64(segment.Size(recordBytes)) * syncsPerSec
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
// machine facts. With more than one round it adds the min–max of each
// ratio over the rounds, and says what the figures are.
func printTable(out io.Writer, rep report) error {
	multi := rep.Rounds > 1
	width := len("workload")
	names := make([]string, len(rep.Rows))
	for i, r := range rep.Rows {
		names[i] = r.Workload
		if r.Interrupted {
			names[i] += " (interrupted)"
		}
		if multi && r.Rounds < rep.Rounds {
			names[i] += fmt.Sprintf(" (%d of %d rounds)", r.Rounds, rep.Rounds)
		}
		width = max(width, len([]rune(names[i])))
	}
	spread := func(lo, hi *float64) string {
		if lo == nil || hi == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f–%.2f", *lo, *hi)
	}
	// Numbers read best right-aligned. The workload column is padded here
	// so that it stays left-aligned, and every other cell starts with the
	// gap, so that the table does not start with one.
	tw := tabwriter.NewWriter(out, 0, 0, 0, ' ', tabwriter.AlignRight)
	header := []string{"appends/s", "MB/s", "p50", "p99", "fdatasyncs/s", "records/fdatasync", "÷ raw overwrite fsync"}
	if multi {
		header = append(header, "min–max")
	}
	header = append(header, "batch ceiling rec/s", "÷ batch ceiling")
	if multi {
		header = append(header, "min–max")
	}
	// The broker's ratio to the log has a column only where a broker
	// publish row may fill it.
	vsWAL := slices.ContainsFunc(rep.Rows, func(r row) bool { return r.Kind == kindBrokerPublish })
	if vsWAL {
		header = append(header, "÷ wal same N")
		if multi {
			header = append(header, "min–max")
		}
	}
	fmt.Fprintf(tw, "%-*s\t", width, "workload")
	for _, h := range header {
		fmt.Fprintf(tw, "  %s\t", h)
	}
	fmt.Fprintln(tw)
	for i, r := range rep.Rows {
		cells := []string{
			orDash(r.AppendsPerSec, "%.0f"), fmt.Sprintf("%.2f", r.MBPerSec),
			latency(r.P50Ns), latency(r.P99Ns),
			fmt.Sprintf("%.0f", r.FdatasyncsPerSec),
			orDash(r.RecordsPerFdatasync, "%.1f"),
			orDash(r.VsRawOverwrite, "%.2f"),
		}
		if multi {
			cells = append(cells, spread(r.VsRawOverwriteMin, r.VsRawOverwriteMax))
		}
		cells = append(cells, orDash(r.BatchCeilingPerSec, "%.0f"), orDash(r.VsBatchCeiling, "%.2f"))
		if multi {
			cells = append(cells, spread(r.VsBatchCeilingMin, r.VsBatchCeilingMax))
		}
		if vsWAL {
			cells = append(cells, orDash(r.VsWALSameN, "%.2f"))
			if multi {
				cells = append(cells, spread(r.VsWALSameNMin, r.VsWALSameNMax))
			}
		}
		fmt.Fprintf(tw, "%-*s\t", width, names[i])
		for _, c := range cells {
			fmt.Fprintf(tw, "  %s\t", c)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if multi {
		fmt.Fprintf(out, "medians of %d rounds; each ÷ is the median of the ratios within a round, min–max over the rounds beside it\n", rep.Rounds)
	}
	for _, r := range rep.Rows {
		for _, n := range r.Notes {
			fmt.Fprintf(out, "note: %s: %s\n", r.Workload, n)
		}
	}

	if rep.Reopen != nil {
		fmt.Fprintln(out)
		if err := printReopen(out, rep.Reopen, rep.Rounds); err != nil {
			return err
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
