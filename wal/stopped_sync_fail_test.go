package wal

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/vfs"
)

// Err's doc: "A failure no call waited for (the background fdatasync of
// records appended without waiting for one) is reported here before any
// call meets it". A log stopped by a failed rotation keeps running its
// interval fdatasync, which can fail after the stop: Err then names that
// failure (data may be lost), not only the rotation's stop, whose text
// says nothing was lost.
func TestAStoppedLogsErrReportsALaterFailedBackgroundFdatasync(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	ffs := vfs.NewFaultFS(vfs.Default)
	const interval = 5 * time.Millisecond
	l := mustOpen(t, dir, Options{
		FS: ffs, SegmentBytes: 4096, Sync: SyncInterval, SyncInterval: interval,
		StopOnRotationFailure: true,
		// Every rotation fails: the preamble does not fit its room.
		Preamble:      func() [][]byte { return [][]byte{make([]byte, 200)} },
		PreambleBytes: 64,
	})
	defer l.Close()

	// Every fdatasync of a segment fails from now on.
	ffs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: ".seg"})
	if _, err := l.Append(make([]byte, 3900)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(make([]byte, 200)); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("the failed rotation should stop the log: %v", err)
	}
	// The interval fdatasync of the stopped log runs, and fails.
	deadline := time.Now().Add(10 * time.Second)
	for l.lostErr() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("a log a failed rotation stopped ran no background fdatasync in 10 s (SyncInterval %v): what it acknowledged as written stays unsynced", interval)
		}
		time.Sleep(interval)
	}
	err := l.Err()
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "may be lost") {
		t.Fatalf("after the stopped log's background fdatasync failed (%v), Err should report that failure (data written since the last good fdatasync may be lost); it returns only the rotation's stop: %v", l.lostErr(), err)
	}
}
