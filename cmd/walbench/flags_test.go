package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// holdsPastInt reports whether an argument, or a value of a comma-separated
// list, is a whole number past what the build's int holds (a 32-bit build's
// past 2,147,483,647).
func holdsPastInt(args []string) bool {
	for _, a := range args {
		for _, v := range strings.Split(a, ",") {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && (n > math.MaxInt || n < math.MinInt) {
				return true
			}
		}
	}
	return false
}

// hugeCount is a count past every bound walbench sets and, as -messages of
// 1 KiB, past what any test machine's disk holds, that the build's int
// still holds: 99,999,999,999 (about 100 TB of messages) on a 64-bit
// build, 2,000,000,000 (about 2 TB) on a 32-bit one, whose int refuses a
// larger one as too large a number before any bound is checked.
var hugeCount = map[bool]string{true: "99999999999", false: "2000000000"}[strconv.IntSize == 64]

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"publish", "-producers", "1,x"}, `"x" is not a positive count`},
		{[]string{"publish", "-producers", "0"}, "-producers 0: must be at least 1"},
		{[]string{"publish", "-sync", "all,sometimes"}, `sync mode "sometimes"`},
		{[]string{"publish", "-segment-bytes", "1KiB"}, "-segment-bytes 1024"},
		{[]string{"sweep", "-segment-bytes", "4MiB,lots"}, `"lots" is not a size`},
		{[]string{"-rounds", "0"}, "-rounds 0"},
		{[]string{"-time", "0s"}, "-time"},
		{[]string{"-size", "0"}, "-size 0"},
		{[]string{"mixed", "-size", "8"}, "-size 8: must be at least 9"},
		{[]string{"mixed", "-rate", "0"}, "-rate 0"},
		{[]string{"mixed", "-rate", "2000,-5"}, "-rate -5"},
		{[]string{"mixed", "-rate", "2000,fast"}, `"fast" is not a rate`},
		{[]string{"mixed", "-rate", "Inf"}, "-rate +Inf"},
		{[]string{"drain", "-method", "peek"}, `-method "peek"`},
		{[]string{"drain", "-prefetch", "-1"}, "-prefetch -1: must not be negative"},
		{[]string{"drain", "-prefetch", "65537"}, "-prefetch 65537: must be at most 65536"},
		{[]string{"drain", "-method", "receive-ack", "-prefetch", "4"}, "-prefetch 4: only Consume holds messages"},
		{[]string{"wal", "-sync", "all"}, "want always, interval or never"},
		{[]string{"wal", "-sync", "always,never"}, "want always, interval or never"},
		{[]string{"mixed", "-sync", "all,none"}, `invalid value "all,none" for flag -sync: one mode, not a list`},
		{[]string{"mixed", "-sync", "always"}, `sync mode "always": want all, publish or none`},
		{[]string{"wal", "-segments", "new,recycled"}, `"recycled": want new or reused`},
		{[]string{"report"}, "-in FILE is required"},
		{[]string{"report", "-in", "x.json", "-bench", "BENCH.md", "-md"}, "-bench BENCH.md and -md: choose one"},
		{[]string{"publish", "-producers", "1,1"}, `invalid value "1,1" for flag -producers: "1" given twice`},
		{[]string{"probe", "-size", "100,200,100"}, `"100" given twice`},
		{[]string{"mixed", "-rate", "2000,2e3"}, `"2000" and "2e3" are the same value, given twice`},
		{[]string{"sweep", "-segment-bytes", "4MiB,4194304"}, `"4MiB" and "4194304" are the same value, given twice`},
		{[]string{"sweep", "-sync", "all, all"}, `"all" given twice`},
		{[]string{"wal", "-segments", "new,new"}, `"new" given twice`},
		{[]string{"probe", "-json", "out", "-cpuprofile", "./out"}, "-cpuprofile ./out and -json out: the same file"},
		{[]string{"probe", "extra"}, `unexpected argument "extra"`},
	} {
		res := runWith(t, context.Background(), nil, tc.args...)
		if res.code != exitUsage || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("walbench %q: exit %d, stderr %q; want %d and %q", tc.args, res.code, res.stderr, exitUsage, tc.want)
		}
	}
}

// TestHelp: the help asked for goes to stdout, with exit code 0; the
// usage printed after a bad flag goes to stderr, with exit code 2.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"sweep", "-h"}, {"help", "sweep"}, {"report", "-help"}} {
		res := runWith(t, context.Background(), nil, args...)
		if res.code != exitOK || !strings.Contains(res.stdout, "usage: walbench") || res.stderr != "" {
			t.Errorf("walbench %q: exit %d, stdout %q, stderr %q; want %d, the usage on stdout and nothing on stderr", args, res.code, res.stdout, res.stderr, exitOK)
		}
	}
	res := runWith(t, context.Background(), nil, "sweep", "-bogus")
	if res.code != exitUsage || res.stdout != "" || !strings.Contains(res.stderr, "flag provided but not defined: -bogus") || !strings.Contains(res.stderr, "usage: walbench sweep") {
		t.Errorf("walbench sweep -bogus: exit %d, stdout %q, stderr %q; want %d, and the error and the usage on stderr", res.code, res.stdout, res.stderr, exitUsage)
	}
	var b strings.Builder
	usage(&b)
	for _, c := range commands {
		if !strings.Contains(b.String(), c.name) {
			t.Errorf("usage does not list %s", c.name)
		}
	}
}

func TestParseConfig(t *testing.T) {
	c, err := parseConfig(nil, io.Discard, io.Discard)
	if err != nil || c.command != "profile" || !slices.Equal(c.workloads, []string{kindPublish, kindDrain}) || !c.recommend || c.drain.messages != quickDrainMessages {
		t.Fatalf("no arguments: %+v, %v; want the profile, with the quick drain", c, err)
	}
	c, err = parseConfig([]string{"-size", "4096", "-segment-bytes", "4MiB", "-rounds", "3"}, io.Discard, io.Discard)
	if err != nil || c.drain.size != 4096 || c.drain.segmentBytes != 4<<20 || c.drain.messages != defaultDrainMessages {
		t.Errorf("the profile's -size and -segment-bytes apply to its drains too, and -rounds 3 drains more: %+v, %v", c.drain, err)
	}
	c, err = parseConfig([]string{"full"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(c.workloads, []string{kindWAL, kindPublish, kindDrain, kindMixed, kindSweep}) || !c.reopen || c.probeTime <= 0 {
		t.Errorf("full: %v %v %v, %v", c.workloads, c.reopen, c.probeTime, err)
	}
	if !slices.Equal(c.mixedRates, []float64{2000, 20000}) {
		t.Errorf("full: mixed rates %v, want a light one and one that rotates segments", c.mixedRates)
	}
	c, err = parseConfig([]string{"mixed"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(c.mixedRates, []float64{2000}) {
		t.Errorf("mixed: rates %v, %v; want 2000 alone by default", c.mixedRates, err)
	}
	c, err = parseConfig([]string{"mixed", "-rate", "500, 1e4"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(c.mixedRates, []float64{500, 10000}) || len(c.jobs(&env{})) != 2 {
		t.Errorf("mixed -rate 500,1e4: rates %v, %v; want two workloads", c.mixedRates, err)
	}
	c, err = parseConfig([]string{"sweep", "-sync", "publish,none", "-segment-bytes", "1MiB,64MiB", "-size", "1024,16KiB"}, io.Discard, io.Discard)
	if err == nil {
		t.Errorf("sweep -size 16KiB: want an error, -size takes counts of bytes")
	}
	c, err = parseConfig([]string{"sweep", "-sync", "publish,none", "-segment-bytes", "1MiB,64MiB", "-size", "1024,16384"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(c.sweep.syncs, []broker.SyncMode{broker.SyncPublish, broker.SyncNone}) ||
		!slices.Equal(c.sweep.segments, []int64{1 << 20, 64 << 20}) || !slices.Equal(c.sweep.sizes, []int{1024, 16384}) {
		t.Errorf("sweep: %+v, %v", c.sweep, err)
	}
	if n := len(sweepGrid(c.sweep.producers, c.sweep.sizes, c.sweep.segments, c.sweep.syncs)); n != 2*2*2*2 {
		t.Errorf("the grid has %d points, want 16", n)
	}
	c, err = parseConfig([]string{"wal"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(c.wal.segments, []segmentSource{newSegments, reusedSegments}) {
		t.Errorf("wal: segments %v, %v; want new and reused by default", c.wal.segments, err)
	}
	c, err = parseConfig([]string{"wal", "-segments", "reused", "-producers", "1,64"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(c.wal.segments, []segmentSource{reusedSegments}) {
		t.Fatalf("wal -segments reused: %v, %v", c.wal.segments, err)
	}
	if n := len(c.jobs(&env{})); n != 2 {
		t.Errorf("wal -segments reused -producers 1,64: %d workloads, want 2", n)
	}
}

func TestCeilingsWanted(t *testing.T) {
	c, err := parseConfig([]string{"full"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range c.ceilings() {
		got = append(got, strconv.Itoa(x.Producers)+"×"+strconv.Itoa(x.Size))
	}
	// wal 1, 64; publish 1, 16, 64; sweep 1, 64 at 1 KiB and 16 KiB; and
	// any number at each size, last.
	want := []string{"1×1024", "16×1024", "64×1024", "0×1024", "1×16384", "64×16384", "0×16384"}
	if !slices.Equal(got, want) {
		t.Errorf("ceilings %v, want %v", got, want)
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "4MiB": 4 << 20, "16KiB": 16 << 10, "64M": 64 << 20, " 2K ": 2048, "1GiB": 1 << 30, "1TiB": 1 << 40} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "4 PiB", "1.5MiB", "17592186044420MiB", "9223372036854775807K", "9223372036854775808"} {
		if _, err := parseBytes(in); err == nil || !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("parseBytes(%q): error %v, want one naming the value", in, err)
		}
	}
	if n, err := parseBytes("9223372036854775807"); err != nil || n != math.MaxInt64 {
		t.Errorf("parseBytes(MaxInt64) = %d, %v", n, err)
	}
}

// TestFlagBounds: the values that would exhaust the memory, overflow a
// computation or measure nothing are refused, naming the flag and the
// value, with exit code 2. They are checked with parseConfig first: a
// value it accepted would start a run.
func TestFlagBounds(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"drain", "-messages", "100", "-batch", hugeCount, "-consumers", "1", "-method", "receive-ack", "-sync", "all"}, "-batch " + hugeCount + ": must be at most 10000"},
		{[]string{"drain", "-batch", "64,10001"}, "-batch 10001: must be at most 10000"},
		{[]string{"mixed", "-batch", "20000"}, "-batch 20000: must be at most 10000"},
		{[]string{"sweep", "-batch", "10001"}, "-batch 10001: must be at most 10000"},
		{[]string{"publish", "-producers", "200000"}, "-producers 200000: must be at most 1024"},
		{[]string{"-producers", "1,1025"}, "-producers 1025: must be at most 1024"},
		{[]string{"mixed", "-producers", "2000"}, "-producers 2000: must be at most 1024"},
		{[]string{"wal", "-producers", "1025"}, "-producers 1025: must be at most 1024"},
		{[]string{"sweep", "-producers", "1,4096"}, "-producers 4096: must be at most 1024"},
		{[]string{"probe", "-producers", "5000"}, "-producers 5000: must be at most 1024"},
		{[]string{"drain", "-consumers", "1025"}, "-consumers 1025: must be at most 1024"},
		{[]string{"mixed", "-consumers", "5000"}, "-consumers 5000: must be at most 1024"},
		{[]string{"sweep", "-consumers", "0"}, "-consumers 0: must be at least 1"},
		{[]string{"-size", "1048577"}, "-size 1048577: must be at most 1048576"},
		{[]string{"publish", "-size", "1024,9000000000"}, "-size 9000000000: must be at most 1048576"},
		{[]string{"drain", "-size", "1099511627776"}, "-size 1099511627776: must be at most 1048576"},
		{[]string{"mixed", "-size", "1099511627776"}, "-size 1099511627776: must be at most 1048576"},
		{[]string{"reopen", "-size", "1099511627776"}, "-size 1099511627776: must be at most 1048576"},
		{[]string{"sweep", "-size", "1099511627776"}, "-size 1099511627776: must be at most 1048576"},
		{[]string{"wal", "-size", "1099511627776"}, "-size 1099511627776: must be at most 1048576"},
		{[]string{"probe", "-size", "1099511627776"}, "-size 1099511627776: must be at most 1048576"},
		{[]string{"wal", "-size", "16319", "-segment-bytes", "16KiB"}, "-size 16319: a record must fit in one segment of the log: at most 16318 bytes"},
		{[]string{"mixed", "-rate", "1e-10"}, "-rate 1e-10: must be at least 3.2 msgs/s, so that each of the 16 producers publishes at least once in the -time 5s window"},
		{[]string{"mixed", "-producers", "4", "-time", "1s", "-rate", "100,3"}, "-rate 3: must be at least 4 msgs/s"},
		{[]string{"mixed", "-producers", "2", "-rate", "1e12"}, "-rate 1e+12: must be at most 2e+06 msgs/s"},
		{[]string{"publish", "-segment-bytes", "17592186044420MiB"}, `"17592186044420MiB" is too large a size`},
		{[]string{"sweep", "-segment-bytes", "4MiB,9223372036854775808"}, `"9223372036854775808" is too large a size`},
		{[]string{"-time", "1ns"}, "-time 1ns: must be at least 10ms"},
		{[]string{"mixed", "-time", "9ms"}, "-time 9ms: must be at least 10ms"},
		{[]string{"publish", "-probe-time", "1ms"}, "-probe-time 1ms: must be 0 (no probe) or at least 10ms"},
		{[]string{"probe", "-time", "1ms"}, "-time 1ms: must be at least 10ms"},
		{[]string{"probe", "-time", "-1s"}, "-time -1s: must be at least 10ms"},
		{[]string{"publish", "-segment-bytes", "2GiB"}, "-segment-bytes 2147483648: want 0 (the default) or [16384, 1073741824]"},
		{[]string{"sweep", "-segment-bytes", "4MiB,2GiB"}, "-segment-bytes 2147483648: want 0 (the default) or [16384, 1073741824]"},
		{[]string{"drain", "-messages", "-5"}, "-messages -5: must not be negative"},
		{[]string{"drain", "-limit", "0s"}, "-limit 0s: must be at least 10ms"},
		{[]string{"drain", "-limit", "-1s"}, "-limit -1s: must be at least 10ms"},
		{[]string{"drain", "-limit", "1ns"}, "-limit 1ns: must be at least 10ms"},
		{[]string{"drain", "-limit", "3000h"}, "-limit 3000h0m0s: must be at most 1h0m0s"},
		{[]string{"drain", "-limit", "1h0m0.001s"}, "-limit 1h0m0.001s: must be at most 1h0m0s"},
		{[]string{"sweep", "-segment-bytes", "16KiB,64MiB", "-size", "1024,16384"}, fmt.Sprintf("-size 16384: a message must fit in one segment of the store: at most %d bytes with -segment-bytes 16384", broker.Options{SegmentBytes: 16 << 10}.MaxMessageBytes())},
		{[]string{"publish", "-segment-bytes", "16KiB", "-size", "16384"}, "-size 16384: a message must fit in one segment of the store"},
		{[]string{"mixed", "-segment-bytes", "16KiB", "-size", "16000"}, "-size 16000: a message must fit in one segment of the store"},
		{[]string{"reopen", "-segment-bytes", "16KiB", "-size", "16000"}, "-size 16000: a message must fit in one segment of the store"},
		{[]string{"reopen", "-messages", "0"}, "-messages 0: must be at least 1"},
		{[]string{"mixed", "-sample", "0s"}, "-sample 0s: must be at least 10ms"},
		{[]string{"mixed", "-time", "15s", "-sample", "1ns", "-rate", "1000"}, "-sample 1ns: must be at least 10ms"},
		{[]string{"mixed", "-time", "1h", "-sample", "10ms"}, "-sample 10ms: 360000 backlog samples in the -time 1h0m0s window; at most 100000"},
		// A backlog sampled less often than the window lasts is sampled
		// not once in it: refused, not a run with no backlog.
		{[]string{"mixed", "-time", "1s", "-sample", "10s"}, "-sample 10s: must be shorter than the -time 1s window"},
		{[]string{"mixed", "-time", "1s", "-sample", "1s"}, "-sample 1s: must be shorter than the -time 1s window"},
		{[]string{"publish", "-warmup", "-1s"}, "-warmup -1s: must not be negative"},
		// A mistyped long run is refused, not run for ever.
		{[]string{"-rounds", "1000000"}, "-rounds 1000000: must be at most 100"},
		{[]string{"sweep", "-rounds", "101"}, "-rounds 101: must be at most 100"},
		{[]string{"-time", "3000h"}, "-time 3000h0m0s: must be at most 1h0m0s"},
		{[]string{"wal", "-time", "1h0m0.001s"}, "-time 1h0m0.001s: must be at most 1h0m0s"},
		{[]string{"mixed", "-time", "2h"}, "-time 2h0m0s: must be at most 1h0m0s"},
		{[]string{"sweep", "-time", "2h"}, "-time 2h0m0s: must be at most 1h0m0s"},
		{[]string{"probe", "-time", "2h"}, "-time 2h0m0s: must be at most 1h0m0s"},
		{[]string{"publish", "-probe-time", "2h"}, "-probe-time 2h0m0s: must be at most 1h0m0s"},
		{[]string{"publish", "-warmup", "100h"}, "-warmup 100h0m0s: must be at most 1h0m0s"},
		{[]string{"mixed", "-warmup", "2h"}, "-warmup 2h0m0s: must be at most 1h0m0s"},
		{[]string{"-dir", ""}, `-dir "": want a directory`},
		{[]string{"drain", "-dir", ""}, `-dir "": want a directory`},
		{[]string{"help", "extra"}, `unknown command "extra"`},
		{[]string{"help", "publish", "extra"}, `unexpected argument "extra"`},
	} {
		if holdsPastInt(tc.args) {
			// A 32-bit build: the number is refused as it is parsed,
			// before any bound is checked.
			tc.want = "is too large a"
		}
		if _, err := parseConfig(tc.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("walbench %q: error %v, want one saying %q", tc.args, err, tc.want)
			continue
		}
		dir, args := benchDir(t), tc.args
		if !slices.Contains(args, "-dir") && args[0] != "help" {
			args = append(slices.Clone(args), "-dir", dir)
		}
		res := runWith(t, context.Background(), nil, args...)
		if res.code != exitUsage || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("walbench %q: exit %d, stderr %q; want %d and %q", tc.args, res.code, res.stderr, exitUsage, tc.want)
		}
		assertDirEmpty(t, dir)
	}
}

// TestCPUProfileIsNotTheJSON: -cpuprofile and -json naming one file,
// through a symbolic link, are refused before anything is made, and the
// file is left as it was.
func TestCPUProfileIsNotTheJSON(t *testing.T) {
	root := t.TempDir()
	jsonFile, link := filepath.Join(root, "out.json"), filepath.Join(root, "link")
	if err := os.WriteFile(jsonFile, []byte("PRECIOUS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("out.json", link); err != nil {
		t.Fatal(err)
	}
	dir := benchDir(t)
	res := runWith(t, context.Background(), nil, "probe", "-time", "10ms", "-dir", dir, "-json", jsonFile, "-cpuprofile", link)
	if res.code != exitUsage || !strings.Contains(res.stderr, "the same file") {
		t.Errorf("exit %d, stderr %q; want %d and the clash named", res.code, res.stderr, exitUsage)
	}
	if b, err := os.ReadFile(jsonFile); err != nil || string(b) != "PRECIOUS\n" {
		t.Errorf("the file holds %q, %v; want it as it was", b, err)
	}
	assertDirEmpty(t, dir)
}

// TestCPUProfileIsNotTheJSONThroughADirLink: -json and -cpuprofile naming
// one new file, one through a symbolic link to its directory, are refused
// before anything is made: else the profile, renamed into place after the
// report, would replace it.
func TestCPUProfileIsNotTheJSONThroughADirLink(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	jsonFile, profile := filepath.Join(real, "out"), filepath.Join(link, "out")
	dir := benchDir(t)
	res := runWith(t, context.Background(), nil, "probe", "-time", "10ms", "-dir", dir, "-json", jsonFile, "-cpuprofile", profile)
	if res.code != exitUsage || !strings.Contains(res.stderr, "the same file") {
		t.Errorf("-json %s and -cpuprofile %s name one new file: exit %d, stderr %q; want %d and the clash named",
			jsonFile, profile, res.code, res.stderr, exitUsage)
	}
	assertDirEmpty(t, real)
	assertDirEmpty(t, dir)
}

// TestFlagErrorsAreRoots: a bad value is reported once, not again as
// the errors of the checks made from it.
func TestFlagErrorsAreRoots(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mixed", "-producers", "0"}, "-producers 0: must be at least 1"},
		{[]string{"mixed", "-producers", "5000"}, "-producers 5000: must be at most 1024 (each producer has latency histograms of its own)"},
		{[]string{"mixed", "-time", "1ns"}, "-time 1ns: must be at least 10ms"},
		{[]string{"mixed", "-time", "1ns", "-sample", "1ns"}, "-time 1ns: must be at least 10ms\n-sample 1ns: must be at least 10ms (oftener samples the ticker, not the queue)"},
	} {
		if _, err := parseConfig(tc.args, io.Discard, io.Discard); err == nil || err.Error() != tc.want {
			t.Errorf("walbench %q: error %q, want only %q", tc.args, err, tc.want)
		}
	}
}

// TestFlagBoundsAccepted: the bounds themselves are accepted.
func TestFlagBoundsAccepted(t *testing.T) {
	for _, args := range [][]string{
		{"drain", "-batch", "10000", "-consumers", "1024", "-size", "1048576"},
		{"publish", "-producers", "1024", "-size", "1048576", "-segment-bytes", "1GiB"},
		{"mixed", "-producers", "16", "-time", "5s", "-rate", "3.2,16000000"},
		{"mixed", "-size", "9"},
		{"publish", "-time", "10ms", "-probe-time", "10ms"},
		{"wal", "-time", "10ms", "-probe-time", "10ms"},
		{"mixed", "-time", "10ms", "-rate", "1600"},
		{"sweep", "-time", "10ms"},
		{"probe", "-time", "10ms"},
		{"mixed", "-time", "1000s", "-sample", "10ms"},
		{"publish", "-rounds", "100", "-time", "1h", "-warmup", "1h", "-probe-time", "1h"},
		{"probe", "-time", "1h"},
		{"drain", "-limit", "1h"},
		{"drain", "-limit", "10ms"},
		{"wal", "-size", "16318", "-segment-bytes", "16KiB"},
		{"help", "publish"},
	} {
		if _, err := parseConfig(args, io.Discard, io.Discard); err != nil && !errors.Is(err, flag.ErrHelp) {
			t.Errorf("walbench %q: %v", args, err)
		}
	}
	var b strings.Builder
	if _, err := parseConfig([]string{"help", "drain"}, &b, io.Discard); !errors.Is(err, flag.ErrHelp) || !strings.Contains(b.String(), "usage: walbench drain") || !strings.Contains(b.String(), "-batch") {
		t.Errorf("help drain: %v, %q; want drain's flags", err, b.String())
	}
}

// TestWALLargestRecord appends records of the largest size the flags let
// through for the smallest segments: the log takes them.
func TestWALLargestRecord(t *testing.T) {
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runOK(t, "wal", "-dir", dir, "-json", jsonFile, "-producers", "1", "-segments", "new", "-size", "16318", "-segment-bytes", "16KiB",
		"-time", "30ms", "-warmup", "0", "-probe-time", "0")
	assertDirEmpty(t, dir)
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if len(rep.Rows) != 1 || rep.Rows[0].Ops == 0 || rep.Rows[0].Rotations == 0 {
		t.Errorf("rows %+v; want one, with appends and rotations", rep.Rows)
	}
}

// TestHelpOnACopiedBinary: a binary copied to another machine has no go
// doc, so walbench -h names every command (it is what a bare walbench
// runs), and walbench help doc prints the manual: the columns, the
// recommendation's reading and the -json schema.
func TestHelpOnACopiedBinary(t *testing.T) {
	res := runWith(t, context.Background(), nil, "-h")
	for _, c := range commands {
		if !strings.Contains(res.stdout, "  "+c.name+" ") {
			t.Errorf("walbench -h does not list %s:\n%s", c.name, res.stdout)
		}
	}
	if !strings.Contains(res.stdout, "walbench help doc") {
		t.Errorf("walbench -h does not point to the manual:\n%s", res.stdout)
	}
	res = runWith(t, context.Background(), nil, "help", "doc")
	if res.code != exitOK || res.stderr != "" {
		t.Fatalf("walbench help doc: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, want := range []string{"Command walbench tells an operator", "# SCHEMA", `"drain_msgs_per_sec"`, "# Recommendation"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("walbench help doc lacks %q", want)
		}
	}
	if strings.Contains(res.stdout, "package main") || strings.Contains(res.stdout, "\n// ") {
		t.Errorf("walbench help doc prints source, not text:\n%s", res.stdout[:200])
	}
}

// TestAPrefillLargerThanTheDiskIsRefused: a drain or reopen whose store
// would not fit in -dir's free space is refused before anything is made
// there: aimed at a production disk, a mistyped -messages would fill it.
func TestAPrefillLargerThanTheDiskIsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"drain", "-messages", hugeCount},
		{"reopen", "-messages", hugeCount, "-size", "1000"},
	} {
		dir := benchDir(t)
		res := runWith(t, context.Background(), nil, append(args, "-dir", dir)...)
		if res.code != exitError || !strings.Contains(res.stderr, args[0]+" -messages "+hugeCount) || !strings.Contains(res.stderr, "GiB free: lower -messages or -size") {
			t.Errorf("walbench %q: exit %d, stderr %q; want %d and the room it needs", args, res.code, res.stderr, exitError)
		}
		assertDirEmpty(t, dir)
	}
}

// TestCheckRoomRefusesAPrefillWhoseSizeOverflows: a -messages so large
// that the store's bytes overflow 64 bits (2^60 messages of 1 KiB wrapped
// around to a few segments) is refused as not fitting on any disk, naming
// -messages: it must not slip past the free-space check that refuses a
// smaller mistyped -messages. (checkRoom is called alone: a run it let go
// would fill the disk.)
func TestCheckRoomRefusesAPrefillWhoseSizeOverflows(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("a 32-bit int holds no -messages whose store's bytes overflow 64 bits: such a -messages is refused as too large a number")
	}
	for _, args := range [][]string{
		{"drain", "-messages", "1152921504606846976"}, // 2^60
		{"reopen", "-messages", "1152921504606846976"},
		{"reopen", "-messages", "9223372036854775807", "-size", "1"},
		{"full", "-rounds", "3"}, // its drains and reopen fit: the overflowing one is named, not these
	} {
		cfg, err := parseConfig(append(args, "-dir", t.TempDir()), io.Discard, io.Discard)
		if err != nil {
			t.Fatalf("walbench %q: %v", args, err)
		}
		err = checkRoom(cfg, &env{})
		if args[0] == "full" {
			if err != nil && strings.Contains(err.Error(), "more than any disk has") {
				t.Errorf("walbench %q: %v; want no overflow", args, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), args[0]+" -messages "+args[2]) || !strings.Contains(err.Error(), "more than any disk has: lower -messages or -size") {
			t.Errorf("walbench %q: checkRoom says %v; want -messages named as too large for any disk", args, err)
		}
	}
	// A store far larger than any disk, that still counts in 64 bits, is
	// compared with the free space; one whose size would pass 2^62 is not,
	// however small its messages or large its segments. (A 32-bit int
	// holds no such count of messages.)
	if math.MaxInt == math.MaxInt32 {
		return
	}
	tera, huge := int64(1e12), int64(1)<<53 // variables: as constants they would not compile for 32-bit
	if n, ok := storeBytes(int(tera), 1024, 0); !ok || n < tera*1024 {
		t.Errorf("storeBytes(10^12 messages of 1 KiB) = %d, %v; want its size, more than their payloads", n, ok)
	}
	for _, tc := range []struct {
		messages, size int
		seg            int64
	}{{math.MaxInt, 1, 0}, {math.MaxInt / 64, 1, 16 << 10}, {int(huge), 1 << 20, 1 << 30}} {
		if n, ok := storeBytes(tc.messages, tc.size, tc.seg); ok {
			t.Errorf("storeBytes(%d messages of %d B, %d-byte segments) = %d, %v; want an overflow", tc.messages, tc.size, tc.seg, n, ok)
		}
	}
}

// TestSegmentBytesRefusesTheDefaultGivenTwice: -segment-bytes 0 is the
// default segment size, 64 MiB, so a sweep's list with both would make
// the same grid twice and measure every point of it twice: it is refused
// as a value given twice, naming the flag and both spellings. 0 beside
// another size is a list of two.
func TestSegmentBytesRefusesTheDefaultGivenTwice(t *testing.T) {
	for _, list := range []string{"0,64MiB", "64MiB,0", "4MiB,67108864,0"} {
		_, err := parseConfig([]string{"sweep", "-segment-bytes", list}, io.Discard, io.Discard)
		items := strings.Split(list, ",")
		var zero, other string
		for _, it := range items {
			if it == "0" {
				zero = `"0"`
			} else if it != "4MiB" {
				other = strconv.Quote(it)
			}
		}
		if err == nil || !strings.Contains(err.Error(), "-segment-bytes") || !strings.Contains(err.Error(), zero) || !strings.Contains(err.Error(), other) ||
			!strings.Contains(err.Error(), "given twice") {
			t.Errorf("sweep -segment-bytes %s: %v; want it refused, naming the flag, %s and %s", list, err, zero, other)
		}
	}
	c, err := parseConfig([]string{"sweep", "-segment-bytes", "0,4MiB"}, io.Discard, io.Discard)
	if err != nil || !slices.Equal(c.sweep.segments, []int64{0, 4 << 20}) {
		t.Errorf("sweep -segment-bytes 0,4MiB: %v, %v; want the default and 4 MiB", c.sweep.segments, err)
	}
}

// TestMixedDefaultSampleFitsTheWindow: without -sample, a mixed window
// shorter than twice the default 250ms is sampled at half its length (at
// least 10ms, so that a window of 10ms takes no sample), so that its
// backlog is sampled in it, not refused for a flag the command line did
// not give.
func TestMixedDefaultSampleFitsTheWindow(t *testing.T) {
	for _, tc := range []struct {
		time string
		want time.Duration
	}{
		{"5s", 250 * time.Millisecond},
		{"500ms", 250 * time.Millisecond},
		{"100ms", 50 * time.Millisecond},
		{"10ms", 10 * time.Millisecond},
	} {
		c, err := parseConfig([]string{"mixed", "-time", tc.time, "-rate", "1e5"}, io.Discard, io.Discard)
		if err != nil || c.mixed.sample != tc.want {
			t.Errorf("mixed -time %s: -sample %v, error %v; want %v", tc.time, c.mixed.sample, err, tc.want)
		}
	}
}

// TestSizeZeroIsRefusedInOneWording: -size 0 is refused in the same words
// by every command, whether its -size takes a list or one value (a list
// refused it as "not a positive count", in the flag package's words,
// followed by the usage; mixed said what it "needs").
func TestSizeZeroIsRefusedInOneWording(t *testing.T) {
	for _, cmd := range []string{"profile", "publish", "drain", "reopen", "sweep", "wal", "probe"} {
		res := runWith(t, context.Background(), nil, cmd, "-size", "0")
		if want := "walbench: -size 0: must be at least 1\n"; res.code != exitUsage || res.stderr != want {
			t.Errorf("walbench %s -size 0: exit %d, stderr %q; want %d and %q", cmd, res.code, res.stderr, exitUsage, want)
		}
	}
	res := runWith(t, context.Background(), nil, "mixed", "-size", "0")
	if want := fmt.Sprintf("walbench: -size 0: must be at least %d (", mixedHeaderBytes); res.code != exitUsage || !strings.HasPrefix(res.stderr, want) {
		t.Errorf("walbench mixed -size 0: exit %d, stderr %q; want %d and %q", res.code, res.stderr, exitUsage, want)
	}
}

// TestTheManualStatesAHistogramsSize: the manual gives the memory of a
// producer's latency histogram, which bounds -producers, as it is.
func TestTheManualStatesAHistogramsSize(t *testing.T) {
	n := newLatencies().ByteSize()
	want := fmt.Sprintf("%d,%03d bytes", n/1000, n%1000)
	if !strings.Contains(docSource, want) {
		t.Errorf("the manual does not give a latency histogram's size as %s", want)
	}
}

// TestAnEmptyFileNameIsRefused: -json "", -cpuprofile "" and report's
// -bench "" name no file. Taken for the flag left out, they would let a
// run of minutes end with no report, no profile, or BENCH.md as it was
// (as -json "$OUT" does with OUT unset): each is refused, naming the
// flag, before anything is measured.
func TestAnEmptyFileNameIsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"probe", "-time", "10ms", "-json", ""}, `-json "": want a file name`},
		{[]string{"probe", "-time", "10ms", "-cpuprofile", ""}, `-cpuprofile "": want a file name`},
		{[]string{"report", "-in", "testdata/bench.json", "-bench", ""}, `-bench "": want the markdown file`},
	} {
		dir, args := benchDir(t), tc.args
		if args[0] != "report" {
			args = append(slices.Clone(args), "-dir", dir)
		}
		res := runWith(t, context.Background(), nil, args...)
		if res.code != exitUsage || !strings.Contains(res.stderr, tc.want) || res.stdout != "" {
			t.Errorf("walbench %q: exit %d, stdout %q, stderr %q; want %d, nothing on stdout, and %q", tc.args, res.code, res.stdout, res.stderr, exitUsage, tc.want)
		}
		assertDirEmpty(t, dir)
	}
}

// TestADurationFlagSaysWhatIsWrongWithItsValue: a duration given without
// its unit (-time 3, read as seconds by many tools) or not a duration at
// all is refused in words that say so, naming the flag and the value,
// not with "parse error" alone.
func TestADurationFlagSaysWhatIsWrongWithItsValue(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-time", "3"}, `invalid value "3" for flag -time: "3" has no unit`},
		{[]string{"probe", "-time", "1.5"}, `invalid value "1.5" for flag -time: "1.5" has no unit`},
		{[]string{"publish", "-probe-time", "2"}, `invalid value "2" for flag -probe-time: "2" has no unit`},
		{[]string{"mixed", "-sample", "250"}, `invalid value "250" for flag -sample: "250" has no unit`},
		{[]string{"drain", "-limit", "ten"}, `invalid value "ten" for flag -limit: "ten" is not a duration`},
		{[]string{"sweep", "-warmup", "1x"}, `invalid value "1x" for flag -warmup: "1x" is not a duration`},
	} {
		res := runWith(t, context.Background(), nil, tc.args...)
		if res.code != exitUsage || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("walbench %q: exit %d, stderr %q; want %d and %q", tc.args, res.code, res.stderr, exitUsage, tc.want)
		}
	}
	// 0 needs no unit: -probe-time 0 is no probe.
	if c, err := parseConfig([]string{"publish", "-probe-time", "0"}, io.Discard, io.Discard); err != nil || c.probeTime != 0 {
		t.Errorf("publish -probe-time 0: %v, %v; want no probe", c.probeTime, err)
	}
}

// TestACommandAfterTheFlagsIsSaidToGoFirst: walbench -dir /data probe
// reads -dir as the profile's and probe as an argument; the error says
// that the command goes first, not to read the profile's flags.
func TestACommandAfterTheFlagsIsSaidToGoFirst(t *testing.T) {
	res := runWith(t, context.Background(), nil, "-rounds", "3", "probe", "-time", "10ms")
	want := `"probe" is a command: give it first (walbench probe -rounds 3 -time 10ms)`
	if res.code != exitUsage || !strings.Contains(res.stderr, want) || strings.Contains(res.stderr, "walbench profile -h") {
		t.Errorf("exit %d, stderr %q; want %d and %q", res.code, res.stderr, exitUsage, want)
	}
	// An argument that is no command is only unexpected.
	res = runWith(t, context.Background(), nil, "publish", "-rounds", "3", "extra")
	if want := `unexpected argument "extra" (see walbench publish -h)`; res.code != exitUsage || !strings.Contains(res.stderr, want) {
		t.Errorf("exit %d, stderr %q; want %d and %q", res.code, res.stderr, exitUsage, want)
	}
}

// TestAPrefillIsBoundedWhenTheFreeSpaceIsUnknown: where the free space of
// -dir cannot be read, a mistyped -messages cannot be told from one that
// fits, and would fill the disk: a prefilled store larger than the
// defaults make is refused, naming -messages and why. The defaults still
// run, and a -dir that is not there is told so by -dir's own check, not
// as a free space unknown. (checkRoom is called alone: a run it let go
// would fill the disk.)
func TestAPrefillIsBoundedWhenTheFreeSpaceIsUnknown(t *testing.T) {
	unknown := &env{freeSpace: func(string) (int64, error) { return 0, fmt.Errorf("statfs: %w", syscall.ENOSYS) }}
	dir := t.TempDir()
	for _, tc := range []struct {
		args    []string
		e       *env
		refused bool
	}{
		{[]string{"drain", "-messages", hugeCount}, unknown, true},
		{[]string{"reopen", "-messages", hugeCount, "-size", "1000"}, unknown, true},
		{[]string{"drain", "-messages", "100000", "-size", "16384"}, unknown, true},
		{[]string{"full", "-rounds", "3"}, unknown, false},
		{[]string{"drain", "-messages", "100000", "-size", "1024"}, unknown, false},
		{[]string{"reopen"}, unknown, false},
		// The file system's own answer for a -dir that is not there.
		{[]string{"drain", "-messages", hugeCount, "-dir", filepath.Join(dir, "missing")}, &env{}, false},
	} {
		args := tc.args
		if !slices.Contains(args, "-dir") {
			args = append(slices.Clone(args), "-dir", dir)
		}
		cfg, err := parseConfig(args, io.Discard, io.Discard)
		if err != nil {
			t.Fatalf("walbench %q: %v", args, err)
		}
		err = checkRoom(cfg, tc.e)
		if !tc.refused {
			if err != nil {
				t.Errorf("walbench %q: checkRoom says %v; want the run let go", args, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), args[0]+" -messages "+args[2]) ||
			!strings.Contains(err.Error(), "the free space of "+dir+" cannot be read (statfs: function not implemented)") ||
			!strings.Contains(err.Error(), "lower -messages or -size") {
			t.Errorf("walbench %q: checkRoom says %v; want -messages named, and the free space unknown", args, err)
		}
	}
}

// TestAOneNumberFlagSaysWhatItWants: a flag that takes one whole number
// (-rounds, the profile's -size, -messages, mixed's -producers, ...)
// refuses a value that is not one by saying what it wants, as the flags
// that take lists do, not with the flag package's "parse error": a list
// given to it, a number with a fraction or an exponent, one too large to
// count.
func TestAOneNumberFlagSaysWhatItWants(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-size", "1024,16384"}, `invalid value "1024,16384" for flag -size: one whole number, not a list`},
		{[]string{"-rounds", "x"}, `invalid value "x" for flag -rounds: "x" is not a whole number`},
		{[]string{"-messages", "1e5"}, `invalid value "1e5" for flag -messages: "1e5" is not a whole number`},
		{[]string{"drain", "-messages", "99999999999999999999"}, `invalid value "99999999999999999999" for flag -messages: "99999999999999999999" is too large a number`},
		{[]string{"mixed", "-producers", "2.5"}, `invalid value "2.5" for flag -producers: "2.5" is not a whole number`},
		{[]string{"sweep", "-consumers", "1,4"}, `invalid value "1,4" for flag -consumers: one whole number, not a list`},
		{[]string{"reopen", "-size", ""}, `invalid value "" for flag -size: "" is not a whole number`},
	} {
		_, err := parseConfig(tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("walbench %q: %v; want %q", tc.args, err, tc.want)
		}
	}
	// Help still names each such flag's value and its default.
	var b strings.Builder
	if _, err := parseConfig([]string{"mixed", "-h"}, &b, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	for _, want := range []string{"-producers N", "(default 16)", "-consumers N", "-batch N", "-size bytes", "(default 1024)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("walbench mixed -h does not say %q:\n%s", want, b.String())
		}
	}
}

// TestSegmentBytesHelpSaysTheDefaultSize: -segment-bytes 0 means the
// store's default segment size, so the help must not say "(default 0)",
// which reads as segments of no bytes: each command that takes one size
// says the size its stores (or logs) then use, and still that 0 means
// the default.
func TestSegmentBytesHelpSaysTheDefaultSize(t *testing.T) {
	def := "(default " + formatBytesFlag(effectiveSegmentBytes(0)) + ")"
	for _, command := range []string{"profile", "publish", "drain", "mixed", "reopen", "wal"} {
		owner := "store"
		if command == "wal" {
			owner = "log"
		}
		var b strings.Builder
		if _, err := parseConfig([]string{command, "-h"}, &b, io.Discard); !errors.Is(err, flag.ErrHelp) {
			t.Fatal(err)
		}
		_, after, _ := strings.Cut(b.String(), "  -segment-bytes ")
		line, usage, _ := strings.Cut(after, "\n")
		usage, _, _ = strings.Cut(usage, "\n")
		if line != "size" || !strings.Contains(usage, "(0: the "+owner+"'s default)") || !strings.HasSuffix(usage, def) {
			t.Errorf("walbench %s -h says of -segment-bytes:\n  -segment-bytes %s\n%s\nwant its value named size, 0 said to be the %s's default, and %s", command, line, usage, owner, def)
		}
	}
	if c, err := parseConfig([]string{"publish"}, io.Discard, io.Discard); err != nil || c.publish.segmentBytes != 0 {
		t.Errorf("publish with -segment-bytes left out: segment bytes %d, %v; want 0, the store's default", c.publish.segmentBytes, err)
	}
}
