package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/vfs"
)

// StoreStats.IndexBytes counts the table and checkpoint files. When the
// replay from a loaded checkpoint meets damage in its table, Open removes
// the checkpoint and rebuilds; if Open's own checkpoint then fails (it
// only logs a warning), no checkpoint file is left to count. The size of
// the one the first pass loaded used to stay in the count.
func TestIndexBytesCountsNoCheckpointARebuildRemoved(t *testing.T) {
	opts := Options{Now: func() time.Time { return time.Unix(1_700_000_000, 0) }, SegmentBytes: MinSegmentBytes}
	ManualMaintenance(&opts)
	dir := t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pol := PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Minute, MaxMessageBytes: 64}
	q, err := s.Queue("a", pol)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := q.Publish(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Maintain(); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %d", err, len(ds))
	}
	// The process dies here: a copy of what is on disk (SyncAll).
	crash := filepath.Join(t.TempDir(), "crash")
	copyStoreDir(t, dir, crash)
	_ = s.Close()

	seq, _ := MessageSeq(ds[0].Message.ID)
	var chunk string
	names, _ := os.ReadDir(filepath.Join(crash, "index"))
	for _, n := range names {
		if strings.HasPrefix(n.Name(), "tbl-") {
			chunk = filepath.Join(crash, "index", n.Name())
		}
	}
	f, err := os.OpenFile(chunk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	off := int64(seq%65536) * 32
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Close()

	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: "checkpoint.tmp", Err: syscall.ENOSPC})
	o := opts
	o.FS = ffs
	s2, err := Open(crash, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if !s2.Recovery().IndexRebuilt {
		t.Fatalf("the table damage did not make the open rebuild: %+v", s2.Recovery())
	}
	var onDisk int64
	names, _ = os.ReadDir(filepath.Join(crash, "index"))
	var listed []string
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(crash, "index", n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		onDisk += fi.Size()
		listed = append(listed, n.Name())
	}
	if got := s2.Stats().IndexBytes; got != onDisk {
		t.Errorf("StoreStats.IndexBytes = %d after the rebuild, but the index directory holds %d bytes (%v): it still counts the checkpoint the rebuild removed", got, onDisk, listed)
	}
}
