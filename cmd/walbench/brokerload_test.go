package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/wal"
)

func TestSetVsWALSameN(t *testing.T) {
	walRow := func(sync wal.SyncMode, n int, rate float64) row {
		return row{Kind: kindWAL, Sync: sync.String(), Appenders: n, AppendsPerSec: &rate}
	}
	pubRow := func(n int, rate float64) row {
		return row{Kind: kindBrokerPublish, Sync: broker.SyncAll.String(), Producers: n, AppendsPerSec: &rate}
	}
	raw := row{Kind: kindRawOverwrite, FdatasyncsPerSec: 4000}
	drain := row{Kind: kindBrokerDrain, Sync: broker.SyncAll.String(), Consumers: 64, AppendsPerSec: ptr(50000.0)}
	for _, tc := range []struct {
		name string
		rows []row
		want []*float64 // VsWALSameN of each row
	}{
		{
			name: "each N to its own",
			rows: []row{raw, walRow(wal.SyncAlways, 1, 4000), walRow(wal.SyncAlways, 64, 60000), pubRow(1, 3000), pubRow(64, 54000)},
			want: []*float64{nil, nil, nil, ptr(0.75), ptr(0.9)},
		},
		{
			name: "broker faster than the log",
			rows: []row{walRow(wal.SyncAlways, 16, 20000), pubRow(16, 25000)},
			want: []*float64{nil, ptr(1.25)},
		},
		{
			name: "no WAL row with as many appenders",
			rows: []row{walRow(wal.SyncAlways, 16, 20000), pubRow(64, 50000)},
			want: []*float64{nil, nil},
		},
		{
			name: "the log did not wait for the disk",
			rows: []row{walRow(wal.SyncNever, 64, 900000), pubRow(64, 50000)},
			want: []*float64{nil, nil},
		},
		{
			name: "a WAL rate of zero",
			rows: []row{walRow(wal.SyncAlways, 1, 0), pubRow(1, 3000)},
			want: []*float64{nil, nil},
		},
		{
			name: "the same N twice: the first WAL row",
			rows: []row{walRow(wal.SyncAlways, 4, 8000), walRow(wal.SyncAlways, 4, 4000), pubRow(4, 6000), pubRow(4, 2000)},
			want: []*float64{nil, nil, ptr(0.75), ptr(0.25)},
		},
		{
			name: "drains and raw rows get none",
			rows: []row{raw, walRow(wal.SyncAlways, 64, 60000), drain},
			want: []*float64{nil, nil, nil},
		},
		{
			name: "a broker row before its WAL row",
			rows: []row{pubRow(1, 1000), walRow(wal.SyncAlways, 1, 2000)},
			want: []*float64{ptr(0.5), nil},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setVsWALSameN(tc.rows)
			for i, r := range tc.rows {
				got, want := r.VsWALSameN, tc.want[i]
				switch {
				case want == nil && got != nil:
					t.Errorf("row %d (%s): ÷ wal same N = %v, want none", i, r.Kind, *got)
				case want != nil && got == nil:
					t.Errorf("row %d (%s): no ÷ wal same N, want %v", i, r.Kind, *want)
				case want != nil && math.Abs(*got-*want) > 1e-12:
					t.Errorf("row %d (%s): ÷ wal same N = %v, want %v", i, r.Kind, *got, *want)
				}
			}
		})
	}
}

// TestSummarizeVsWALSameN checks that the summary has the median of the
// rounds' ratios, not the ratio of the medians, and their range.
func TestSummarizeVsWALSameN(t *testing.T) {
	var rounds [][]row
	for i, rates := range [][2]float64{{10000, 9000}, {40000, 20000}, {30000, 27000}} {
		rows := []row{
			{Kind: kindWAL, Sync: wal.SyncAlways.String(), Appenders: 64, AppendsPerSec: ptr(rates[0]), Round: i + 1},
			{Kind: kindBrokerPublish, Producers: 64, AppendsPerSec: ptr(rates[1]), Round: i + 1},
		}
		setVsWALSameN(rows)
		rounds = append(rounds, rows)
	}
	sum := summarize(rounds)
	b := sum[1]
	// The rounds' ratios are 0.9, 0.5 and 0.9; the ratio of the medians
	// would be 20000 / 30000.
	if b.VsWALSameN == nil || *b.VsWALSameN != 0.9 || *b.VsWALSameNMin != 0.5 || *b.VsWALSameNMax != 0.9 {
		t.Fatalf("÷ wal same N %v (%v–%v), want 0.9 (0.5–0.9)", b.VsWALSameN, b.VsWALSameNMin, b.VsWALSameNMax)
	}
	if sum[0].VsWALSameN != nil || sum[0].VsWALSameNMin != nil {
		t.Errorf("the WAL row has a ÷ wal same N: %v", *sum[0].VsWALSameN)
	}
}

// TestRunBroker runs walbench with the broker workloads, two rounds of
// short windows and small drains, and checks that their rows are in the
// table and in the JSON, with positive rates and ratios to the log's rows
// of their own round.
func TestRunBroker(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(t.TempDir(), "bench.json")
	// 1 KiB messages in 64 KiB segments: the prefill's batches of 256 do
	// not fit, and the queue needs a MaxMessageBytes of its own.
	stdout := runOK(t,
		"-dir", dir, "-rounds", "2", "-time", "100ms", "-probe-time", "0", "-warmup", "10ms",
		"-appenders", "1,4", "-segment-bytes", "65536", "-drain-messages", "300", "-json", jsonFile,
	)
	wantRows := []string{
		"broker publish, 1 producer, 1024 B, sync=all",
		"broker publish, 4 producers, 1024 B, sync=all",
		"broker drain via Consume, 64×64, sync=all",
		"broker drain via Consume, 64×64, sync=publish",
		"broker drain via Receive+Ack, 1 consumer, batch 64, sync=all",
		"broker drain via Receive+Ack, 4 consumers, batch 64, sync=all",
	}
	for _, want := range append([]string{"÷ wal same N"}, wantRows...) {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table has no %q", want)
		}
	}
	if strings.Contains(stdout, "note:") {
		t.Errorf("notes on the counters in the table")
	}
	assertDirEmpty(t, dir, "left behind in -dir: %v")

	rep := readReport(t, jsonFile)
	// Two WAL rows, then the broker's.
	if len(rep.Rows) != 2+len(wantRows) {
		t.Fatalf("-json: %d rows, want %d", len(rep.Rows), 2+len(wantRows))
	}
	walRows := rep.Rows[:2]
	for i, r := range rep.Rows[2:] {
		if r.Workload != wantRows[i] {
			t.Errorf("row %d: %q, want %q", i+2, r.Workload, wantRows[i])
		}
		if r.AppendsPerSec == nil || *r.AppendsPerSec <= 0 || r.MBPerSec <= 0 || r.Ops <= 0 || r.Rounds != 2 {
			t.Errorf("%s: msgs/s %v, MB/s %v, %d ops, %d rounds; want positive rates over 2 rounds", r.Workload, r.AppendsPerSec, r.MBPerSec, r.Ops, r.Rounds)
		}
		if r.Sync == broker.SyncAll.String() && (r.FdatasyncsPerSec <= 0 || r.RecordsPerFdatasync == nil) {
			t.Errorf("%s: %v fdatasyncs/s, records/fdatasync %v; want commits under sync=all", r.Workload, r.FdatasyncsPerSec, r.RecordsPerFdatasync)
		}
		if len(r.Notes) > 0 {
			t.Errorf("%s: notes %q", r.Workload, r.Notes)
		}
		switch r.Kind {
		case kindBrokerPublish:
			if r.P50Ns == nil || r.VsWALSameN == nil || r.VsWALSameNMin == nil {
				t.Errorf("%s: p50 %v, ÷ wal same N %v; want both", r.Workload, r.P50Ns, r.VsWALSameN)
			}
			w := walRows[0]
			if r.Producers != 1 {
				w = walRows[1]
			}
			for k, p := range r.PerRound {
				want := *p.AppendsPerSec / *w.PerRound[k].AppendsPerSec
				if p.VsWALSameN == nil || math.Abs(*p.VsWALSameN-want) > 1e-9*want {
					t.Errorf("%s round %d: ÷ wal same N %v, want %v, the ratio to %s of the same round", r.Workload, k+1, p.VsWALSameN, want, w.Workload)
				}
			}
		case kindBrokerDrain:
			if r.Messages != 300 || r.Batch != 64 || r.FillSeconds <= 0 {
				t.Errorf("%s: %d messages, batch %d, fill %vs; want 300, 64, some", r.Workload, r.Messages, r.Batch, r.FillSeconds)
			}
			if r.Method == drainConsume.String() && r.Ops != 2*300 {
				t.Errorf("%s: %d messages handled over 2 rounds, want all 600", r.Workload, r.Ops)
			}
			if r.VsWALSameN != nil || r.P50Ns != nil {
				t.Errorf("%s: ÷ wal same N %v, p50 %v; want neither", r.Workload, r.VsWALSameN, r.P50Ns)
			}
		default:
			t.Errorf("%s: kind %q", r.Workload, r.Kind)
		}
	}
}

func TestRunWithoutBroker(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"-dir", t.TempDir(), "-time", "50ms", "-probe-time", "0", "-appenders", "2",
		"-segment-bytes", "65536", "-broker=false"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("run = %d, want %d; stderr:\n%s", code, exitOK, &stderr)
	}
	if out := stdout.String(); strings.Contains(out, "broker") || strings.Contains(out, "÷ wal same N") {
		t.Errorf("-broker=false, and yet:\n%s", out)
	}
}

// TestRunBrokerDrainLimit drains a backlog too large for the time limit:
// the drain stops at the limit, with a rate of what it acked.
func TestRunBrokerDrainLimit(t *testing.T) {
	d := brokerDrainLoad{
		method:       drainReceiveAck,
		sync:         broker.SyncAll,
		consumers:    1,
		batch:        64,
		messages:     20000,
		payloadBytes: 10,
		segmentBytes: 1 << 20,
		limit:        50 * time.Millisecond,
	}
	dir := t.TempDir()
	res, err := runBrokerDrain(context.Background(), io.Discard, dir, d)
	if err != nil {
		t.Fatalf("runBrokerDrain: %v", err)
	}
	if !res.opened || !res.limited || res.interrupted || res.handled == 0 || res.handled >= int64(d.messages) {
		t.Fatalf("opened %v, limited %v, interrupted %v, %d of %d handled; want the limit to stop it midway",
			res.opened, res.limited, res.interrupted, res.handled, d.messages)
	}
	if res.elapsed < d.limit || res.elapsed > d.limit+2*time.Second {
		t.Errorf("the drain took %v with a limit of %v", res.elapsed, d.limit)
	}
	assertDirEmpty(t, dir, "store directory left behind: %v")
}
