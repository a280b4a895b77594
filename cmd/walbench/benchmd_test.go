package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/walbroker/walbroker/vfs"
)

// update rewrites the golden files of testdata from what the code makes
// now: go test ./cmd/walbench -run Golden -update. BENCH.md itself is
// rewritten only by the report command (see doc.go).
var update = flag.Bool("update", false, "rewrite testdata's golden files")

const (
	benchJSON = "testdata/bench.json" // the JSON of the run BENCH.md shows
	benchMD   = "../../BENCH.md"
)

// TestBenchMDFromGolden: BENCH.md's generated section is what the report
// command makes from the JSON of its run, byte for byte. It fails when
// the tables change without BENCH.md, or BENCH.md without its JSON.
func TestBenchMDFromGolden(t *testing.T) {
	rep, err := readJSON(benchJSON)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(benchMD)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sectionOf(doc)
	if err != nil {
		t.Fatalf("BENCH.md: %v", err)
	}
	if want := markdown(rep); got != want {
		t.Errorf("BENCH.md's generated section is not what `walbench report -in cmd/walbench/%s` makes; regenerate it (go doc ./cmd/walbench, BENCH.md).\n%s",
			benchJSON, firstDifference(got, want))
	}
}

// firstDifference says where two texts part, line by line.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\nhas:  " + gl + "\nwant: " + wl
		}
	}
	return "identical"
}

// TestReportRewritesBench runs the report command on a copy of a document
// with a stale section: the section becomes the one the JSON makes, the
// text around it stays as it was, and a second run changes nothing.
func TestReportRewritesBench(t *testing.T) {
	before := "# Benchmarks\n\nWritten by hand.\n\n" + beginMarker + "\nstale figures\n" + endMarker + "\n\n## Reading it\n\nAlso by hand.\n"
	name := filepath.Join(t.TempDir(), "BENCH.md")
	if err := os.WriteFile(name, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := readJSON(benchJSON)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Benchmarks\n\nWritten by hand.\n\n" + beginMarker + "\n" + markdown(rep) + endMarker + "\n\n## Reading it\n\nAlso by hand.\n"
	for i := range 2 {
		if res := runWith(t, context.Background(), nil, "report", "-in", benchJSON, "-bench", name); res.code != exitOK {
			t.Fatalf("run %d: exit %d", i+1, res.code)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("run %d: the document is not the hand-written text around the generated section:\n%s", i+1, got)
		}
	}
}

// TestReportPrints: without -bench, the report command prints the tables
// of the JSON as the run did, or with -md the generated section.
func TestReportPrints(t *testing.T) {
	rep, err := readJSON(benchJSON)
	if err != nil {
		t.Fatal(err)
	}
	res := runOK(t, "report", "-in", benchJSON)
	var want strings.Builder
	if err := printReport(&want, rep); err != nil {
		t.Fatal(err)
	}
	if res.stdout != want.String() {
		t.Errorf("report printed other tables than the run's")
	}
	if res := runOK(t, "report", "-in", benchJSON, "-md"); res.stdout != markdown(rep) {
		t.Errorf("report -md printed another section")
	}
}

func TestReplaceSection(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want, err string
	}{
		{"replaced", "a\n" + beginMarker + "\nold\nolder\n" + endMarker + "\nb\n", "a\n" + beginMarker + "\nNEW\n" + endMarker + "\nb\n", ""},
		{"empty section", beginMarker + "\n" + endMarker + "\n", beginMarker + "\nNEW\n" + endMarker + "\n", ""},
		{"indented markers", "  " + beginMarker + "\nx\n  " + endMarker + "\n", "  " + beginMarker + "\nNEW\n  " + endMarker + "\n", ""},
		{"no markers", "a\nb\n", "", "want a line"},
		{"no end", beginMarker + "\nx\n", "", "want a line"},
		{"reversed", endMarker + "\nx\n" + beginMarker + "\n", "", "comes before"},
		{"begin twice", beginMarker + "\n" + beginMarker + "\n" + endMarker + "\n", "", "twice"},
		{"end twice", beginMarker + "\n" + endMarker + "\n" + endMarker + "\n", "", "twice"},
		{"marker inside a line", "see " + beginMarker + " here\n" + endMarker + "\n", "", "want a line"},
	} {
		got, err := replaceSection([]byte(tc.doc), "NEW\n")
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
		case tc.err == "" && (err != nil || string(got) != tc.want):
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// TestReportRefuses: a document without markers, or a JSON of another
// schema, fails the report command and leaves the document alone.
func TestReportRefuses(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "BENCH.md")
	const text = "# no markers here\n"
	if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := runWith(t, context.Background(), nil, "report", "-in", benchJSON, "-bench", doc); res.code != exitError || !strings.Contains(res.stderr, "want a line") {
		t.Errorf("no markers: exit %d, stderr %q", res.code, res.stderr)
	}
	if b, _ := os.ReadFile(doc); string(b) != text {
		t.Errorf("the document changed: %q", b)
	}
	old := filepath.Join(dir, "old.json")
	if err := os.WriteFile(old, []byte(`{"machine": {}, "rows": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := runWith(t, context.Background(), nil, "report", "-in", old); res.code != exitError || !strings.Contains(res.stderr, "schema") {
		t.Errorf("another schema: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := runWith(t, context.Background(), nil, "report", "-in", filepath.Join(dir, "missing.json")); res.code != exitError {
		t.Errorf("a missing file: exit %d", res.code)
	}
}

// TestReportRefusesADevice: a device for -in or -bench is refused, named,
// before it is read: one such as /dev/zero would be read until memory ran
// out. /dev/null stands for it here, read as empty without the check.
func TestReportRefusesADevice(t *testing.T) {
	for _, args := range [][]string{
		{"report", "-in", os.DevNull},
		{"report", "-in", benchJSON, "-bench", os.DevNull},
	} {
		res := runWith(t, context.Background(), nil, args...)
		if res.code != exitError || !strings.Contains(res.stderr, os.DevNull+": is a character device") {
			t.Errorf("%q: exit %d, stderr %q; want %d and the device named", args, res.code, res.stderr, exitError)
		}
	}
}

// TestReportBenchDiskFull: a BENCH.md that cannot be written whole (a
// full disk, a write cut short) is left as it was, with nothing beside
// it, and the report command says why and exits 1.
func TestReportBenchDiskFull(t *testing.T) {
	const text = "# Benchmarks\n\n" + beginMarker + "\nearlier figures\n" + endMarker + "\n\nWritten by hand.\n"
	for _, rule := range []vfs.Rule{
		{Op: vfs.OpWrite, Err: syscall.ENOSPC, ShortFraction: 0.5},
		{Op: vfs.OpSync, Err: syscall.ENOSPC},
	} {
		dir := t.TempDir()
		doc := filepath.Join(dir, "BENCH.md")
		if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		fs := vfs.NewFaultFS(vfs.Default)
		fs.Inject(rule)
		res := runWith(t, context.Background(), &env{outFS: fs}, "report", "-in", benchJSON, "-bench", doc)
		if res.code != exitError || !strings.Contains(res.stderr, doc+": ") || !strings.Contains(res.stderr, syscall.ENOSPC.Error()) {
			t.Errorf("%v fails: exit %d, stderr %q; want %d, the document and the error named", rule.Op, res.code, res.stderr, exitError)
		}
		if b, err := os.ReadFile(doc); err != nil || string(b) != text {
			t.Errorf("%v fails: the document holds %q, %v; want it as it was", rule.Op, b, err)
		}
		assertDirEmptyBut(t, dir, "BENCH.md")
	}
}

// edgeReport is a report with what a real run rarely has: an interrupted
// row, a row fewer rounds measured, notes, a failure, figures missing.
func edgeReport() *Report {
	r := func(kind, name string, rounds int) Row {
		return Row{Kind: kind, Workload: name, Sync: "all", Producers: 4, Size: 100, SegmentBytes: 64 << 20, Rounds: rounds, Ops: 10}
	}
	pub := r(kindPublish, "publish, 4 producers, 100 B, sync=all", 2)
	pub.MsgsPerSec, pub.P99Ns, pub.VsCeiling = ptr(1234.5), ptr(int64(1500_000)), ptr(0.5)
	pub.Ranges = map[string][2]float64{"vs_ceiling": {0.25, 0.75}}
	pub.Notes = []string{"round 2: queue Stats().Published grew by 9, but 10 Publishes succeeded"}
	cut := r(kindPublish, "publish, 64 producers, 100 B, sync=all", 1)
	cut.Interrupted = true
	mixed := r(kindMixed, "mixed, 4 producers at 100 msgs/s", 2)
	mixed.TargetPerSec, mixed.BacklogIntervalNs = 100, int64(250e6)
	for i := range 45 {
		mixed.Backlog = append(mixed.Backlog, i%7)
	}
	return &Report{
		Schema: schemaVersion, Command: "publish", Args: []string{"publish", "-producers", "4,64", "-rounds", "2"},
		Machine: Machine{Date: "2026-01-02T03:04:05Z", NumCPU: 2, GOOS: "linux", GOARCH: "amd64", Kernel: "Linux 6", GoVersion: "go1.26",
			Filesystem: "ext4", FSMagic: "0xef53", Device: "/dev/vda", WriteCache: "write back", LoadAvg: [3]float64{1.5, 1, 0.5}, Dir: "/x/walbench-1"},
		Rounds: 2, Seconds: 75, Interrupted: true, InterruptedBy: "SIGINT", Error: "publish, 64 producers: Publish: input/output error",
		Probe: &Probe{Rounds: 2, FdatasyncsPerSec: ptr(5000.0), FdatasyncP99Ns: ptr(int64(500_000)),
			Ceilings: []Ceiling{{Producers: 4, Size: 100, MsgsPerSec: ptr(19000.0)}, {Producers: 0, Size: 100}}},
		Rows: []Row{pub, cut, mixed},
	}
}

// TestMarkdownGolden compares the section made from edgeReport with
// testdata/edge.md, and its text tables with testdata/edge.txt.
func TestMarkdownGolden(t *testing.T) {
	rep := edgeReport()
	// Through the JSON, as the report command reads it.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := printReport(&text, &back); err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct{ file, got string }{{"testdata/edge.md", markdown(&back)}, {"testdata/edge.txt", text.String()}} {
		if *update {
			if err := os.WriteFile(g.file, []byte(g.got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(g.file)
		if err != nil {
			t.Fatalf("%v (go test ./cmd/walbench -run Golden -update writes it)", err)
		}
		if g.got != string(want) {
			t.Errorf("%s differs (-update rewrites it):\n%s", g.file, firstDifference(g.got, string(want)))
		}
	}
	for _, want := range []string{"(interrupted)", "(1 of 2 rounds)", "0.25–0.75", "round 2: queue Stats", "It was interrupted", "It failed: publish, 64 producers", "the largest ready + leased every 750ms"} {
		if !strings.Contains(markdown(&back), want) {
			t.Errorf("the section does not say %q", want)
		}
	}
}

func walGoal(producers int, segments string, msgs, vsFsync float64) Row {
	return Row{Kind: kindWAL, Sync: "always", Size: 1024, Producers: producers, Segments: segments, MsgsPerSec: &msgs,
		VsFdatasync: &vsFsync, VsCeiling: ptr(0.5)}
}

func withVsWAL(r Row, vs float64) Row { r.VsWAL = &vs; return r }

func sized(r Row, size int) Row { r.Size = size; return r }

func synced(r Row, sync string) Row { r.Sync = sync; return r }

// TestMarkdownCellsEscaped: a "|" in a cell of a generated table (here
// the machine's directory) is escaped, so that it does not split the cell
// and shift the table's columns.
func TestMarkdownCellsEscaped(t *testing.T) {
	rep := edgeReport()
	rep.Machine.Dir = "/x|y/walbench-1"
	if md := markdown(rep); !strings.Contains(md, "\n| directory | /x\\|y/walbench-1 (removed) |\n") {
		t.Errorf("the machine table does not escape the | of the directory:\n%s", md)
	}
}

func TestGoalRows(t *testing.T) {
	pub := func(producers int, msgs, ceiling, vsFsync, vsCeiling, p99Ratio float64) Row {
		return Row{Kind: kindPublish, Sync: "all", Size: 1024, Producers: producers, MsgsPerSec: &msgs, CeilingPerSec: &ceiling,
			VsFdatasync: &vsFsync, VsCeiling: &vsCeiling, P99VsFdatasyncP99: &p99Ratio, P99Ns: ptr(int64(1e6))}
	}
	for _, tc := range []struct {
		name string
		rows []Row
		want []string // met, per goal
	}{
		{"all met at the bounds", []Row{pub(1, 4250, 5000, 0.85, 0.85, 1), pub(64, 50000, 100000, 10, 0.5, 3)}, []string{"yes", "yes", "yes"}},
		{"none met", []Row{pub(1, 4000, 5000, 0.8, 0.8, 1), pub(64, 49000, 100000, 10, 0.49, 3.1)}, []string{"no", "no", "no"}},
		// Half a ceiling of 300,000 is more than 100,000: the lower goal holds.
		{"100,000 is enough", []Row{pub(64, 100000, 300000, 10, 0.33, 1)}, []string{"yes", "yes"}},
		{"no rows", nil, nil},
		// The log's goals, and the publish path's ratio to the log with
		// new segments.
		{"the log's", []Row{
			walGoal(1, "new", 5000, 0.9), walGoal(64, "new", 149_999, 20), walGoal(64, "reused", 150_000, 25),
			withVsWAL(pub(64, 100000, 300000, 10, 0.33, 4), 0.79),
		}, []string{"yes", "no", "yes", "yes", "no", "no"}},
		{"the log's and ÷ log at the bounds", []Row{walGoal(1, "new", 5000, 0.85), withVsWAL(pub(64, 100000, 300000, 10, 0.33, 3), 0.8)},
			[]string{"yes", "yes", "yes", "yes"}},
		// The goals are of 1 KiB messages, durable: rows of another size
		// or under sync none are none of theirs.
		{"other sizes and sync modes", []Row{
			sized(pub(1, 4250, 5000, 0.85, 0.85, 1), 100), sized(pub(64, 50000, 100000, 10, 0.5, 3), 100),
			synced(pub(1, 4250, 5000, 0.85, 0.85, 1), "none"), synced(pub(64, 50000, 100000, 10, 0.5, 3), "none"),
			sized(walGoal(1, "new", 5000, 0.9), 100), synced(walGoal(64, "new", 150_000, 20), "never"),
		}, nil},
	} {
		rows := goalRows(&Report{Rows: tc.rows})
		var got []string
		for _, r := range rows {
			got = append(got, r[3])
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: met %v, want %v (%q)", tc.name, got, tc.want, rows)
		}
	}
}

// TestGoalOf64ProducersShowsHalfTheCeiling: the rate goal of 64 producers
// is the lower of half the probe's ceiling and 100,000, and the figure its
// cell gives as "half the ceiling" is half of it, not the whole ceiling.
func TestGoalOf64ProducersShowsHalfTheCeiling(t *testing.T) {
	msgs, ceil := 120000.0, 300000.0
	rows := goalRows(&Report{Rows: []Row{{Kind: kindPublish, Sync: "all", Size: 1024, Producers: 64, MsgsPerSec: &msgs, CeilingPerSec: &ceil}}})
	if len(rows) != 1 {
		t.Fatalf("goal rows %q; want the 64 producers' rate alone", rows)
	}
	if value := rows[0][1]; !strings.Contains(value, "half the ceiling, 150,000") {
		t.Errorf("goal value %q; want half the ceiling given as 150,000 (the ceiling is 300,000)", value)
	}
}

// TestGoalRowsCountTheRoundsThatMetEach: beside the medians' verdict, each
// goal says in how many rounds, each against its own probe, it was met; a
// round without the figure did not meet it, and a run of one round says
// "-".
func TestGoalRowsCountTheRoundsThatMetEach(t *testing.T) {
	one := func(vs float64) Row { return walGoal(1, "new", 5000, vs) }
	median := one(0.86)
	noFigure := one(0)
	noFigure.VsFdatasync = nil
	median.PerRound = []Row{one(0.9), one(0.8), one(0.86), noFigure}
	pub := Row{Kind: kindPublish, Sync: "all", Size: 1024, Producers: 64, MsgsPerSec: ptr(120_000.0), CeilingPerSec: ptr(300_000.0)}
	// The rate goal is the lower of half the round's own ceiling and
	// 100,000: 90,000 meets it against a ceiling of 150,000, not of 300,000.
	low, high := pub, pub
	low.MsgsPerSec, low.CeilingPerSec = ptr(90_000.0), ptr(150_000.0)
	high.MsgsPerSec = ptr(90_000.0)
	pub.PerRound = []Row{low, high, pub}
	rows := goalRows(&Report{Rows: []Row{median, pub, walGoal(64, "reused", 150_000, 25)}})
	var got []string
	for _, r := range rows {
		got = append(got, r[3]+" "+r[4])
	}
	want := []string{"yes 2 of 4", "yes -", "yes 2 of 3"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("met and rounds met %q, want %q (%q)", got, want, rows)
	}
}

// TestReportSaysFailure: the report command's tables of a run that failed
// or was interrupted say so, as its markdown does, and still exit 0: the
// report itself did not fail.
func TestReportSaysFailure(t *testing.T) {
	name := filepath.Join(t.TempDir(), "err.json")
	if err := writeJSON(name, edgeReport()); err != nil {
		t.Fatal(err)
	}
	res := runOK(t, "report", "-in", name)
	for _, want := range []string{"\nfailed  ", "publish, 64 producers: Publish: input/output error", "\ninterrupted  ", "by Ctrl-C"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("the report does not say %q", want)
		}
	}
	whole := edgeReport()
	whole.Error, whole.Interrupted = "", false
	if err := writeJSON(name, whole); err != nil {
		t.Fatal(err)
	}
	if res := runOK(t, "report", "-in", name); strings.Contains(res.stdout, "failed") || strings.Contains(res.stdout, "\ninterrupted") {
		t.Errorf("the report of a whole run says it failed or was interrupted")
	}
}

// TestReportRefusesWhatWalbenchDidNotWrite: the report command refuses a
// JSON that walbench could not have written, naming what is wrong, and
// prints nothing: no empty report, no overflowed figures.
func TestReportRefusesWhatWalbenchDidNotWrite(t *testing.T) {
	dir := t.TempDir()
	raw := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	edited := func(name string, edit func(rep *Report)) string {
		rep := edgeReport()
		edit(rep)
		b, err := marshalReport(rep)
		if err != nil {
			t.Fatal(err)
		}
		return raw(name, string(b))
	}
	for _, tc := range []struct{ file, want string }{
		{raw("schema-only.json", `{"schema":"walbench/2"}`), `command "" is not one of walbench's measuring commands`},
		{raw("empty.json", `{"schema":"walbench/2","command":"publish","rounds":1,"rows":[]}`), "it holds no measurement"},
		{edited("report.json", func(r *Report) { r.Command = "report" }), `command "report" is not one of walbench's measuring commands`},
		{edited("rounds.json", func(r *Report) { r.Rounds = 0 }), "rounds 0: want at least 1"},
		{edited("kind.json", func(r *Report) { r.Rows[1].Kind = "bogus" }), `rows[1]: kind "bogus": want one of wal, publish, drain, mixed, sweep`},
		{edited("kind-round.json", func(r *Report) { r.Rows[0].PerRound = []Row{{Kind: "latency"}} }), `rows[0]: kind "latency"`},
		{edited("ops.json", func(r *Report) { r.Rows[0].Ops = math.MinInt64 }), "rows[0].ops: -9223372036854775808 is out of range"},
		{edited("seconds.json", func(r *Report) { r.Seconds = 1e300 }), "seconds: 1e+300 is out of range (want 0 to 1e+09)"},
		{edited("row-seconds.json", func(r *Report) { r.Rows[0].Seconds = 1e12 }), "rows[0].seconds: 1e+12 is out of range (want 0 to 1e+09)"},
		{edited("drain-seconds.json", func(r *Report) { r.Rows[0].DrainSeconds = 1e12 }), "rows[0].drain_seconds: 1e+12 is out of range (want 0 to 1e+09)"},
		{edited("rate.json", func(r *Report) { r.Rows[0].MsgsPerSec = ptr(1e300) }), "rows[0].msgs_per_sec: 1e+300 is out of range (want 0 to 1e+15)"},
		{edited("p99.json", func(r *Report) { r.Probe.FdatasyncP99Ns = ptr(int64(-1)) }), "probe.fdatasync_p99_ns: -1 is out of range"},
		{edited("range.json", func(r *Report) { r.Rows[0].Ranges["vs_ceiling"] = [2]float64{-1, 2} }), "rows[0].ranges.vs_ceiling[0]: -1 is out of range"},
	} {
		res := runWith(t, context.Background(), nil, "report", "-in", tc.file)
		if res.code != exitError || res.stdout != "" || !strings.Contains(res.stderr, tc.file+": not a report walbench wrote: "+tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, nothing printed, and %q", filepath.Base(tc.file), res.code, res.stdout, res.stderr, exitError, tc.want)
		}
	}
	// The edge report itself is one walbench could have written.
	runOK(t, "report", "-in", edited("edge.json", func(*Report) {}))
}

// TestReportTakesTheBacklogMixedKeeps: a mixed row may hold as many
// backlog samples as -sample lets a window keep, and no more.
func TestReportTakesTheBacklogMixedKeeps(t *testing.T) {
	for _, n := range []int{maxBacklogSamples, maxBacklogSamples + 1} {
		rep := edgeReport()
		for i, r := range rep.Rows {
			if r.Kind == kindMixed {
				rep.Rows[i].Backlog = make([]int, n)
			}
		}
		if err := checkReport(rep); (err == nil) != (n <= maxBacklogSamples) {
			t.Errorf("%d backlog samples: %v; want it taken up to %d", n, err, maxBacklogSamples)
		}
	}
}

// TestGoalRowsOfOneRoundSayDash: a run of one round says "-" in the
// goals' "rounds met" column, its one round being the verdict beside it,
// with rows made as measure makes them (summarizeRows sets PerRound even
// for one round); with two rounds it counts them.
func TestGoalRowsOfOneRoundSayDash(t *testing.T) {
	round := func(n int, vs float64) Row {
		r := walGoal(1, "new", 5000, vs)
		r.Round = n
		return r
	}
	for _, tc := range []struct {
		rounds [][]Row
		want   string
	}{
		{[][]Row{{round(1, 0.9)}}, "yes -"},
		{[][]Row{{round(1, 0.5)}}, "no -"},
		{[][]Row{{round(1, 0.9)}, {round(2, 0.5)}}, "no 1 of 2"},
	} {
		goals := goalRows(&Report{Rounds: len(tc.rounds), Rows: summarizeRows(tc.rounds)})
		if len(goals) != 1 {
			t.Fatalf("goals %q, want one", goals)
		}
		if got := goals[0][3] + " " + goals[0][4]; got != tc.want {
			t.Errorf("%d rounds: met and rounds met %q, want %q", len(tc.rounds), got, tc.want)
		}
	}
}

// TestReportNamesTheFlagOfAFileItCannotUse: a file report cannot read or
// use is named with its flag (-in or -bench), as the measuring commands
// name -dir, -json and -cpuprofile: two files are given, and the path
// alone does not say which role it had.
func TestReportNamesTheFlagOfAFileItCannotUse(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	noMarkers := filepath.Join(dir, "BENCH.md")
	if err := os.WriteFile(noMarkers, []byte("# no section\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "-in", missing}, "-in " + missing + ": "},
		{[]string{"report", "-in", benchJSON, "-bench", missing}, "-bench " + missing + ": "},
		{[]string{"report", "-in", benchJSON, "-bench", noMarkers}, "-bench " + noMarkers + ": want a line"},
	} {
		res := runWith(t, context.Background(), nil, tc.args...)
		if res.code != exitError || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, res.code, res.stderr, exitError, tc.want)
		}
	}
}

// TestReportOfAnotherSchemaSaysSoWhateverItsFields: a report of another
// version of walbench is refused for its schema, as readJSON says, even
// when a field it shares with this one holds another type there: the
// schema is read first, so that the operator is told which walbench wrote
// it rather than that one of its fields does not decode.
func TestReportOfAnotherSchemaSaysSoWhateverItsFields(t *testing.T) {
	name := filepath.Join(t.TempDir(), "newer.json")
	if err := os.WriteFile(name, []byte(`{"schema":"walbench/3","command":"full","rounds":"three","rows":{"publish":[]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runWith(t, context.Background(), nil, "report", "-in", name)
	want := `schema "walbench/3", want "walbench/2" (written by another version of walbench)`
	if res.code != exitError || res.stdout != "" || !strings.Contains(res.stderr, want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d, nothing printed, and %q", res.code, res.stdout, res.stderr, exitError, want)
	}
}

// TestReportOfADamagedFileSaysWhereAndWhat: a report cut short, with a
// byte damaged, or with a figure of the wrong type is refused in the
// report's terms, where the damage is: not in the decoder's Go names.
// replaceFirst replaces the first match of pattern in b with repl
// (regexp.Expand's $1), whatever figures the run in testdata holds.
func replaceFirst(b []byte, pattern, repl string) []byte {
	re := regexp.MustCompile(pattern)
	m := re.FindSubmatchIndex(b)
	if m == nil {
		return b
	}
	out := append(bytes.Clone(b[:m[0]]), re.Expand(nil, []byte(repl), b, m)...)
	return append(out, b[m[1]:]...)
}

func TestReportOfADamagedFileSaysWhereAndWhat(t *testing.T) {
	whole, err := os.ReadFile(benchJSON)
	if err != nil {
		t.Fatal(err)
	}
	head := bytes.Index(whole, []byte(`"machine"`)) // past the schema, which is read first
	damaged := bytes.Clone(whole)
	damaged[head] = '#'
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		text []byte
		want string
	}{
		{"empty.json", nil, "it is empty"},
		{"trailing.json", append(bytes.Clone(whole), 'x'), fmt.Sprintf("not JSON as walbench writes it: at byte %d: invalid character 'x' after top-level value", len(whole)+1)},
		{"cut.json", whole[:1000], "not whole JSON: it ends after 1000 bytes, in the middle of a value"},
		{"damaged.json", damaged, fmt.Sprintf("not JSON as walbench writes it: at byte %d: invalid character '#'", head+1)},
		{"type.json", replaceFirst(whole, `"rounds": ([0-9]+),`, `"rounds": "$1",`),
			`not a report walbench wrote: rounds (at byte`},
		{"row-type.json", replaceFirst(whole, `"ops": ([0-9]+),`, `"ops": $1.5,`),
			`not a report walbench wrote: rows.ops (at byte`},
	} {
		name := filepath.Join(dir, tc.name)
		if err := os.WriteFile(name, tc.text, 0o644); err != nil {
			t.Fatal(err)
		}
		res := runWith(t, context.Background(), nil, "report", "-in", name)
		if res.code != exitError || res.stdout != "" || !strings.Contains(res.stderr, name+": "+tc.want) ||
			strings.Contains(res.stderr, "Go struct") || strings.Contains(res.stderr, "main.") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, nothing printed, and %q, in the report's terms", tc.name, res.code, res.stdout, res.stderr, exitError, tc.want)
		}
	}
}
