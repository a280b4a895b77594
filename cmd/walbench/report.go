package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
)

// schemaVersion names the JSON form documented in doc.go. A change that
// renames or removes a field, or changes a field's meaning, needs a new one.
const schemaVersion = "walbench/2"

// Report is everything one run of walbench measured. The table it prints
// and the BENCH.md section the report command writes are functions of a
// Report alone, so that the JSON holds every figure either shows. Its JSON
// form is documented in doc.go.
type Report struct {
	Schema  string   `json:"schema"`
	Command string   `json:"command"`
	Args    []string `json:"args"`
	Machine Machine  `json:"machine"`
	Rounds  int      `json:"rounds"`  // asked for
	Seconds float64  `json:"seconds"` // the whole run
	// Interrupted: Ctrl-C cut the run short; what it holds was measured
	// before.
	Interrupted bool `json:"interrupted"`
	// InterruptedBy names the signal that did: "SIGINT" (Ctrl-C),
	// "SIGTERM" or "SIGHUP"; "" when not interrupted or not known.
	InterruptedBy string `json:"interrupted_by,omitempty"`
	// Error is the failure that ended the run early, if one did.
	Error string `json:"error,omitempty"`

	Probe          *Probe          `json:"probe,omitempty"`
	Rows           []Row           `json:"rows"`
	Reopen         *Reopen         `json:"reopen,omitempty"`
	Recommendation *Recommendation `json:"recommendation,omitempty"`
}

// Row kinds.
const (
	kindPublish = "publish"
	kindDrain   = "drain"
	kindMixed   = "mixed"
	kindWAL     = "wal"
	kindSweep   = "sweep"
)

// Row is one workload's figures: one round's (Round set) or the summary
// of its rounds (Rounds and PerRound set). Pointer figures are nil where
// they do not apply ("-" in the table, null in the JSON).
//
// The agg tags tell summarize how the rounds combine: "sum" adds them up,
// "or" is true if any round's is, "set" is the last round's that is not
// the zero value (Probe), "series" is the element-wise median (Backlog),
// "ceilings" the median of each ceiling (Probe); a pointer figure is the
// median over the rounds that have it, and "ratio" adds its min–max to
// Ranges. Every other field is the same in every round.
type Row struct {
	Kind         string  `json:"kind"`
	Workload     string  `json:"workload"`
	Sync         string  `json:"sync"`
	Producers    int     `json:"producers,omitempty"`
	Consumers    int     `json:"consumers,omitempty"`
	Batch        int     `json:"batch,omitempty"`
	Prefetch     int     `json:"prefetch,omitempty"`
	Method       string  `json:"method,omitempty"`
	Size         int     `json:"size"`
	SegmentBytes int64   `json:"segment_bytes"`
	Segments     string  `json:"segments,omitempty"` // wal: where rotations took their segments, "new" or "reused"
	Messages     int     `json:"messages,omitempty"`
	TargetPerSec float64 `json:"target_per_sec,omitempty"`

	Round       int     `json:"round,omitempty"`
	Rounds      int     `json:"rounds,omitempty"`
	Seconds     float64 `json:"seconds" agg:"sum"`
	FillSeconds float64 `json:"fill_seconds,omitempty" agg:"sum"`
	Interrupted bool    `json:"interrupted" agg:"or"`
	// Limited: drain: -limit ended a drain of it with messages left.
	Limited bool `json:"limited,omitempty" agg:"or"`
	// DrainFailed: sweep: the drain after a window of it failed (the
	// run's error says how): that round has no drain figures, and is not
	// scored.
	DrainFailed bool `json:"drain_failed,omitempty" agg:"or"`

	Ops            int64 `json:"ops" agg:"sum"`
	Commits        int64 `json:"commits" agg:"sum"`
	Rotations      int64 `json:"rotations,omitempty" agg:"sum"`       // wal: rotations in the window
	NewSegments    int64 `json:"new_segments,omitempty" agg:"sum"`    // wal: of them, to a segment written full of zeros
	RushedSegments int64 `json:"rushed_segments,omitempty" agg:"sum"` // wal: of those, the ones the log waited for (the rest allocated)
	LatencySamples int64 `json:"latency_samples" agg:"sum"`

	MsgsPerSec       *float64 `json:"msgs_per_sec"`
	MBPerSec         *float64 `json:"mb_per_sec"`
	P50Ns            *int64   `json:"p50_ns"`
	P99Ns            *int64   `json:"p99_ns"`
	P999Ns           *int64   `json:"p999_ns"`
	MaxNs            *int64   `json:"max_ns"`
	CommitsPerSec    *float64 `json:"commits_per_sec"`
	RecordsPerCommit *float64 `json:"records_per_commit"`

	CeilingPerSec     *float64 `json:"ceiling_per_sec"`
	VsFdatasync       *float64 `json:"vs_fdatasync" agg:"ratio"`
	VsCeiling         *float64 `json:"vs_ceiling" agg:"ratio"`
	P99VsFdatasyncP99 *float64 `json:"p99_vs_fdatasync_p99" agg:"ratio"`
	P99VsLargeP99     *float64 `json:"p99_vs_large_p99" agg:"ratio"`
	VsWAL             *float64 `json:"vs_wal,omitempty" agg:"ratio"`
	DrainMsgsPerSec   *float64 `json:"drain_msgs_per_sec,omitempty"`
	DrainSeconds      float64  `json:"drain_seconds,omitempty" agg:"sum"`
	ThroughMsgsPerSec *float64 `json:"through_msgs_per_sec,omitempty"`
	ServiceP99Ns      *int64   `json:"service_p99_ns,omitempty"`
	E2EP50Ns          *int64   `json:"e2e_p50_ns,omitempty"`
	E2EP99Ns          *int64   `json:"e2e_p99_ns,omitempty"`
	E2EP999Ns         *int64   `json:"e2e_p999_ns,omitempty"`
	E2EMaxNs          *int64   `json:"e2e_max_ns,omitempty"`
	BacklogMax        *float64 `json:"backlog_max,omitempty"`
	// StartLateNs: mixed: how late, on average, the producers began the
	// calls they were on schedule for: the load generator's own lateness.
	StartLateNs       *int64 `json:"start_late_ns,omitempty"`
	BacklogIntervalNs int64  `json:"backlog_interval_ns,omitempty"`
	Backlog           []int  `json:"backlog,omitempty" agg:"series"`

	Notes    []string              `json:"notes,omitempty"`
	Ranges   map[string][2]float64 `json:"ranges,omitempty"`
	PerRound []Row                 `json:"per_round,omitempty"`
}

// Probe is what the disk alone does: one round's figures or the summary
// of the rounds', as for a Row.
type Probe struct {
	Round int `json:"round,omitempty"`
	// Rounds counts the rounds whose probe measured any loop: PerRound
	// also holds one Ctrl-C stopped in its prefill, which measured nothing.
	Rounds      int     `json:"rounds,omitempty"`
	Seconds     float64 `json:"seconds" agg:"sum"`
	Interrupted bool    `json:"interrupted" agg:"or"`
	// InterruptedIn names the step of the probe Ctrl-C stopped (probePrefill,
	// probeFdatasync, ...): its figures are of what it did before, and the
	// steps after it did not run. A summary has the last cut round's, which
	// says nothing of the others: PerRound has each round's.
	InterruptedIn string `json:"interrupted_in,omitempty" agg:"set"`

	Fdatasyncs       int64    `json:"fdatasyncs" agg:"sum"`
	FdatasyncsPerSec *float64 `json:"fdatasyncs_per_sec"`
	FdatasyncP50Ns   *int64   `json:"fdatasync_p50_ns"`
	FdatasyncP99Ns   *int64   `json:"fdatasync_p99_ns"`
	FdatasyncP999Ns  *int64   `json:"fdatasync_p999_ns"`
	FdatasyncMaxNs   *int64   `json:"fdatasync_max_ns"`

	LargeFdatasyncsPerSec *float64 `json:"large_fdatasyncs_per_sec"`
	LargeP50Ns            *int64   `json:"large_p50_ns"`
	LargeP99Ns            *int64   `json:"large_p99_ns"`
	LargeP999Ns           *int64   `json:"large_p999_ns"`
	LargeMaxNs            *int64   `json:"large_max_ns"`

	AppendFdatasyncsPerSec *float64 `json:"append_fdatasyncs_per_sec"`
	AppendP50Ns            *int64   `json:"append_p50_ns"`
	AppendP99Ns            *int64   `json:"append_p99_ns"`
	AppendP999Ns           *int64   `json:"append_p999_ns"`
	AppendMaxNs            *int64   `json:"append_max_ns"`

	WriteMBPerSec *float64 `json:"write_mb_per_sec"`

	Ceilings []Ceiling `json:"ceilings" agg:"ceilings"`
	Notes    []string  `json:"notes,omitempty"`
	PerRound []Probe   `json:"per_round,omitempty"`
}

// Ceiling is the rate at which the probed disk would make messages of
// Size bytes durable for Producers closed-loop producers with perfect group
// commit: every fdatasync carries one message of each producer. Producers
// 0 stands for unbounded concurrency, where only the bandwidth bounds it.
type Ceiling struct {
	Producers  int      `json:"producers"`
	Size       int      `json:"size"`
	MsgsPerSec *float64 `json:"msgs_per_sec"`
}

// Reopen is the reopen workload's figures, as for a Row.
type Reopen struct {
	Workload     string `json:"workload"`
	Messages     int    `json:"messages"`
	Size         int    `json:"size"`
	SegmentBytes int64  `json:"segment_bytes"`
	Round        int    `json:"round,omitempty"`
	Rounds       int    `json:"rounds,omitempty"`
	Interrupted  bool   `json:"interrupted" agg:"or"`
	// Warm: the opens were timed with the store's files in the page
	// cache, which only Linux lets walbench empty.
	Warm bool `json:"warm,omitempty" agg:"or"`

	FillSeconds      float64 `json:"fill_seconds,omitempty"`
	Segments         int     `json:"segments,omitempty"`
	SegmentFileBytes int64   `json:"segment_file_bytes,omitempty"`
	IndexBytes       int64   `json:"index_bytes,omitempty"`

	CheckpointOpenNs    *int64   `json:"checkpoint_open_ns"`
	RebuildOpenNs       *int64   `json:"rebuild_open_ns"`
	RebuildVsCheckpoint *float64 `json:"rebuild_vs_checkpoint" agg:"ratio"`
	HeapBeforeBytes     *int64   `json:"heap_before_open_bytes"`
	HeapInUseBytes      *int64   `json:"heap_inuse_bytes"`
	HeapBytesPerMessage *float64 `json:"heap_bytes_per_message"`

	Notes    []string              `json:"notes,omitempty"`
	Ranges   map[string][2]float64 `json:"ranges,omitempty"`
	PerRound []Reopen              `json:"per_round,omitempty"`
}

// marshalReport is rep as -json writes it.
func marshalReport(rep *Report) ([]byte, error) {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// readJSON reads a report written by -json, refusing another schema, and
// one that is not a report walbench could have written (see checkReport).
// Its errors do not repeat name (see readInput).
func readJSON(name string) (*Report, error) {
	b, err := readInput(name)
	if err != nil {
		return nil, err
	}
	// The schema first: another version's report may hold a field of
	// this one's with another type, and the operator is to be told which
	// walbench wrote it, not that the field does not decode.
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, decodeError(b, err)
	}
	if head.Schema != schemaVersion {
		return nil, fmt.Errorf("schema %q, want %q (written by another version of walbench)", head.Schema, schemaVersion)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, decodeError(b, err)
	}
	if err := checkReport(&rep); err != nil {
		return nil, fmt.Errorf("not a report walbench wrote: %w", err)
	}
	return &rep, nil
}

// decodeError says what json.Unmarshal found wrong with b, a report, in
// the report's terms and where: a file cut short (a copy or a write that
// did not finish), a damaged byte, or a figure of another type than
// walbench writes (the decoder's own words name Go types).
func decodeError(b []byte, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case len(bytes.TrimSpace(b)) == 0:
		return errors.New("it is empty, not a report")
	case errors.As(err, &syntax) && syntax.Error() == "unexpected end of JSON input":
		return fmt.Errorf("not whole JSON: it ends after %d bytes, in the middle of a value (cut short?)", len(b))
	case errors.As(err, &syntax):
		return fmt.Errorf("not JSON as walbench writes it: at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "the file"
		}
		return fmt.Errorf("not a report walbench wrote: %s (at byte %d) is a JSON %s, where walbench writes %s", field, typ.Offset, typ.Value, jsonKind(typ.Type))
	}
	return err
}

// jsonKind is what JSON walbench writes for a Go value of type t.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem()) + " or null"
	}
	return "an object"
}

// readInput reads the file name whole. It refuses a device, which holds
// no report nor BENCH.md, and one such as /dev/zero never ends; a named
// pipe is read (report -in <(...)). Its errors do not name the file
// beyond what the file system's say: the caller names it with its flag.
func readInput(name string) ([]byte, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeDevice != 0 {
		return nil, fmt.Errorf("is %s, not a file walbench wrote or reads", fileKind(fi.Mode()))
	}
	return os.ReadFile(name)
}

// Bounds of the figures a report may hold: far beyond what a run
// measures, and short of what the tables cannot print (a rate rounded to
// an int64, seconds made a time.Duration).
const (
	maxFigure  = 1e15 // any count, rate, size, ratio or nanoseconds
	maxSeconds = 1e9  // any seconds: 31 years
)

// checkReport refuses a report that walbench could not have written, and
// whose tables would be empty or wrong: a command it does not run, no
// rounds, nothing measured, a row of a kind it does not make, a number
// out of range (a negative count, a rate that overflows when printed, a
// backlog longer than -sample allows).
func checkReport(rep *Report) error {
	measuring := slices.ContainsFunc(commands, func(c struct{ name, summary string }) bool {
		return c.name == rep.Command && c.name != "report"
	})
	switch {
	case !measuring:
		return fmt.Errorf("command %q is not one of walbench's measuring commands", rep.Command)
	case rep.Rounds < 1:
		return fmt.Errorf("rounds %d: want at least 1", rep.Rounds)
	case !probeMeasured(rep.Probe) && len(rep.Rows) == 0 && rep.Reopen == nil:
		return errors.New("it holds no measurement (no probe that measured a round, no rows, no reopen)")
	}
	kinds := []string{kindWAL, kindPublish, kindDrain, kindMixed, kindSweep}
	for i, r := range rep.Rows {
		for _, row := range append([]Row{r}, r.PerRound...) {
			if !slices.Contains(kinds, row.Kind) {
				return fmt.Errorf("rows[%d]: kind %q: want one of %s", i, row.Kind, strings.Join(kinds, ", "))
			}
			if len(row.Backlog) > maxBacklogSamples {
				return fmt.Errorf("rows[%d]: %d backlog samples: at most %d", i, len(row.Backlog), maxBacklogSamples)
			}
		}
	}
	return checkFigures(reflect.ValueOf(rep).Elem(), "")
}

// checkFigures refuses a number of v, or of what v holds, that is negative
// or beyond maxFigure (maxSeconds for seconds). path names v, as JSON.
func checkFigures(v reflect.Value, path string) error {
	bound := maxFigure
	if strings.HasSuffix(path, "seconds") {
		bound = maxSeconds
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			return checkFigures(v.Elem(), path)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			if err := checkFigures(v.Field(i), strings.TrimPrefix(path+"."+name, ".")); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if err := checkFigures(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if err := checkFigures(v.MapIndex(k), fmt.Sprintf("%s.%v", path, k)); err != nil {
				return err
			}
		}
	case reflect.Int, reflect.Int64:
		if n := v.Int(); n < 0 || float64(n) > bound {
			return fmt.Errorf("%s: %d is out of range (want 0 to %g)", path, n, bound)
		}
	case reflect.Float64:
		if f := v.Float(); !(f >= 0 && f <= bound) {
			return fmt.Errorf("%s: %g is out of range (want 0 to %g)", path, f, bound)
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// setRates sets r's rates from its Ops (of Size bytes each), Commits and
// Seconds. records is how many records of those commits were the
// workload's, for RecordsPerCommit, the group-commit factor: the store's
// own records (a rotation's preamble, copies forward) ride in the same
// commits, or in commits of their own, but are no one's work.
func (r *Row) setRates(records int64) {
	r.MsgsPerSec = rate(r.Ops, r.Seconds)
	if bytes := rate(r.Ops*int64(r.Size), r.Seconds); bytes != nil {
		r.MBPerSec = ptr(*bytes / 1e6)
	}
	r.CommitsPerSec = rate(r.Commits, r.Seconds)
	if r.Commits > 0 {
		r.RecordsPerCommit = ptr(float64(records) / float64(r.Commits))
	}
}

// rate is n per second over secs; nil for an empty interval.
func rate(n int64, secs float64) *float64 {
	if secs <= 0 {
		return nil
	}
	return ptr(float64(n) / secs)
}

// ratio is a / b, nil when either is missing or b is not positive.
func ratio(a, b *float64) *float64 {
	if a == nil || b == nil || *b <= 0 {
		return nil
	}
	return ptr(*a / *b)
}

// ratioNs is ratio for nanoseconds.
func ratioNs(a, b *int64) *float64 {
	if a == nil || b == nil || *b <= 0 {
		return nil
	}
	return ptr(float64(*a) / float64(*b))
}
