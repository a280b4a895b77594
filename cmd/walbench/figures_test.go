package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// The tests of this file pin what a row's figures are of, on a disk
// whose fdatasync walbench's tests control: each takes at least a fixed
// time more than tmpfs's. They assert exact arithmetic between the
// figures, and bands a loaded machine keeps: a sleep lasts at least as
// long as asked, never less, so an upper bound on a rate holds; a lower
// one is left wide.

// slowSyncFS is the real file system, with every fdatasync taking at
// least d more.
func slowSyncFS(d time.Duration) vfs.FS {
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Observe(func(ev vfs.Event) {
		if ev.Op == vfs.OpSync {
			time.Sleep(d)
		}
	})
	return fs
}

// publishRow runs l with a quiet progress, failing t unless it measured.
func publishRow(t *testing.T, l publishLoad) Row {
	t.Helper()
	l.hangTimeout = time.Minute
	r, measured, err := runPublish(context.Background(), &env{progress: newProgress(io.Discard)}, benchDir(t), l)
	if err != nil || !measured {
		t.Fatalf("%v: measured %v, error %v", l, measured, err)
	}
	if r.MsgsPerSec == nil || r.RecordsPerCommit == nil || r.CommitsPerSec == nil || r.MBPerSec == nil || r.P50Ns == nil || r.Ops == 0 {
		t.Fatalf("%v: a figure missing: %+v", l, r)
	}
	t.Logf("%v: %d published, %d commits in %.3fs: %.0f msgs/s, %.3f MB/s, %.0f commits/s, %.3f records/commit, p50 %v",
		l, r.Ops, r.Commits, r.Seconds, *r.MsgsPerSec, *r.MBPerSec, *r.CommitsPerSec, *r.RecordsPerCommit, time.Duration(*r.P50Ns))
	return r
}

// TestPublishFiguresOfOneProducer: one producer, every fdatasync taking
// at least 1 ms. Each Publish waits for its own commit, so the rate is at
// most 1,000/s (and the calls in flight at either edge of the window),
// each commit carries exactly its one message, commits/s is msgs/s, MB/s
// is msgs/s × the size in 10^6 bytes, and the median latency is at least
// the 1 ms.
func TestPublishFiguresOfOneProducer(t *testing.T) {
	const size = 1024
	r := publishRow(t, publishLoad{producers: 1, size: size, sync: broker.SyncAll,
		warmup: 20 * time.Millisecond, duration: 300 * time.Millisecond, fs: slowSyncFS(time.Millisecond)})
	if most := 1000 + 2/r.Seconds; *r.MsgsPerSec > most || *r.MsgsPerSec < 50 {
		t.Errorf("%.0f msgs/s with each Publish waiting for a 1 ms fdatasync; want at most %.0f (and not under 50)", *r.MsgsPerSec, most)
	}
	// One message per commit, but the store may commit a record of its
	// own in the window (a reservation of message IDs, a checkpoint's
	// barrier), which carries no message: at most 1, and not far below.
	// Except at the window's end: the log counts a record when it writes
	// it and a commit when its fdatasync returns, so the publish in flight
	// as the window closes may count as a message without its commit.
	if rpc, most := *r.RecordsPerCommit, float64(r.Commits+1)/float64(r.Commits); rpc > most || rpc < 0.9 {
		t.Errorf("%v records per commit with one producer; want at most %v (1, and the call in flight at the window's end), or a little less when the store committed records of its own", rpc, most)
	}
	// Counted, not compared as rates: at exactly one commit fewer than
	// messages, commits/s and msgs/s − 1/seconds are the same number, and
	// their float64 quotients may differ in the last bit.
	if r.Commits < r.Ops-1 || float64(r.Commits) > float64(r.Ops)/0.9 {
		t.Errorf("%d commits, %d messages; want one commit per message (but the call in flight at the window's end), and a few of the store's own", r.Commits, r.Ops)
	}
	if want := float64(r.Commits) / r.Seconds; !near(*r.CommitsPerSec, want) {
		t.Errorf("%v commits/s; want the %d commits ÷ %v s = %v", *r.CommitsPerSec, r.Commits, r.Seconds, want)
	}
	if want := *r.MsgsPerSec * size / 1e6; !near(*r.MBPerSec, want) {
		t.Errorf("%v MB/s at %v msgs/s of %d B; want %v (10^6 bytes)", *r.MBPerSec, *r.MsgsPerSec, size, want)
	}
	if p50 := time.Duration(*r.P50Ns); p50 < time.Millisecond {
		t.Errorf("publish p50 %v with every fdatasync taking at least 1ms; want at least that (nanoseconds in the JSON)", p50)
	}
}

// TestRecordsPerCommitAreTheWorkloads: records per commit is the
// group-commit factor, the messages published per fdatasync: with N
// producers each waiting for its commit, at most N; msgs/s is commits/s ×
// records per commit. Small segments make the store write records of its
// own in the window (each rotation's preamble, some in commits of their
// own): they are not messages, and not counted.
func TestRecordsPerCommitAreTheWorkloads(t *testing.T) {
	for _, producers := range []int{1, 4} {
		r := publishRow(t, publishLoad{producers: producers, size: 1024, sync: broker.SyncAll, segmentBytes: 64 << 10,
			warmup: 20 * time.Millisecond, duration: 300 * time.Millisecond, fs: slowSyncFS(time.Millisecond)})
		// (The publishes in flight as the window closes may count as
		// messages without their commit: see TestPublishFiguresOfOneProducer.)
		if most := float64(producers) * float64(r.Commits+1) / float64(r.Commits); *r.RecordsPerCommit > most {
			t.Errorf("%d producers: %v records per commit; want at most %d (%v with the calls in flight at the window's end)", producers, *r.RecordsPerCommit, producers, most)
		}
		if got := *r.RecordsPerCommit * float64(r.Commits); !near(got, float64(r.Ops)) {
			t.Errorf("%d producers: %v records per commit × %d commits = %v; want the %d messages published",
				producers, *r.RecordsPerCommit, r.Commits, got, r.Ops)
		}
		if !near(*r.CommitsPerSec**r.RecordsPerCommit, *r.MsgsPerSec) {
			t.Errorf("%d producers: %v commits/s × %v records/commit; want %v msgs/s", producers, *r.CommitsPerSec, *r.RecordsPerCommit, *r.MsgsPerSec)
		}
	}
}

// TestDrainRecordsAreLeasesAndAcks: a drain's records per commit are its
// leases and acks, one of each per message, per commit: not the records
// the store writes for itself (the preambles of the segments its acks
// fill, here 64 KiB ones).
func TestDrainRecordsAreLeasesAndAcks(t *testing.T) {
	const messages = 3000
	d := drainLoad{method: drainConsume, sync: broker.SyncAll, consumers: 4, batch: 16, messages: messages, size: 1024,
		segmentBytes: 64 << 10, hangTimeout: time.Minute}
	r, measured, err := runDrain(context.Background(), &env{progress: newProgress(io.Discard)}, benchDir(t), d)
	if err != nil || !measured {
		t.Fatalf("measured %v, error %v", measured, err)
	}
	if r.RecordsPerCommit == nil || r.Ops != messages || len(r.Notes) > 0 {
		t.Fatalf("%d handled, records per commit %v, notes %q; want %d, a figure, none", r.Ops, deref(r.RecordsPerCommit), r.Notes, messages)
	}
	if got := *r.RecordsPerCommit * float64(r.Commits); !near(got, 2*messages) {
		t.Errorf("%v records per commit × %d commits = %v; want the %d leases and acks of %d messages", *r.RecordsPerCommit, r.Commits, got, 2*messages, messages)
	}
}

// slowSyncFile is a file whose every fdatasync takes at least d more.
type slowSyncFile struct {
	vfs.File
	d     time.Duration
	syncs int64
}

func (f *slowSyncFile) Sync() error {
	time.Sleep(f.d)
	f.syncs++
	return f.File.Sync()
}

// TestProbeLoopFigures: the probe's fdatasync loop on a file whose every
// fdatasync takes at least 1 ms makes at most 1,000 a second, records one
// latency per fdatasync, each of at least 1 ms (in nanoseconds), and
// counts one pwrite per fdatasync; the bandwidth loop, an fdatasync per 8
// pwrites, counts its pwrites, whose bytes make its MB/s.
func TestProbeLoopFigures(t *testing.T) {
	f, err := createFile(filepath.Join(benchDir(t), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	slow := &slowSyncFile{File: f, d: time.Millisecond}
	h := newLatencies()
	n, secs, err := syncLoop(context.Background(), slow, probeWriteBytes, probeWriteBytes, 0, 1<<20, 200*time.Millisecond, h)
	if err != nil {
		t.Fatal(err)
	}
	if n != slow.syncs || h.TotalCount() != n {
		t.Errorf("%d pwrites counted, %d fdatasyncs made, %d latencies; want one of each per fdatasync", n, slow.syncs, h.TotalCount())
	}
	if r := *rate(n, secs); r > 1000 || r < 50 {
		t.Errorf("%.0f fdatasyncs/s, each taking at least 1 ms; want at most 1,000 (and not under 50)", r)
	}
	if p50 := time.Duration(*percentilesOf(h).p50); p50 < time.Millisecond {
		t.Errorf("fdatasync p50 %v, each taking at least 1 ms", p50)
	}

	slow.syncs = 0
	n, _, err = syncLoop(context.Background(), slow, probeWriteBytes, 8*probeWriteBytes, 0, 1<<20, 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != 8*slow.syncs {
		t.Errorf("%d pwrites counted with %d fdatasyncs, one per 8 pwrites; want %d", n, slow.syncs, 8*slow.syncs)
	}
}

// TestSweepDrainCutIsSaid: a sweep point's drain lasts -time at most; one
// that ends with messages left says so, as a drain cut at -limit does:
// its rate is of the messages it handled. With every fdatasync taking at
// least 5 ms, a drain of one consumer taking one message at a time makes
// at most 100 a second (a lease and an ack, each its own commit), and
// the window of 16 producers leaves more than it can take in 100 ms.
func TestSweepDrainCutIsSaid(t *testing.T) {
	l := sweepLoad{warmup: 0, duration: 100 * time.Millisecond, consumers: 1, batch: 1, fs: slowSyncFS(5 * time.Millisecond), hangTimeout: time.Minute}
	p := sweepPoint{producers: 16, size: 100, segmentBytes: 0, sync: broker.SyncAll}
	r, measured, err := runSweepPoint(context.Background(), &env{progress: newProgress(io.Discard)}, benchDir(t), l, p)
	if err != nil || !measured {
		t.Fatalf("measured %v, error %v", measured, err)
	}
	if r.DrainMsgsPerSec == nil || r.Ops < 30 {
		t.Skipf("%d published, drain %v msgs/s: too few to outlast the drain on this machine", r.Ops, deref(r.DrainMsgsPerSec))
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "the drain after the window was cut") {
		t.Errorf("notes %q after %d published and a drain of %v msgs/s in %v s; want one saying the drain was cut", r.Notes, r.Ops, *r.DrainMsgsPerSec, r.DrainSeconds)
	}
}
