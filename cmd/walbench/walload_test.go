package main

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// recordFS is vfs.Default, except that writes of records (any write not at
// offset 0 that is not all zeros: segment preparation writes only zeros
// and the header at offset 0) go through onRecordWrite first, with the
// name of the file. A non-nil error from it fails the write.
type recordFS struct {
	vfs.FS
	onRecordWrite func(name string) error
}

type recordFile struct {
	vfs.File
	fs *recordFS
}

func (fs *recordFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return recordFile{File: f, fs: fs}, nil
}

func (f recordFile) WriteAt(p []byte, off int64) (int, error) {
	if off != 0 && strings.ContainsFunc(string(p), func(r rune) bool { return r != 0 }) {
		if err := f.fs.onRecordWrite(f.Name()); err != nil {
			return 0, err
		}
	}
	return f.File.WriteAt(p, off)
}

func TestRunWAL(t *testing.T) {
	w := walLoad{
		appenders:    4,
		recordBytes:  100,
		sync:         wal.SyncAlways,
		segmentBytes: 64 << 10, // rotations during the window
		warmup:       20 * time.Millisecond,
		duration:     200 * time.Millisecond,
	}
	dir := t.TempDir()
	res, err := runWAL(context.Background(), io.Discard, dir, w)
	if err != nil {
		t.Fatalf("runWAL: %v", err)
	}
	if res.records == 0 || res.syncs == 0 || res.hist.Count() == 0 {
		t.Fatalf("measured nothing: %d records, %d syncs, %d latencies", res.records, res.syncs, res.hist.Count())
	}
	if res.syncs > res.records+res.rotations {
		t.Errorf("%d fdatasyncs for %d records and %d rotations", res.syncs, res.records, res.rotations)
	}
	if len(res.notes) > 0 {
		t.Errorf("notes on the log's counters: %q", res.notes)
	}
	if !res.window.opened || res.interrupted {
		t.Errorf("window %+v, interrupted %v; want opened, not interrupted", res.window, res.interrupted)
	}
	assertDirEmpty(t, dir, "log directory left behind: %v")
}

func TestRunWALAppendFails(t *testing.T) {
	errDisk := errors.New("injected write error")
	fs := &recordFS{FS: vfs.Default, onRecordWrite: func(string) error { return errDisk }}
	w := walLoad{appenders: 3, recordBytes: 10, segmentBytes: 64 << 10, duration: 5 * time.Second, fs: fs}
	dir := t.TempDir()
	start := time.Now()
	_, err := runWAL(context.Background(), io.Discard, dir, w)
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), "Append") {
		t.Fatalf("runWAL = %v; want an Append error wrapping %v", err, errDisk)
	}
	t.Logf("runWAL: %v", err)
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("the failure took %v to end the workload", elapsed)
	}
	assertDirEmpty(t, dir, "log directory left behind: %v")
}

func TestRunWALHangs(t *testing.T) {
	release := make(chan struct{})
	fs := &recordFS{FS: vfs.Default, onRecordWrite: func(string) error { <-release; return nil }}
	defer close(release) // let the stuck writer go once the test is done
	w := walLoad{
		appenders:    2,
		recordBytes:  10,
		segmentBytes: 64 << 10,
		duration:     50 * time.Millisecond,
		fs:           fs,
		hangTimeout:  100 * time.Millisecond,
	}
	dir := t.TempDir()
	_, err := runWAL(context.Background(), io.Discard, dir, w)
	if err == nil || !strings.Contains(err.Error(), "hung") {
		t.Fatalf("runWAL = %v; want a hang reported", err)
	}
	t.Logf("runWAL: %v", err)
	assertDirEmpty(t, dir, "log directory left behind: %v")
}

func TestRunWALInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	w := walLoad{appenders: 2, recordBytes: 10, sync: wal.SyncNever, segmentBytes: 64 << 10, duration: time.Hour}
	res, err := runWAL(ctx, io.Discard, t.TempDir(), w)
	if err != nil {
		t.Fatalf("runWAL: %v", err)
	}
	if !res.interrupted || !res.window.opened || res.window.elapsed > time.Second {
		t.Fatalf("interrupted %v, window %+v; want interrupted after about 300ms", res.interrupted, res.window)
	}
}

func TestProbe(t *testing.T) {
	for _, spec := range []probeSpec{overwriteProbe, appendProbe, batchCeilingProbe(3 * 1041)} {
		dir := t.TempDir()
		res, err := probe(context.Background(), io.Discard, dir, spec, 100*time.Millisecond)
		if err != nil {
			t.Fatalf("%v: %v", spec, err)
		}
		if res.syncs == 0 || res.hist.Count() != uint64(res.syncs) {
			t.Errorf("%v: %d syncs, %d latencies", spec, res.syncs, res.hist.Count())
		}
		if names, _ := os.ReadDir(dir); len(names) != 0 {
			t.Errorf("%v left files behind: %v", spec, names)
		}
	}
}

func TestProbeFileBytes(t *testing.T) {
	for _, tc := range []struct {
		spec probeSpec
		want int64
	}{
		{overwriteProbe, probeFileBytes},
		{batchCeilingProbe(1041), probeFileBytes},
		{batchCeilingProbe(probeFileBytes - 32), probeFileBytes},
		// One write past the end: the file grows by whole prefill chunks.
		{batchCeilingProbe(probeFileBytes - 31), probeFileBytes + prefillChunk},
		{batchCeilingProbe(3 * probeFileBytes), 3*probeFileBytes + prefillChunk},
	} {
		if got := tc.spec.fileBytes(); got != tc.want {
			t.Errorf("%v: fileBytes = %d, want %d", tc.spec, got, tc.want)
		}
	}
}
