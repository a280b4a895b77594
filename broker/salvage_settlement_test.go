package broker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/wal"
)

// salvagedWithout publishes a, b and c, receives them, settles b with
// settle and acks a and c, publishes d and checkpoints; then it damages
// the log's first record of kind in a copy of the store as a process
// kill leaves it, checks that Open refuses the copy with Corrupt, and
// returns it opened with Salvage, b's ID and the clock's pointer.
func salvagedWithout(t *testing.T, kind index.Kind, settle func(q *Queue, d DeliveryValue) error) (*Store, string, *time.Time) {
	t.Helper()
	now := time.Unix(1_700_000_000, 0)
	opts := Options{Now: func() time.Time { return now }, SegmentBytes: 4 * MinSegmentBytes}
	ManualMaintenance(&opts)
	ctx := context.Background()

	orig := t.TempDir()
	s, err := Open(orig, opts)
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Queue("jobs", settlementPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b", "c"} {
		if _, err := q.Publish(ctx, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := q.Receive(ctx, 3)
	if err != nil || len(ds) != 3 {
		t.Fatalf("Receive: %d deliveries, %v", len(ds), err)
	}
	// b's settlement comes first, then the others' acks.
	if err := settle(q, ds[1]); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		if err := q.Ack(ctx, ds[i].Lease.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	b := ds[1].Message.ID
	if _, err := q.Publish(ctx, []byte("d")); err != nil {
		t.Fatal(err)
	}
	if err := s.Maintain(); err != nil { // the settlement is before the checkpoint's position
		t.Fatal(err)
	}
	var ackAt wal.Position
	var ackLen int
	if err := s.log.Iterate(0, func(pos wal.Position, rec []byte) error {
		if ackLen == 0 && index.Kind(rec[0]) == kind {
			ackAt, ackLen = pos, len(rec)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ackLen == 0 {
		t.Fatalf("no record of kind %v in the log", kind)
	}
	seg := s.log.SegmentPath(ackAt.Segment())
	crash := filepath.Join(t.TempDir(), "crash")
	copyStoreDir(t, orig, crash) // the files as a process kill leaves them
	_ = s.Close()
	path := filepath.Join(crash, filepath.Base(seg))
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[ackAt.Offset()+segment.Size(ackLen)-2] ^= 0x5a // inside the record's body
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	if s, err := Open(crash, opts); err == nil {
		_ = s.Close()
		t.Fatal("the damaged ack was not refused without Salvage")
	} else if !errors.Is(err, Corrupt) {
		t.Fatalf("without Salvage: want Corrupt, got %v", err)
	}
	sopts := opts
	sopts.Salvage = true
	s, err = Open(crash, sopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rec := s.Recovery()
	if rec.SalvagedSpans != 1 {
		t.Fatalf("salvaged spans: %d, want 1 (%s)", rec.SalvagedSpans, rec)
	}
	if slices.Contains(rec.LostMessages, b) {
		t.Fatalf("b is listed lost (%s); it was settled, only its settlement is gone", rec)
	}
	return s, b, &now
}

var settlementPolicy = PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Minute, MaxMessageBytes: 64}

// TestASalvageThatSkipsAnAckDeliversItsMessageAgain pins what
// Options.Salvage says of a skipped span that held a settlement rather
// than a publish: the message is as the records left say (here leased,
// its ack gone), so it is delivered again once its lease lapses, and it
// is not listed lost (nothing of it was lost: it was processed).
func TestASalvageThatSkipsAnAckDeliversItsMessageAgain(t *testing.T) {
	ctx := context.Background()
	s, b, now := salvagedWithout(t, index.KindAck, func(q *Queue, d DeliveryValue) error {
		return q.Ack(ctx, d.Lease.Receipt)
	})
	q, err := s.Queue("jobs", settlementPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Leased != 1 || st.Ready != 1 {
		t.Fatalf("after the salvage: %d leased, %d ready; want b leased again (its ack skipped) and d ready", st.Leased, st.Ready)
	}
	*now = now.Add(settlementPolicy.VisibilityTimeout)
	ds, err := q.Receive(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, string(d.Message.Payload))
		if d.Message.ID == b && d.Deliveries != 2 {
			t.Fatalf("b delivered again as delivery %d, want 2", d.Deliveries)
		}
	}
	if !slices.Equal(got, []string{"b", "d"}) {
		t.Fatalf("received %q after the lease lapsed; want b (its ack skipped) again, then d", got)
	}
}

// TestASalvageThatSkipsADeletionBringsTheDeadLetterBack: the same for a
// dead letter's deletion: the dead letter is back, and not listed lost.
func TestASalvageThatSkipsADeletionBringsTheDeadLetterBack(t *testing.T) {
	ctx := context.Background()
	s, b, _ := salvagedWithout(t, index.KindDelete, func(q *Queue, d DeliveryValue) error {
		if err := q.Reject(ctx, d.Lease.Receipt, errors.New("no")); err != nil {
			return err
		}
		return q.DeleteDeadLetter(ctx, d.Message.ID)
	})
	q, err := s.Queue("jobs", settlementPolicy)
	if err != nil {
		t.Fatal(err)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Message.ID != b || string(dls[0].Message.Payload) != "b" {
		t.Fatalf("dead letters after the salvage: %+v; want b back (its deletion skipped)", dls)
	}
	if st := q.Stats(); st.Ready != 1 || st.Leased != 0 {
		t.Fatalf("after the salvage: %d ready, %d leased; want d alone, ready", st.Ready, st.Leased)
	}
}
