package broker

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// With no index at all after a crash, nothing but later frames says how
// far the log was durable, and the last durable batch of the last segment
// has none after it: damage to a publish there (acknowledged under
// SyncAll) is zeroed as a torn tail, Salvage or not, with no span and no
// lost message reported. Two faults (the index lost, and synced bytes
// with it) make it; kept, and written down in DESIGN.md ("A torn tail is
// only a tail" under "Recovery"). With the index, the same damage is
// refused (TestAMarkerDoesNotTurnSyncedDamageIntoATornTail's control).
func TestWithNoIndexSyncedDamageAtTheTailIsCutAsATornTailEvenUnderSalvage(t *testing.T) {
	opts := Options{Now: func() time.Time { return time.Unix(1_700_000_000, 0) }, SegmentBytes: MinSegmentBytes}
	ManualMaintenance(&opts)
	dir, _ := crashWithSyncedDamage(t, opts, "")
	if err := os.RemoveAll(filepath.Join(dir, "index")); err != nil {
		t.Fatal(err)
	}
	opts.Salvage = true
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open with Salvage and no index: %v", err)
	}
	defer s.Close()
	r := s.Recovery()
	if !r.TornTail || r.SalvagedSpans != 0 || len(r.LostMessages) != 0 {
		t.Errorf("with no index, damage to the last synced publish was reported as %q (torn tail %v, %d spans, lost %q), want a torn tail alone",
			r.String(), r.TornTail, r.SalvagedSpans, r.LostMessages)
	}
	q, err := s.Queue("a", PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Minute, MaxMessageBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Stats().Ready; got != 4 {
		t.Errorf("%d of 5 messages ready, want 4: the damaged publish cut as a torn tail", got)
	}
}
