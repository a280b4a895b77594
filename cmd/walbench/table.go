package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The tables walbench prints and the ones the report command writes into
// BENCH.md are the same tables, made from a Report alone by tablesOf: the
// JSON holds every figure they show, and BENCH.md cannot drift from the
// tool.

// table is one titled table: a header, rows of cells (the first column is
// a name, the others figures), and lines to print under it.
type table struct {
	title  string
	header []string
	rows   [][]string
	notes  []string
}

// ratioDigits is how many decimals a row table shows of a ratio to the
// probe, and of each end of its min–max.
const ratioDigits = 2

// column is one figure column of a row table. With ratio set and more
// than one round, a "min–max" column after it gives the range of the
// ratio's per-round values.
type column struct {
	header string
	cell   func(Row) string
	ratio  string // the JSON name of the ratio, a key of Row.Ranges
}

// tablesOf makes the tables of rep, in the order they are printed.
func tablesOf(rep *Report) []table {
	multi := rep.Rounds > 1
	var tables []table
	if rep.Probe != nil {
		tables = append(tables, probeTable(rep.Probe, rep.Rounds))
	}
	sections := []struct {
		kind, title string
		columns     []column
	}{
		{kindWAL, "The log alone (package wal): closed-loop appenders", closedLoopColumns(false)},
		{kindPublish, "Publish: closed-loop producers", closedLoopColumns(true)},
		{kindDrain, "Drain: a prefilled queue emptied", drainColumns()},
		{kindMixed, "Mixed: producers at a target rate, Consume consumers", mixedColumns()},
		{kindSweep, "Sweep: publish, then drain what was published", sweepColumns()},
	}
	for _, s := range sections {
		var rows []Row
		for _, r := range rep.Rows {
			if r.Kind == s.kind {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		cols := s.columns
		if s.kind == kindPublish && !anyRow(rows, func(r Row) bool { return r.VsWAL != nil }) {
			cols = cols[:len(cols)-1] // no ÷ log column without the log's rows
		}
		tables = append(tables, rowTable(s.title, rows, cols, rep.Rounds, multi))
	}
	if rep.Reopen != nil {
		tables = append(tables, reopenTable(rep.Reopen, rep.Rounds))
	}
	return tables
}

func anyRow(rows []Row, f func(Row) bool) bool {
	for _, r := range rows {
		if f(r) {
			return true
		}
	}
	return false
}

// rowTable makes the table of rows with cols, and the rows' notes under it.
func rowTable(title string, rows []Row, cols []column, rounds int, multi bool) table {
	t := table{title: title, header: []string{"workload"}}
	for _, c := range cols {
		t.header = append(t.header, c.header)
		if c.ratio != "" && multi {
			t.header = append(t.header, "min–max")
		}
	}
	for _, r := range rows {
		name := r.Workload
		if r.Limited {
			name += " (cut at -limit)"
		}
		if r.DrainFailed {
			name += " (drain failed)"
		}
		cells := []string{rowName(name, r.Interrupted, r.Rounds, rounds)}
		for _, c := range cols {
			cells = append(cells, c.cell(r))
			if c.ratio != "" && multi {
				cells = append(cells, spread(r.Ranges, c.ratio, ratioDigits))
			}
		}
		t.rows = append(t.rows, cells)
	}
	for _, r := range rows {
		if r.Kind == kindMixed && len(r.Backlog) > 0 {
			t.notes = append(t.notes, backlogLine(r))
		}
		if line := startLateLine(r); line != "" {
			t.notes = append(t.notes, line)
		}
		for _, n := range r.Notes {
			t.notes = append(t.notes, fmt.Sprintf("note: %s: %s", r.Workload, n))
		}
	}
	if slices.ContainsFunc(cols, func(c column) bool { return c.ratio == "vs_ceiling" }) {
		var above []string
		for _, r := range rows {
			if r.VsCeiling != nil && *r.VsCeiling > 1 {
				above = append(above, r.Workload)
			}
		}
		if len(above) > 0 {
			// A run of several rounds has its medians already.
			again := "run again, or with -rounds 3 for medians"
			if multi {
				again = "run again"
			}
			t.notes = append(t.notes, fmt.Sprintf("note: ÷ ceiling above 1 (%s): the ceiling is a bound, so the probe met a slower disk than these workloads did, and every ratio to it overstates them; %s",
				strings.Join(above, "; "), again))
		}
	}
	// The note counts the rounds that measured the rows, as the probe's
	// and reopen's do: a run cut short in its first round has one-round
	// rows, marked so, and no medians to speak of.
	measured := 0
	for _, r := range rows {
		measured = max(measured, r.Rounds)
	}
	switch {
	case !multi || measured <= 1:
	case slices.ContainsFunc(cols, func(c column) bool { return c.ratio != "" }):
		t.notes = append(t.notes, fmt.Sprintf("medians of %d rounds; each ÷ is the median of the ratios within a round, min–max over the rounds beside it", measured))
	default:
		t.notes = append(t.notes, fmt.Sprintf("medians of %d rounds", measured))
	}
	return t
}

// rowName is a row's name, marked when Ctrl-C cut it short or fewer
// rounds than asked measured it.
func rowName(name string, interrupted bool, measured, asked int) string {
	if interrupted {
		name += " (interrupted)"
	}
	if asked > 1 && measured < asked {
		name += fmt.Sprintf(" (%d of %d rounds)", measured, asked)
	}
	return name
}

func closedLoopColumns(withWAL bool) []column {
	cols := []column{
		{header: "msgs/s", cell: func(r Row) string { return count(r.MsgsPerSec) }},
		{header: "MB/s", cell: func(r Row) string { return fixed(r.MBPerSec, 1) }},
		{header: "p50", cell: func(r Row) string { return latency(r.P50Ns) }},
		{header: "p99", cell: func(r Row) string { return latency(r.P99Ns) }},
		{header: "p99.9", cell: func(r Row) string { return latency(r.P999Ns) }},
		{header: "commits/s", cell: func(r Row) string { return count(r.CommitsPerSec) }},
		{header: "records/commit", cell: func(r Row) string { return fixed(r.RecordsPerCommit, 1) }},
		{header: "ceiling msgs/s", cell: func(r Row) string { return count(r.CeilingPerSec) }},
		{header: "÷ fdatasyncs/s", cell: func(r Row) string { return fixed(r.VsFdatasync, ratioDigits) }, ratio: "vs_fdatasync"},
		{header: "÷ ceiling", cell: func(r Row) string { return fixed(r.VsCeiling, ratioDigits) }, ratio: "vs_ceiling"},
		{header: "p99 ÷ fdatasync p99", cell: func(r Row) string { return fixed(r.P99VsFdatasyncP99, ratioDigits) }, ratio: "p99_vs_fdatasync_p99"},
		{header: "p99 ÷ 64 KiB p99", cell: func(r Row) string { return fixed(r.P99VsLargeP99, ratioDigits) }, ratio: "p99_vs_large_p99"},
	}
	if withWAL {
		cols = append(cols, column{header: "÷ log", cell: func(r Row) string { return fixed(r.VsWAL, ratioDigits) }, ratio: "vs_wal"})
	}
	return cols
}

func drainColumns() []column {
	return []column{
		{header: "msgs/s", cell: func(r Row) string { return count(r.MsgsPerSec) }},
		{header: "MB/s", cell: func(r Row) string { return fixed(r.MBPerSec, 1) }},
		{header: "commits/s", cell: func(r Row) string { return count(r.CommitsPerSec) }},
		{header: "records/commit", cell: func(r Row) string { return fixed(r.RecordsPerCommit, 1) }},
		{header: "messages", cell: func(r Row) string { return thousands(int64(r.Messages)) }},
	}
}

func mixedColumns() []column {
	return []column{
		{header: "published/s", cell: func(r Row) string { return count(r.MsgsPerSec) }},
		{header: "consumed/s", cell: func(r Row) string { return count(r.DrainMsgsPerSec) }},
		{header: "publish p50", cell: func(r Row) string { return latency(r.P50Ns) }},
		{header: "p99", cell: func(r Row) string { return latency(r.P99Ns) }},
		{header: "p99.9", cell: func(r Row) string { return latency(r.P999Ns) }},
		{header: "call p99", cell: func(r Row) string { return latency(r.ServiceP99Ns) }},
		{header: "end-to-end p50", cell: func(r Row) string { return latency(r.E2EP50Ns) }},
		{header: "p99", cell: func(r Row) string { return latency(r.E2EP99Ns) }},
		{header: "p99.9", cell: func(r Row) string { return latency(r.E2EP999Ns) }},
		{header: "max", cell: func(r Row) string { return latency(r.E2EMaxNs) }},
		{header: "backlog max", cell: func(r Row) string { return count(r.BacklogMax) }},
	}
}

func sweepColumns() []column {
	return []column{
		{header: "publish msgs/s", cell: func(r Row) string { return count(r.MsgsPerSec) }},
		{header: "p99", cell: func(r Row) string { return latency(r.P99Ns) }},
		{header: "records/commit", cell: func(r Row) string { return fixed(r.RecordsPerCommit, 1) }},
		{header: "÷ ceiling", cell: func(r Row) string { return fixed(r.VsCeiling, ratioDigits) }, ratio: "vs_ceiling"},
		{header: "drain msgs/s", cell: func(r Row) string { return count(r.DrainMsgsPerSec) }},
		{header: "through msgs/s", cell: func(r Row) string { return count(r.ThroughMsgsPerSec) }},
	}
}

// backlogSamplesShown is the most backlog samples a line shows; a longer
// series shows the largest of each run of consecutive samples instead.
const backlogSamplesShown = 20

// startLateNoteAbove is the lateness of a mixed row's producers above
// which the table says it: below, it is lost in a Publish's own.
const startLateNoteAbove = 100 * time.Microsecond

// startLateLine says how late a mixed row's producers began the calls
// they were on schedule for, when that is more than startLateNoteAbove on
// average; "" otherwise. The pacer keeps it low, but within a share of
// one CPU (see pacer): at a high rate the producers may begin late.
func startLateLine(r Row) string {
	if r.StartLateNs == nil || time.Duration(*r.StartLateNs) <= startLateNoteAbove {
		return ""
	}
	return fmt.Sprintf("note: %s: the producers began the calls they were on schedule for %v after their instant on average: the load generator's own lateness, which the publish and end-to-end latencies include",
		r.Workload, time.Duration(*r.StartLateNs).Round(time.Microsecond))
}

// backlogLine says a mixed row's backlog over time.
func backlogLine(r Row) string {
	per := (len(r.Backlog) + backlogSamplesShown - 1) / backlogSamplesShown
	var vals []string
	for i := 0; i < len(r.Backlog); i += per {
		most := 0
		for _, v := range r.Backlog[i:min(i+per, len(r.Backlog))] {
			most = max(most, v)
		}
		vals = append(vals, strconv.Itoa(most))
	}
	every := time.Duration(r.BacklogIntervalNs * int64(per))
	how := "ready + leased"
	if per > 1 {
		how = "the largest ready + leased"
	}
	return fmt.Sprintf("backlog of %s, %s every %v: %s", r.Workload, how, every, strings.Join(vals, " "))
}

// probeTable makes the probe's table: one row per measure.
func probeTable(p *Probe, rounds int) table {
	t := table{
		title:  "Probe: the disk alone",
		header: []string{"measure", "per second", "MB/s", "p50", "p99", "p99.9", "max"},
	}
	mbOf := func(perSec *float64, bytes int) string {
		if perSec == nil {
			return "-"
		}
		return fixed(ptr(*perSec*float64(bytes)/1e6), 1)
	}
	// Of one round, each row is marked when it is the step Ctrl-C cut short
	// (a report of an older walbench says only that the probe was: see the
	// notes). Of several, a loop's figures are the medians of the rounds
	// that measured it, which may be fewer than the probe's: a round cut in
	// an earlier loop did not run it. Its row is marked "k of N rounds",
	// and "interrupted" only where a round cut in it measured something.
	perLoop := rounds > 1 && len(p.PerRound) > 0
	name := func(s, step string) string {
		if !perLoop {
			return rowName(s, p.InterruptedIn == step, p.Rounds, rounds)
		}
		measured, cut := 0, false
		for _, r := range p.PerRound {
			if r.measured(step) {
				measured++
				cut = cut || r.InterruptedIn == step
			}
		}
		return rowName(s, cut, measured, rounds)
	}
	t.rows = append(t.rows,
		[]string{name("fdatasync after pwrite 4 KiB over written blocks", probeFdatasync), count(p.FdatasyncsPerSec), mbOf(p.FdatasyncsPerSec, probeWriteBytes),
			latency(p.FdatasyncP50Ns), latency(p.FdatasyncP99Ns), latency(p.FdatasyncP999Ns), latency(p.FdatasyncMaxNs)},
		[]string{name("fdatasync after pwrite 64 KiB over written blocks", probeLarge), count(p.LargeFdatasyncsPerSec), mbOf(p.LargeFdatasyncsPerSec, probeLargeBytes),
			latency(p.LargeP50Ns), latency(p.LargeP99Ns), latency(p.LargeP999Ns), latency(p.LargeMaxNs)},
		[]string{name("sequential write, 1 MiB pwrites, fdatasync every 8 MiB", probeWrite), "-", fixed(p.WriteMBPerSec, 1), "-", "-", "-", "-"},
		[]string{name("fdatasync after pwrite 4 KiB at the end of a growing file", probeAppend), count(p.AppendFdatasyncsPerSec), mbOf(p.AppendFdatasyncsPerSec, probeWriteBytes),
			latency(p.AppendP50Ns), latency(p.AppendP99Ns), latency(p.AppendP999Ns), latency(p.AppendMaxNs)},
	)
	for _, c := range p.Ceilings {
		who := plural(c.Producers, "producer")
		if c.Producers == 0 {
			who = "any number of producers"
		}
		label := fmt.Sprintf("ceiling: durable %d B messages, %s", c.Size, who)
		if perLoop {
			// A ceiling is of the rounds whose loops gave its figures.
			measured := 0
			for _, r := range p.PerRound {
				if slices.ContainsFunc(r.Ceilings, func(rc Ceiling) bool {
					return rc.Producers == c.Producers && rc.Size == c.Size && rc.MsgsPerSec != nil
				}) {
					measured++
				}
			}
			label = rowName(label, false, measured, rounds)
		}
		t.rows = append(t.rows, []string{label, count(c.MsgsPerSec), mbOf(c.MsgsPerSec, c.Size), "-", "-", "-", "-"})
	}
	t.notes = append(t.notes, "ceiling: producers ÷ (1 ÷ fdatasyncs/s + producers × message bytes in the log ÷ write bandwidth): every fdatasync carrying one message of each producer")
	if perLoop {
		// The summary's InterruptedIn is one round's: each round says
		// where it stopped.
		for i, r := range p.PerRound {
			if cut := probeCut(r, true); cut != "" {
				t.notes = append(t.notes, fmt.Sprintf("note: probe: round %d: %s", cmp.Or(r.Round, i+1), cut))
			}
		}
	} else if cut := probeCut(*p, false); cut != "" {
		t.notes = append(t.notes, "note: probe: "+cut)
	}
	for _, n := range p.Notes {
		t.notes = append(t.notes, "note: probe: "+n)
	}
	if rounds > 1 && p.Rounds > 1 {
		t.notes = append(t.notes, fmt.Sprintf("medians of %d rounds", p.Rounds))
	}
	return t
}

// probeLoopNames name the probe's loops in its notes.
var probeLoopNames = map[string]string{
	probeFdatasync: "4 KiB overwrite loop",
	probeLarge:     "64 KiB overwrite loop",
	probeWrite:     "sequential write loop",
	probeAppend:    "growing-file loop",
}

// probeCut says where Ctrl-C stopped the probe of one round, p, or is ""
// if it did not. ofRound: p is one of several rounds, whose rows are not
// marked by it alone.
func probeCut(p Probe, ofRound bool) string {
	switch {
	case p.InterruptedIn == probePrefill:
		return fmt.Sprintf("interrupted while writing its %d MiB file, before its loops", probeFileBytes>>20)
	case p.Interrupted && p.InterruptedIn == "":
		return "interrupted"
	case p.Interrupted && ofRound:
		return fmt.Sprintf("interrupted in its %s; the loops after it did not run in that round", probeLoopNames[p.InterruptedIn])
	case p.Interrupted:
		return "interrupted; the loops after the one marked did not run"
	}
	return ""
}

// reopenTable makes the reopen workload's table of one row.
func reopenTable(r *Reopen, rounds int) table {
	t := table{title: "Reopen: a store with a backlog, cold", header: []string{"workload", "from checkpoint", "forced rebuild", "rebuild ÷ checkpoint"}}
	// The ratio is in the tens or hundreds: one decimal, for it and its
	// range alike.
	cells := []string{rowName(r.Workload, r.Interrupted, r.Rounds, rounds), latency(r.CheckpointOpenNs), latency(r.RebuildOpenNs), fixed(r.RebuildVsCheckpoint, 1)}
	if rounds > 1 {
		t.header = append(t.header, "min–max")
		cells = append(cells, spread(r.Ranges, "rebuild_vs_checkpoint", 1))
	}
	t.header = append(t.header, "heap MiB", "heap B/message")
	var heapMiB *float64
	if r.HeapInUseBytes != nil {
		heapMiB = ptr(float64(*r.HeapInUseBytes) / (1 << 20))
	}
	cells = append(cells, fixed(heapMiB, 1), fixed(r.HeapBytesPerMessage, 1))
	t.rows = [][]string{cells}
	evicted := "the store's files evicted from the page cache before each"
	if r.Warm {
		t.title = "Reopen: a store with a backlog, warm"
		evicted = "the store's files still in the page cache (only Linux lets walbench evict them): a cold open takes longer"
	}
	t.notes = []string{
		"times: broker.Open + Queue + the first Receive(1), " + evicted,
		"heap: HeapInuse after runtime.GC, the store just opened from its checkpoint (the whole process's heap)",
		fmt.Sprintf("store: filled in %.1fs; %s, %.1f MiB; index %.1f MiB",
			r.FillSeconds, plural(r.Segments, "segment file"), float64(r.SegmentFileBytes)/(1<<20), float64(r.IndexBytes)/(1<<20)),
	}
	for _, n := range r.Notes {
		t.notes = append(t.notes, "note: reopen: "+n)
	}
	if rounds > 1 && r.Rounds > 1 {
		t.notes = append(t.notes, fmt.Sprintf("medians of %d rounds; the ÷ is the median of the ratios within a round, min–max over the rounds beside it", r.Rounds))
	}
	return t
}

// machineLines are the machine facts, one "name: value" pair each.
func machineLines(m Machine) [][2]string {
	fs := m.Filesystem
	if m.FSMagic != "" {
		fs += " (statfs f_type " + m.FSMagic + ")"
	}
	dev := m.Device
	if dev == "" {
		dev = "unknown"
	}
	if m.WriteCache != "" {
		dev += ", write cache: " + m.WriteCache
	}
	dir := m.Dir + " (removed)"
	if m.DirLeft != "" {
		dir = m.Dir + " (not removed: " + m.DirLeft + ")"
	}
	return [][2]string{
		{"date", m.Date},
		{"load average at start", fmt.Sprintf("%.2f %.2f %.2f (1, 5, 15 min)", m.LoadAvg[0], m.LoadAvg[1], m.LoadAvg[2])},
		{"cpus", strconv.Itoa(m.NumCPU)},
		{"os/arch", m.GOOS + "/" + m.GOARCH},
		{"kernel", m.Kernel},
		{"go", m.GoVersion},
		{"filesystem", fs},
		{"device", dev},
		{"directory", dir},
	}
}

// printReport writes rep as text: the machine facts and how the run
// ended, if early, the tables, and last the recommendation. It returns
// the first error of a write to w.
func printReport(w io.Writer, rep *Report) error {
	out := &stickyWriter{w: w}
	printTo(out, rep)
	return out.err
}

// stickyWriter passes writes to w until one fails, then fails them all
// with that error.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

// oneLine is the first line of a failure's text, for a table or a
// sentence: a panic's carries its stack, which the -json report's "error"
// keeps whole.
func oneLine(s string) string {
	first, _, more := strings.Cut(s, "\n")
	if more {
		return first + " (the rest is in the -json report's \"error\")"
	}
	return first
}

// printTo is printReport's body; out keeps the first error.
func printTo(out io.Writer, rep *Report) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, kv := range machineLines(rep.Machine) {
		fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
	}
	if rep.Interrupted {
		fmt.Fprintf(tw, "interrupted\t%s: the figures are those measured before\n", strings.TrimSpace(cmp.Or(byWhom(rep.InterruptedBy), "before its end")))
	}
	if rep.Error != "" {
		fmt.Fprintf(tw, "failed\t%s: the figures are those measured before\n", oneLine(rep.Error))
	}
	tw.Flush()
	if warning := memoryOnly(rep.Machine); warning != "" {
		fmt.Fprintf(out, "\n%s\n", warning)
	}
	for _, t := range tablesOf(rep) {
		fmt.Fprintln(out)
		fmt.Fprintln(out, t.title)
		tw := tabwriter.NewWriter(out, 0, 0, 0, ' ', tabwriter.AlignRight)
		width := 0
		for _, r := range append([][]string{t.header}, t.rows...) {
			width = max(width, len([]rune(r[0])))
		}
		// Numbers read best right-aligned: the name column is padded here so
		// that it stays left-aligned, and every other cell starts with the
		// gap.
		for _, r := range append([][]string{t.header}, t.rows...) {
			fmt.Fprintf(tw, "%s%s\t", r[0], strings.Repeat(" ", width-len([]rune(r[0]))))
			for _, c := range r[1:] {
				fmt.Fprintf(tw, "  %s\t", c)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		for _, n := range t.notes {
			fmt.Fprintln(out, n)
		}
	}
	if rep.Recommendation != nil {
		fmt.Fprintln(out)
		for _, l := range recommendationLines(rep.Recommendation) {
			fmt.Fprintln(out, l)
		}
	}
	if why := noRecommendation(rep); why != "" {
		fmt.Fprintf(out, "\n%s\n", why)
	}
}

// spread is the min–max of the ratio name in ranges, each with digits
// decimals, as many as the ratio's own cell shows; "-" if none.
func spread(ranges map[string][2]float64, name string, digits int) string {
	r, ok := ranges[name]
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(r[0], 'f', digits, 64) + "–" + strconv.FormatFloat(r[1], 'f', digits, 64)
}

// fixed formats v with digits decimals, "-" for nil.
func fixed(v *float64, digits int) string {
	if v == nil || math.IsNaN(*v) {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', digits, 64)
}

// count formats v rounded to a whole number with thousands separators:
// "63,828". "-" for nil.
func count(v *float64) string {
	if v == nil || math.IsNaN(*v) {
		return "-"
	}
	return thousands(int64(math.Round(*v)))
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// latency formats nanoseconds with three significant digits (more only
// from 1,000 s up), "-" for nil. The unit and the decimals are chosen on
// the rounded figure: 9,996 ns is 10.0µs, not 10.00µs, and 999.6 µs is
// 1.00ms, not 1000µs.
func latency(ns *int64) string {
	if ns == nil {
		return "-"
	}
	if *ns < 1000 {
		return fmt.Sprintf("%dns", *ns)
	}
	units := []string{"µs", "ms", "s"}
	x := float64(*ns) / 1e3
	for i := 0; ; i++ {
		for decimals := 2; decimals >= 0; decimals-- {
			s := strconv.FormatFloat(x, 'f', decimals, 64)
			digits := strings.IndexByte(s+".", '.') + decimals
			if digits <= 3 || (i == len(units)-1 && decimals == 0) {
				return s + units[i]
			}
		}
		x /= 1e3
	}
}
