package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/vfs"
)

// RecoveryReport.TornTail tells the caller that Open cut off bytes past
// the durable end (under SyncPublish and SyncNone: publishes a power loss
// may have taken). An Open that fails after the log opened (here an I/O
// error mapping a table file) has cut the tail all the same, and the next
// Open finds the log ending cleanly there: the cut is told in the failed
// Open's log, as it is made.
func TestAnOpenThatFailsAfterCuttingATornTailLogsTheCut(t *testing.T) {
	opts := Options{Now: func() time.Time { return time.Unix(1_700_000_000, 0) }, SegmentBytes: MinSegmentBytes, Sync: SyncPublish}
	ManualMaintenance(&opts)
	dir := t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Queue("a", PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Minute, MaxMessageBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := q.Publish(context.Background(), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Maintain(); err != nil {
		t.Fatal(err)
	}
	end := s.log.End()
	seg := filepath.Base(s.log.SegmentPath(end.Segment()))
	crash := filepath.Join(t.TempDir(), "crash")
	copyStoreDir(t, dir, crash)
	_ = s.Close()
	// A write the crash cut short, past the durable end.
	f, err := os.OpenFile(filepath.Join(crash, seg), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// (A frame header whose sequence field names the segment: a frame
	// begun and not finished.)
	torn := []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 0, 0, 0, 0x99, 0x99, 0x99, 0x99}
	binary.LittleEndian.PutUint32(torn[8:], end.Segment())
	if _, err := f.WriteAt(torn, int64(end.Offset())); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// The control: an Open of a copy reports the torn tail.
	control := filepath.Join(t.TempDir(), "control")
	copyStoreDir(t, crash, control)
	if c, err := Open(control, opts); err != nil {
		t.Fatal(err)
	} else {
		torn := c.Recovery().TornTail
		_ = c.Close()
		if !torn {
			t.Fatal("control: the torn tail is not reported")
		}
	}

	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpMap, NameContains: "tbl-", Times: 1})
	o := opts
	o.FS = ffs
	var logged bytes.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	if s, err := Open(crash, o); err == nil {
		_ = s.Close()
		t.Fatal("the injected I/O error did not fail the first Open")
	} else if !errors.Is(err, syscall.EIO) {
		t.Fatalf("first Open: want EIO, got %v", err)
	}
	if !strings.Contains(logged.String(), "torn tail") || !strings.Contains(logged.String(), seg) {
		t.Errorf("the Open that failed cut the torn tail past %v off %s without a word in its log:\n%s", end, seg, logged.String())
	}
	s2, err := Open(crash, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Recovery().TornTail {
		t.Errorf("the Open after the failed one reports a torn tail (%q); RecoveryReport.TornTail says it finds the log ending cleanly where the failed Open cut it", s2.Recovery().String())
	}
}
