package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/walbroker/walbroker/broker"
)

// TestMemoryEstimateGrows: every workload's estimate grows with what it
// holds in memory: its producers (or consumers) and its message size.
func TestMemoryEstimateGrows(t *testing.T) {
	sizes := []int{1, 1024, 64 << 10, 1 << 20}
	counts := []int{1, 16, 256, 1024}
	for _, tc := range []struct {
		name string
		load func(n, size int) sizedLoad
	}{
		{"publish", func(n, size int) sizedLoad { return publishLoad{producers: n, size: size} }},
		{"wal", func(n, size int) sizedLoad { return walLoad{appenders: n, recordBytes: size} }},
		{"mixed", func(n, size int) sizedLoad { return mixedLoad{producers: n, consumers: 16, batch: 16, size: size} }},
		{"drain consume", func(n, size int) sizedLoad {
			return drainLoad{method: drainConsume, consumers: n, batch: 64, messages: 100_000, size: size}
		}},
		{"drain receive-ack", func(n, size int) sizedLoad {
			return drainLoad{method: drainReceiveAck, consumers: n, batch: 64, messages: 100_000, size: size}
		}},
		{"sweep", func(n, size int) sizedLoad {
			return sweepPointLoad{sweepLoad{consumers: 64, batch: 64}, sweepPoint{producers: n, size: size}}
		}},
	} {
		for i, n := range counts {
			for j, size := range sizes {
				got, _ := tc.load(n, size).memory()
				if i > 0 {
					if fewer, _ := tc.load(counts[i-1], size).memory(); got <= fewer {
						t.Errorf("%s: %d × %d B: estimate %d, not above %d for %d", tc.name, n, size, got, fewer, counts[i-1])
					}
				}
				if j > 0 {
					if smaller, _ := tc.load(n, sizes[j-1]).memory(); got <= smaller {
						t.Errorf("%s: %d × %d B: estimate %d, not above %d for %d B", tc.name, n, size, got, smaller, sizes[j-1])
					}
				}
			}
		}
	}
	for j := 1; j < len(sizes); j++ {
		a, _ := reopenLoad{messages: 1000, size: sizes[j-1]}.memory()
		b, _ := reopenLoad{messages: 1000, size: sizes[j]}.memory()
		if b <= a {
			t.Errorf("reopen: %d B: estimate %d, not above %d for %d B", sizes[j], b, a, sizes[j-1])
		}
	}
	// The figure that made the check necessary: 1,024 producers of 1 MiB
	// took 4.44 GB at its peak.
	if got, _ := (publishLoad{producers: 1024, size: 1 << 20}).memory(); got < 4_440_000_000 || got > 6<<30 {
		t.Errorf("publish, 1024 × 1 MiB: estimate %s, want above the 4.44 GB measured and not far", formatMemory(got))
	}
}

// sweepPointLoad is point p of a sweep as a sizedLoad.
type sweepPointLoad struct {
	l sweepLoad
	p sweepPoint
}

func (s sweepPointLoad) String() string                     { return s.p.String() }
func (s sweepPointLoad) memory() (need int64, lower string) { return s.l.memory(s.p) }

// availableIs is an env whose available memory is n bytes.
func availableIs(n int64) *env {
	return &env{memAvailable: func() (int64, error) { return n, nil }}
}

// TestMemoryRefused: a workload whose estimate is above 80% of the memory
// available is refused before anything is made, with an error naming it,
// the estimate, what is available and what to lower; -force-memory lets
// it run.
func TestMemoryRefused(t *testing.T) {
	need, _ := publishLoad{producers: 4, size: 64 << 10}.memory()
	available := int64(float64(need) / memoryShare * 0.9) // need is above 80% of it
	for _, tc := range []struct {
		name  string
		args  []string
		names []string // in the error
	}{
		{"publish", []string{"publish", "-producers", "1,4", "-size", "65536", "-time", "20ms", "-warmup", "0", "-probe-time", "0"},
			[]string{"publish, 4 producers, 65536 B", "lower -producers or -size"}},
		{"wal", []string{"wal", "-producers", "4", "-size", "65536", "-time", "20ms", "-warmup", "0", "-probe-time", "0", "-segments", "new"},
			[]string{"wal append, 4 appenders, 65536 B", "lower -producers or -size"}},
		{"drain", []string{"drain", "-consumers", "1024", "-batch", "1", "-messages", "2000", "-size", "65536", "-sync", "none"},
			[]string{"drain via Consume, batch 1, concurrency 1024", "lower -consumers or -size"}},
		{"mixed", []string{"mixed", "-producers", "16", "-size", "65536", "-rate", "1600", "-time", "20ms", "-warmup", "0"},
			[]string{"mixed, 16 producers", "lower -producers, -consumers or -size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := benchDir(t)
			r := runWith(t, context.Background(), availableIs(available), append(tc.args, "-dir", dir)...)
			if r.code != exitError {
				t.Fatalf("exit %d, want %d: a workload above the memory available is refused", r.code, exitError)
			}
			want := append(tc.names, "needs about", formatMemory(available)+" is available", "-force-memory")
			for _, w := range want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not say %q", r.stderr, w)
				}
			}
			if r.stdout != "" {
				t.Errorf("stdout %q: nothing was to be measured", r.stdout)
			}
			assertDirEmpty(t, dir)
		})
	}

	t.Run("force", func(t *testing.T) {
		dir := benchDir(t)
		out := jsonPath(t)
		r := runWith(t, context.Background(), availableIs(available),
			"publish", "-producers", "1,4", "-size", "65536", "-time", "20ms", "-warmup", "0", "-probe-time", "0", "-force-memory", "-dir", dir, "-json", out)
		if r.code != exitOK {
			t.Fatalf("exit %d with -force-memory, want %d", r.code, exitOK)
		}
		if rep := readReport(t, out); len(rep.Rows) != 2 {
			t.Errorf("%d rows, want both workloads measured", len(rep.Rows))
		}
	})

	t.Run("fits", func(t *testing.T) {
		dir := benchDir(t)
		r := runWith(t, context.Background(), availableIs(need*2),
			"publish", "-producers", "1,4", "-size", "65536", "-time", "20ms", "-warmup", "0", "-probe-time", "0", "-dir", dir)
		if r.code != exitOK {
			t.Fatalf("exit %d with twice the estimate available, want %d", r.code, exitOK)
		}
	})

	t.Run("unknown", func(t *testing.T) {
		// Where the available memory cannot be told (macOS), the run goes.
		dir := benchDir(t)
		e := &env{memAvailable: func() (int64, error) { return 0, errors.ErrUnsupported }}
		if r := runWith(t, context.Background(), e,
			"publish", "-producers", "4", "-size", "65536", "-time", "20ms", "-warmup", "0", "-probe-time", "0", "-dir", dir); r.code != exitOK {
			t.Fatalf("exit %d with the available memory unknown, want %d", r.code, exitOK)
		}
	})
}

// TestMemorySweepSkips: a sweep skips the points whose estimate does not
// fit, says so, and lists them as not measured; the others are measured.
// -force-memory measures them all.
func TestMemorySweepSkips(t *testing.T) {
	l := sweepLoad{consumers: 4, batch: 8}
	big, _ := l.memory(sweepPoint{producers: 4, size: 65536})
	next, _ := l.memory(sweepPoint{producers: 1, size: 65536})
	available := int64(float64(big+next) / 2 / memoryShare) // between the two
	args := []string{"sweep", "-producers", "1,4", "-size", "100,65536", "-segment-bytes", "4MiB", "-sync", "all",
		"-time", "20ms", "-warmup", "0", "-probe-time", "0", "-consumers", "4", "-batch", "8"}

	dir, out := benchDir(t), jsonPath(t)
	r := runWith(t, context.Background(), availableIs(available), append(args, "-dir", dir, "-json", out)...)
	if r.code != exitOK {
		t.Fatalf("exit %d, want %d: a point skipped does not fail the sweep", r.code, exitOK)
	}
	rep := readReport(t, out)
	if len(rep.Rows) != 3 {
		t.Errorf("%d rows, want the 3 points that fit", len(rep.Rows))
	}
	for _, row := range rep.Rows {
		if row.Producers == 4 && row.Size == 65536 {
			t.Errorf("%s measured, above the memory available", row.Workload)
		}
	}
	point := sweepPoint{producers: 4, size: 65536, segmentBytes: 4 << 20, sync: broker.SyncAll}
	if want := fmt.Sprintf("sweep, %v: skipped, not measured", point); !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "lower -producers or -size") {
		t.Errorf("stderr does not say %q and what to lower:\n%s", want, r.stderr)
	}
	rec := rep.Recommendation
	if rec == nil {
		t.Fatal("no recommendation from the points measured")
	}
	want := Setting{Sync: "all", SegmentBytes: 4 << 20, Producers: 4, Size: 65536, MemoryBytes: big, AvailableBytes: available}
	if len(rec.NotMeasured) != 1 || rec.NotMeasured[0] != want {
		t.Errorf("not measured: %+v, want only %+v", rec.NotMeasured, want)
	}
	if !strings.Contains(r.stdout, "4 producers × 65536 B, sync=all, 4 MiB segments") {
		t.Errorf("the recommendation does not name the point skipped:\n%s", r.stdout)
	}

	// Every point skipped: nothing measured is a failure, said as such.
	dir = benchDir(t)
	r = runWith(t, context.Background(), availableIs(1<<20), append(args, "-dir", dir)...)
	if r.code != exitError || !strings.Contains(r.stderr, "every point skipped") || strings.Count(r.stderr, "skipped, not measured") != 4 {
		t.Errorf("exit %d, stderr %q; want %d, each of the 4 points skipped and the sweep failed for it", r.code, r.stderr, exitError)
	}
	assertDirEmpty(t, dir)

	dir, out = benchDir(t), jsonPath(t)
	r = runWith(t, context.Background(), availableIs(available), append(args, "-force-memory", "-dir", dir, "-json", out)...)
	if r.code != exitOK {
		t.Fatalf("exit %d with -force-memory, want %d", r.code, exitOK)
	}
	if rep := readReport(t, out); len(rep.Rows) != 4 || rep.Recommendation == nil || len(rep.Recommendation.NotMeasured) != 0 {
		t.Errorf("with -force-memory: %d rows, recommendation %+v; want the 4 points measured, none listed as not", len(rep.Rows), rep.Recommendation)
	}
}

// TestSweepPointSkippedInOneRoundIsSummarizedOverTheOthers: the memory
// available changes between rounds, so a sweep point may be skipped in one
// round and measured in another. Its row then summarizes the rounds that
// measured it, says so ("1 of 2 rounds", and a note of the round skipped),
// and the rows after it keep to their own points; the recommendation
// compared it, and does not list it as not measured.
func TestSweepPointSkippedInOneRoundIsSummarizedOverTheOthers(t *testing.T) {
	var calls atomic.Int64
	e := &env{memAvailable: func() (int64, error) {
		if calls.Add(1) == 1 {
			return 1, nil // the first point of round 1 does not fit
		}
		return 1 << 40, nil
	}}
	dir, out := benchDir(t), jsonPath(t)
	r := runWith(t, context.Background(), e, "sweep", "-rounds", "2", "-producers", "1", "-size", "100,200",
		"-segment-bytes", "4MiB", "-sync", "all", "-time", "10ms", "-warmup", "0", "-probe-time", "0",
		"-consumers", "1", "-batch", "8", "-dir", dir, "-json", out)
	if r.code != exitOK {
		t.Fatalf("exit %d", r.code)
	}
	rep := readReport(t, out)
	skipped, other := "sweep, 1 producer, 100 B, 4 MiB segments, sync=all", "sweep, 1 producer, 200 B, 4 MiB segments, sync=all"
	var names []string
	for _, row := range rep.Rows {
		names = append(names, row.Workload)
		var rounds []int
		for _, pr := range row.PerRound {
			if pr.Workload != row.Workload || pr.Size != row.Size {
				t.Errorf("row %q summarizes round %d of another point, %q", row.Workload, pr.Round, pr.Workload)
			}
			rounds = append(rounds, pr.Round)
		}
		switch row.Workload {
		case skipped:
			if row.Rounds != 1 || fmt.Sprint(rounds) != "[2]" || !slices.ContainsFunc(row.Notes, func(n string) bool { return strings.HasPrefix(n, "skipped in 1 of 2 rounds") }) {
				t.Errorf("%s: rounds %d %v, notes %q; want round 2 alone, and a note of the round skipped", row.Workload, row.Rounds, rounds, row.Notes)
			}
		case other:
			if row.Rounds != 2 || fmt.Sprint(rounds) != "[1 2]" || len(row.Notes) > 0 && strings.Contains(strings.Join(row.Notes, ";"), "skipped") {
				t.Errorf("%s: rounds %d %v, notes %q; want both rounds, none skipped", row.Workload, row.Rounds, rounds, row.Notes)
			}
		}
	}
	if !slices.Equal(names, []string{skipped, other}) {
		t.Errorf("rows %q, want %q and %q, in the order they ran", names, skipped, other)
	}
	if !strings.Contains(r.stdout, skipped+" (1 of 2 rounds)") {
		t.Errorf("the table does not say the point skipped once was measured in 1 of 2 rounds:\n%s", r.stdout)
	}
	if rec := rep.Recommendation; rec == nil || len(rec.NotMeasured) != 0 {
		t.Errorf("recommendation %+v; want one, with nothing listed as not measured", rec)
	}
}

// TestAvailableMemoryParsed: MemAvailable is read from /proc/meminfo's
// text, and a cgroup's limit, less its usage but its inactive page cache,
// bounds it.
func TestAvailableMemoryParsed(t *testing.T) {
	meminfo := "MemTotal:       24683664 kB\nMemFree:        21856248 kB\nMemAvailable:   23232316 kB\n"
	if got, err := memInfoAvailable(meminfo); err != nil || got != 23232316<<10 {
		t.Errorf("memInfoAvailable = %d, %v; want %d", got, err, int64(23232316)<<10)
	}
	if _, err := memInfoAvailable("MemTotal: 1 kB\n"); err == nil {
		t.Error("memInfoAvailable without MemAvailable: no error")
	}

	for _, tc := range []struct {
		name  string
		files map[string]string
		room  int64
		ok    bool
	}{
		{"v2", map[string]string{
			"/sys/fs/cgroup/memory.max": "2147483648\n", "/sys/fs/cgroup/memory.current": "1073741824\n",
			"/sys/fs/cgroup/memory.stat": "anon 1\ninactive_file 536870912\nactive_file 2\n",
		}, 1610612736, true},
		{"v2 no limit", map[string]string{"/sys/fs/cgroup/memory.max": "max\n", "/sys/fs/cgroup/memory.current": "1\n"}, 0, false},
		{"v1", map[string]string{
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n", "/sys/fs/cgroup/memory/memory.usage_in_bytes": "805306368\n",
			"/sys/fs/cgroup/memory/memory.stat": "cache 1\ntotal_inactive_file 268435456\n",
		}, 536870912, true},
		{"v1 no limit", map[string]string{
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n", "/sys/fs/cgroup/memory/memory.usage_in_bytes": "1\n",
		}, 0, false},
		{"over", map[string]string{"/sys/fs/cgroup/memory.max": "100\n", "/sys/fs/cgroup/memory.current": "200\n"}, 0, true},
		{"none", map[string]string{}, 0, false},
	} {
		room, ok := cgroupRoom(fakeFiles(tc.files))
		if room != tc.room || ok != tc.ok {
			t.Errorf("%s: cgroupRoom = %d, %v; want %d, %v", tc.name, room, ok, tc.room, tc.ok)
		}
	}
}

// TestCgroupRoomOfTheRunsOwnCgroup: the limit that bounds the run is that
// of its own cgroup, as /proc/self/cgroup names it, or of one above it,
// not only the one at the top of /sys/fs/cgroup: a run in a systemd unit
// with MemoryMax, or in a nested v1 memory cgroup, is killed at that
// unit's limit. The closest room of the cgroup and its ancestors counts;
// where the cgroup is not found under the mount (a container's mount is
// its own cgroup), the mount's top is the run's.
func TestCgroupRoomOfTheRunsOwnCgroup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		room  int64
		ok    bool
	}{
		{"v2 unit", map[string]string{
			"/proc/self/cgroup": "0::/system.slice/walbench.service\n",
			"/sys/fs/cgroup/system.slice/walbench.service/memory.max":     "1000\n",
			"/sys/fs/cgroup/system.slice/walbench.service/memory.current": "400\n",
			"/sys/fs/cgroup/system.slice/memory.max":                      "max\n",
			"/sys/fs/cgroup/system.slice/memory.current":                  "5000\n",
		}, 600, true},
		{"v2 slice above", map[string]string{
			"/proc/self/cgroup": "0::/user.slice/session-1.scope\n",
			"/sys/fs/cgroup/user.slice/session-1.scope/memory.max":     "max\n",
			"/sys/fs/cgroup/user.slice/session-1.scope/memory.current": "400\n",
			"/sys/fs/cgroup/user.slice/memory.max":                     "2000\n",
			"/sys/fs/cgroup/user.slice/memory.current":                 "1500\n",
			"/sys/fs/cgroup/user.slice/session-1.scope/memory.stat":    "inactive_file 100\n",
		}, 500, true},
		{"v2 the closest of two limits", map[string]string{
			"/proc/self/cgroup":                 "0::/a/b\n",
			"/sys/fs/cgroup/a/b/memory.max":     "10000\n",
			"/sys/fs/cgroup/a/b/memory.current": "1000\n",
			"/sys/fs/cgroup/a/memory.max":       "3000\n",
			"/sys/fs/cgroup/a/memory.current":   "2500\n",
		}, 500, true},
		{"v1 nested", map[string]string{
			"/proc/self/cgroup": "12:pids:/\n4:memory:/process_api/84a6\n0::/\n",
			"/sys/fs/cgroup/memory/process_api/84a6/memory.limit_in_bytes": "1073741824\n",
			"/sys/fs/cgroup/memory/process_api/84a6/memory.usage_in_bytes": "805306368\n",
			"/sys/fs/cgroup/memory/process_api/84a6/memory.stat":           "cache 1\ntotal_inactive_file 268435456\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes":                  "9223372036854771712\n",
			"/sys/fs/cgroup/memory/memory.usage_in_bytes":                  "9999999999\n",
		}, 536870912, true},
		{"container, its cgroup the mount's top", map[string]string{
			"/proc/self/cgroup":             "0::/docker/0123abcd\n",
			"/sys/fs/cgroup/memory.max":     "2000\n",
			"/sys/fs/cgroup/memory.current": "500\n",
		}, 1500, true},
		{"no limit on the way up", map[string]string{
			"/proc/self/cgroup":               "0::/a\n",
			"/sys/fs/cgroup/a/memory.max":     "max\n",
			"/sys/fs/cgroup/a/memory.current": "1\n",
		}, 0, false},
	} {
		room, ok := cgroupRoom(fakeFiles(tc.files))
		if room != tc.room || ok != tc.ok {
			t.Errorf("%s: cgroupRoom = %d, %v; want %d, %v", tc.name, room, ok, tc.room, tc.ok)
		}
	}
}

// TestMemoryOfADrainCountsWhatPrefetchHolds: Consume holds Concurrency +
// Prefetch leased deliveries, each with its payload, so a drain's estimate
// counts the prefetched ones too: -prefetch 65536 of 1 MiB messages holds
// 64 GiB, which the check must refuse before the kernel kills the run.
func TestMemoryOfADrainCountsWhatPrefetchHolds(t *testing.T) {
	l := drainLoad{method: drainConsume, consumers: 1, batch: 256, prefetch: 256, messages: 300, size: 64 << 10}
	need, lower := l.memory()
	alone, _ := drainLoad{method: drainConsume, consumers: 1, batch: 256, messages: 300, size: 64 << 10}.memory()
	held := deliveredMessages(256, 64<<10, drainConsume)
	if need < alone+held || !strings.Contains(lower, "-prefetch") {
		t.Errorf("estimate %d with -prefetch 256, %d without; want the 256 held deliveries, %d, counted, and -prefetch among the flags to lower (%q)", need, alone, held, lower)
	}
	// What the drain holds is above 80% of what is available, what its
	// consumer alone holds is not.
	dir := benchDir(t)
	r := runWith(t, context.Background(), availableIs(int64(float64(alone+held)/memoryShare*0.9)),
		"drain", "-consumers", "1", "-batch", "256", "-prefetch", "256", "-messages", "300", "-size", "65536", "-sync", "none", "-dir", dir)
	if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "drain via Consume, batch 256, concurrency 1, prefetch 256") || !strings.Contains(r.stderr, "-prefetch") {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d, nothing measured, and the drain and -prefetch named", r.code, r.stdout, r.stderr, exitError)
	}
	assertDirEmpty(t, dir)
}

// fakeFiles reads the files of m, by path, and no other.
func fakeFiles(m map[string]string) func(string) ([]byte, error) {
	return func(p string) ([]byte, error) {
		if s, ok := m[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
}
