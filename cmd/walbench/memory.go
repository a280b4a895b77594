package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// walbench refuses a workload whose peak memory, as estimated here, would
// not fit in what the machine has available: 1,024 producers of 1 MiB
// messages take gigabytes, and a run the kernel kills for it loses
// everything it measured. The estimates were fitted to the peak resident
// memory of runs on Linux (amd64, Go 1.26; /usr/bin/time -v's maximum
// resident set size, and /proc/PID/status's RssAnon sampled every 20 ms
// where a workload maps its segments and so shares its resident set with
// the page cache):
//
//	publish, sync=all    16 × 1 MiB  140 MB     64 × 1 MiB  494 MB
//	                    128 × 1 MiB  861 MB    256 × 1 MiB  1.27 GB
//	                   1024 × 1 MiB  4.44 GB  1024 × 256 KiB 1.37 GB
//	                   1024 × 64 KiB 698 MB   1024 × 16 KiB  315 MB
//	                    256 × 64 KiB 192 MB    256 × 1 KiB    74 MB
//	publish, sync=none  256 × 1 MiB  1.43 GB   512 × 512 KiB 1.32 GB
//	wal append           64 × 1 MiB  239 MB   1024 × 1 MiB  1.20 GB
//	drain of 2,000 × 1 MiB, Consume batch × concurrency (RssAnon):
//	                 8 × 8  203 MB   64 × 64  328 MB   1000 × 1024  2.05 GB
//	              Receive+Ack 64 × 64  1.78 GB
//	mixed, 1 MiB     64 producers  443 MB   1024 producers  2.43 GB (RssAnon)
//	reopen, 2,000,000 pending: 0.6 B of heap a message (its index is a
//	mapped file, in the page cache)
//
// A Publish's message is in memory several times over: the producer's
// payload, the record Publish encodes, the commit's write buffer, and the
// garbage of the commits before, which the GC lets grow as large as what
// is live before it collects. Measured, that is about 8 copies while the
// messages in flight (producers × size) are small (7.5 at 64 × 1 MiB),
// flattening to about 4 past gcKnee (4.2 at 1,024 × 1 MiB): 8 copies of
// the first gcKnee bytes, 4 of the rest (publishMessages). The other
// workloads' copies were fitted the same way, each below. The estimates
// lie 4% to 50% above every figure in the table, but for the mixed
// workload of 1,024 producers (2.1 times: at 2 messages a second each,
// its producers are seldom all in a Publish at once; at a higher rate
// they are, as in a publish workload).

const (
	// memoryShare is the share of the available memory a workload's
	// estimate may take: the rest is the margin for what the estimate
	// misses and what the machine's other processes do meanwhile.
	memoryShare = 0.8
	// memoryBase is what a run takes before its workload: the runtime,
	// the store's tables and goroutines, the report (15 MB measured).
	memoryBase = 32 << 20
	// gcKnee is the bytes of messages in flight past which each costs
	// fewer copies: see publishMessages.
	gcKnee = 128 << 20
)

// histogramBytes is the memory of one latency histogram: each producer or
// appender has one, a mixed producer two.
var histogramBytes = int64(newLatencies().ByteSize())

// recordBytes is a message of size bytes as its log record: see
// messageBytes.
func recordBytes(size int) int64 { return int64(messageBytes(size)) }

// publishMessages is the memory of n messages of size bytes in flight in
// closed-loop Publish calls: 8 copies of the first gcKnee bytes of them,
// 4 of the rest (fitted: see the table at the top of this file).
func publishMessages(n, size int) int64 {
	t := int64(n) * recordBytes(size)
	return 4*t + 4*min(t, gcKnee)
}

// fillMemory is the memory of the untimed prefill of a drain or reopen
// store: batches of fillBatch messages of size bytes, or fewer where they
// would not fit in one of its segments, each encoded and written while
// the last may not be collected yet (the drain of 8 × 8 above: about 3
// copies of a 64 MiB batch), 4 copies.
func fillMemory(size int, segmentBytes int64) int64 {
	return 4 * min(fillBatch*recordBytes(size), effectiveSegmentBytes(segmentBytes))
}

// deliveredMessages is the memory of n deliveries of size bytes in hand:
// about 2 copies each under Consume (1,000 × 1,024 above), one under
// Receive+Ack.
func deliveredMessages(n, size int, method string) int64 {
	copies := int64(2)
	if method == drainReceiveAck {
		copies = 1
	}
	return copies * int64(n) * recordBytes(size)
}

// memory is the estimated peak memory of l, with the flags that lower it.
func (l publishLoad) memory() (int64, string) {
	return memoryBase + int64(l.producers)*histogramBytes + publishMessages(l.producers, l.size), "-producers or -size"
}

// memory is the estimated peak memory of w: an Append copies its record
// once into the log's buffer, fewer copies than a Publish (fitted: 1 of
// every message in flight, 3 more of the first gcKnee bytes of them).
func (w walLoad) memory() (int64, string) {
	t := int64(w.appenders) * recordBytes(w.recordBytes)
	return memoryBase + int64(w.appenders)*histogramBytes + t + 3*min(t, gcKnee), "-producers or -size"
}

// memory is the estimated peak memory of d: its prefill, whose garbage
// may still be in the heap when the drain starts, and the deliveries in
// hand: one per Consume handler and those its Prefetch holds leased
// beside them, or a Receive of d.batch per Receive+Ack goroutine, at most
// every message.
func (d drainLoad) memory() (int64, string) {
	inHand, lower := d.consumers+d.prefetch, "-consumers or -size"
	if d.prefetch > 0 {
		lower = "-consumers, -prefetch or -size"
	}
	if d.method == drainReceiveAck {
		inHand, lower = d.consumers*d.batch, "-consumers, -batch or -size"
	}
	inHand = min(inHand, d.messages)
	return memoryBase + fillMemory(d.size, d.segmentBytes) + deliveredMessages(inHand, d.size, d.method), lower
}

// memory is the estimated peak memory of l: its producers as a publish
// workload's, with a second histogram each, and a delivery in hand per
// Consume handler.
func (l mixedLoad) memory() (int64, string) {
	return memoryBase + 2*int64(l.producers)*histogramBytes + publishMessages(l.producers, l.size) +
		deliveredMessages(l.consumers, l.size, drainConsume), "-producers, -consumers or -size"
}

// memory is the estimated peak memory of l: its prefill. The index it
// rebuilds is a mapped file, in the page cache (0.6 B of heap a message
// measured).
func (l reopenLoad) memory() (int64, string) {
	return memoryBase + fillMemory(l.size, l.segmentBytes), "-size or -segment-bytes"
}

// memory is the estimated peak memory of point p of l: its publish
// window, and then its drain, the window's garbage maybe still in the
// heap.
func (l sweepLoad) memory(p sweepPoint) (int64, string) {
	pub, _ := publishLoad{producers: p.producers, size: p.size}.memory()
	return pub + deliveredMessages(l.consumers, p.size, drainConsume), "-producers or -size"
}

// errTooLarge marks the refusal of a setting whose estimate does not fit
// in the available memory.
var errTooLarge = errors.New("would not fit in this machine's memory")

// fitMemory refuses the setting named what when its estimate need does
// not fit in memoryShare of available; lower names the flags that lower
// it.
func fitMemory(what fmt.Stringer, need, available int64, lower string) error {
	if float64(need) <= memoryShare*float64(available) {
		return nil
	}
	return fmt.Errorf("%v: %w: it needs about %s of memory, and %s is available (walbench keeps to %.0f%% of it): lower %s, or pass -force-memory to run it anyway",
		what, errTooLarge, formatMemory(need), formatMemory(available), 100*memoryShare, lower)
}

// formatMemory says a memory size in MiB or GiB, one decimal.
func formatMemory(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// available is the memory this machine has available now, or an error
// where it cannot be told (macOS): then no setting is refused. The heap
// the last workload left is returned to the system first, so that it is
// counted as available.
func (e *env) available() (int64, error) {
	if e.memAvailable != nil {
		return e.memAvailable()
	}
	debug.FreeOSMemory()
	return availableMemory()
}

// sizedLoad is a workload with a memory estimate.
type sizedLoad interface {
	fmt.Stringer
	memory() (need int64, lower string)
}

// checkMemory refuses a run one of whose workloads (the sweep's points
// aside: each is checked as it comes, and skipped) would not fit in the
// available memory, before anything is measured. The workloads run one
// after the other, each on a store removed before the next: each must fit
// alone. It names the largest that does not.
func checkMemory(c config, e *env) error {
	if c.forceMemory {
		return nil
	}
	var loads []sizedLoad
	for _, w := range c.workloads {
		switch w {
		case kindWAL:
			for _, n := range c.wal.appenders {
				loads = append(loads, walLoad{appenders: n, recordBytes: c.wal.size, sync: c.wal.sync})
			}
		case kindPublish:
			for _, m := range c.publish.syncs {
				for _, size := range c.publish.sizes {
					for _, n := range c.publish.producers {
						loads = append(loads, publishLoad{producers: n, size: size, sync: m})
					}
				}
			}
		case kindDrain:
			for _, m := range c.drain.syncs {
				for _, b := range c.drain.batches {
					for _, n := range c.drain.consumers {
						loads = append(loads, drainLoad{method: c.drain.method, sync: m, consumers: n, batch: b, prefetch: c.drain.prefetch,
							messages: c.drain.messages, size: c.drain.size, segmentBytes: c.drain.segmentBytes})
					}
				}
			}
		case kindMixed:
			for _, r := range c.mixedRates {
				l := c.mixed
				l.rate = r
				loads = append(loads, l)
			}
		}
	}
	if c.reopen {
		loads = append(loads, c.reopenLoad)
	}
	if len(loads) == 0 {
		return nil
	}
	largest := slices.MaxFunc(loads, func(a, b sizedLoad) int {
		na, _ := a.memory()
		nb, _ := b.memory()
		return cmp.Compare(na, nb)
	})
	need, lower := largest.memory()
	available, err := e.available()
	if err != nil {
		return nil // not told (macOS): the run goes
	}
	return fitMemory(largest, need, available, lower)
}

// memInfoAvailable reads MemAvailable, in bytes, from the text of
// /proc/meminfo: what the kernel can give without swapping, the page
// cache it would drop included.
func memInfoAvailable(meminfo string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "MemAvailable:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb < 0 {
				break
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("/proc/meminfo: no MemAvailable in kB")
}

// cgroupFiles are where a cgroup's memory controller is mounted, under
// v2 and under v1 (controller names the v1 hierarchy in
// /proc/self/cgroup; "" is v2's unified one), and the files of each of
// its cgroups: its limit, its usage, and the statistic that counts the
// page cache its usage includes and the kernel would reclaim before
// killing anything.
var cgroupFiles = []struct{ mount, controller, limit, usage, stat, inactive string }{
	{"/sys/fs/cgroup", "", "memory.max", "memory.current", "memory.stat", "inactive_file"},
	{"/sys/fs/cgroup/memory", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat", "total_inactive_file"},
}

// cgroupRoom is how much more memory the cgroup walbench runs in lets it
// take before the kernel kills it: of the run's own cgroup (as
// /proc/self/cgroup names it: a systemd unit's, a nested one's) and each
// above it up to the top of the mount (a container's mount is its own
// cgroup), the least room, a limit less its usage, the inactive page
// cache not counted. ok is false where there is no limit (the host's
// memory is then the bound) or it cannot be read. read is os.ReadFile,
// or a test's.
func cgroupRoom(read func(string) ([]byte, error)) (room int64, ok bool) {
	number := func(name string) (int64, bool) {
		b, err := read(name)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil && n >= 0
	}
	own, _ := read("/proc/self/cgroup") // unreadable: the top of the mount alone
	for _, f := range cgroupFiles {
		// The room at one cgroup, dir, of the mount.
		at := func(dir string) (int64, bool) {
			limit, ok := number(path.Join(f.mount, dir, f.limit)) // "max", under v2, is no limit
			if !ok || limit >= 1<<62 {                            // v1's no limit: a page-rounded MaxInt64
				return 0, false
			}
			usage, ok := number(path.Join(f.mount, dir, f.usage))
			if !ok {
				return 0, false
			}
			if b, err := read(path.Join(f.mount, dir, f.stat)); err == nil {
				for line := range strings.Lines(string(b)) {
					k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
					if n, err := strconv.ParseInt(v, 10, 64); k == f.inactive && err == nil && n >= 0 {
						usage -= min(n, usage)
					}
				}
			}
			return max(limit-usage, 0), true
		}
		for dir := cgroupOf(string(own), f.controller); ; dir = path.Dir(dir) {
			if r, limited := at(dir); limited && (!ok || r < room) {
				room, ok = r, true
			}
			if dir == "/" {
				break
			}
		}
		if ok {
			return room, true
		}
	}
	return 0, false
}

// cgroupOf is the cgroup of this process in the hierarchy of controller
// ("": v2's unified one), read from /proc/self/cgroup's text, as a clean
// absolute path; "/" when it is not there.
func cgroupOf(procSelfCgroup, controller string) string {
	for line := range strings.Lines(procSelfCgroup) {
		// hierarchy-ID:controller,...:path
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		v2 := controller == "" && parts[0] == "0" && parts[1] == ""
		if v2 || controller != "" && slices.Contains(strings.Split(parts[1], ","), controller) {
			return path.Clean("/" + parts[2])
		}
	}
	return "/"
}
