package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/wal"
)

// publishes and a checkpoint at the log's end, copies it as a process
// crash leaves it, damages the last record of the copy's last segment (a
// publish the checkpoint recorded as durable), and marks the copy's
// checkpoint with marker (SUSPECT, CHECKPOINTING) unless it is "". It
// returns the copy and the damaged segment's path in it.
func crashWithSyncedDamage(t *testing.T, opts Options, marker string) (dir, segPath string) {
	t.Helper()
	orig := t.TempDir()
	s, err := Open(orig, opts)
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Queue("a", PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Minute, MaxMessageBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := q.Publish(context.Background(), []byte(fmt.Sprintf("payload-%d-xxxxxxxxxxxxxxxx", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Maintain(); err != nil {
		t.Fatal(err)
	}
	var last wal.Position
	var lastLen int
	var lastKind index.Kind
	if err := s.log.Iterate(0, func(pos wal.Position, rec []byte) error {
		last, lastLen, lastKind = pos, len(rec), index.Kind(rec[0])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if lastKind != index.KindPublish {
		t.Fatalf("the log's last record is a %v, not a publish", lastKind)
	}
	seg := s.log.SegmentPath(last.Segment())
	crash := filepath.Join(t.TempDir(), "crash")
	copyStoreDir(t, orig, crash)
	_ = s.Close()
	path := filepath.Join(crash, filepath.Base(seg))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A byte inside the last record's body (past its frame header).
	off := int64(last.Offset()) + int64(segment.Size(lastLen)) - 6
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if marker != "" {
		if err := os.WriteFile(filepath.Join(crash, "index", marker), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return crash, path
}

// Open refuses damage before the last checkpoint's position with Corrupt
// (RecoveryReport.TornTail: "damage before that point is never taken for
// a torn tail"), and a marker on the checkpoint does not change that. The
// SUSPECT mark (left by a store that found damage while running, then
// died) and CHECKPOINTING (left by a crash or failure during a
// checkpoint, over a checkpoint still whole) make Open verify the whole
// log and rebuild, but the checkpoint's position was durable all the
// same: taking no position at all, Open zeroed the damaged publish, one
// acknowledged under SyncAll, as a torn tail, and succeeded without
// Salvage, reporting it never fdatasynced. The refusal leaves the file as
// it was, for the Salvage it asks for to copy aside.
func TestAMarkerDoesNotTurnSyncedDamageIntoATornTail(t *testing.T) {
	opts := Options{Now: func() time.Time { return time.Unix(1_700_000_000, 0) }, SegmentBytes: MinSegmentBytes}
	ManualMaintenance(&opts)
	// The control: the same damage without a marker is refused.
	control, _ := crashWithSyncedDamage(t, opts, "")
	if s, err := Open(control, opts); err == nil {
		_ = s.Close()
		t.Fatal("control: damage to a record the checkpoint vouches for was not refused")
	} else if !errors.Is(err, Corrupt) {
		t.Fatalf("control: want Corrupt, got %v", err)
	}
	// SUSPECT: the store found damage while running, then the process
	// died. CHECKPOINTING: the process died while a later checkpoint was
	// being written (or one failed); the checkpoint in place is whole.
	for _, marker := range []string{"SUSPECT", "CHECKPOINTING"} {
		t.Run(marker, func(t *testing.T) {
			dir, seg := crashWithSyncedDamage(t, opts, marker)
			before, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, opts)
			if err == nil {
				defer s.Close()
				q, _ := s.Queue("a", PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Minute, MaxMessageBytes: 64})
				t.Fatalf("with index/%s, damage to a publish the checkpoint recorded as durable (acknowledged under SyncAll) was not refused with Corrupt: Open succeeded without Salvage, recovery %q, %d of 5 messages ready",
					marker, s.Recovery().String(), q.Stats().Ready)
			}
			if !errors.Is(err, Corrupt) {
				t.Fatalf("want Corrupt, got %v", err)
			}
			if after, err := os.ReadFile(seg); err != nil {
				t.Fatal(err)
			} else if !bytes.Equal(before, after) {
				t.Errorf("the Open that refused the damage changed %s (zeroed the damaged record as a torn tail first?)", seg)
			}
		})
	}
}
