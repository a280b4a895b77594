package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/broker"
)

// A segment file a later one follows, cut short (from outside, or by a
// file system that kept the size apart from the data), is sealed early by
// Salvage after its last intact record. Every message the checkpoint
// placed past that record is lost, and LostMessages names each: the span
// salvage reports runs to where the segment's records could reach. It
// used to end where the cut file ends (less the room for a seal), so that
// the messages whose records lay past the cut, the larger part of those
// lost, went unnamed.
func TestSalvageNamesEveryMessageOfASegmentCutShort(t *testing.T) {
	for _, c := range []struct {
		name string
		size int64 // what is left of the segment's file
	}{
		{"half", 8000},
		{"three quarters", 12000},
		{"too short for a seal after its last record", 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = 16384; broker.ManualMaintenance(o) })
			pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 500 })
			q := e.queue("jobs", pol)
			const published = 130
			for range published {
				if _, err := q.Publish(ctx(t), []byte(strings.Repeat("x", 300))); err != nil {
					t.Fatal(err)
				}
			}
			e.close() // a checkpoint holding all 130 live
			segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
			if err != nil || len(segs) < 3 {
				t.Fatalf("setup: want three segments, got %v (%v)", segs, err)
			}
			if err := os.Truncate(segs[1], c.size); err != nil {
				t.Fatal(err)
			}
			e.opts.Salvage = true
			s, err := broker.Open(e.dir, e.opts)
			if err != nil {
				t.Fatalf("Open with Salvage: %v", err)
			}
			e.s = s
			left := e.queue("jobs", pol).Stats().Ready
			rep := s.Recovery()
			if left == published {
				t.Fatalf("setup: nothing was lost")
			}
			if len(rep.LostMessages) != published-left {
				t.Fatalf("Salvage sealed %s, cut to %d bytes, early: %d of %d messages are gone, but Recovery names %d (%q); want every message the checkpoint placed past the last intact record",
					filepath.Base(segs[1]), c.size, published-left, published, len(rep.LostMessages), rep.String())
			}
		})
	}
}
