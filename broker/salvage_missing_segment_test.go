package broker_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/broker"
)

// A store whose segment file is gone (the last, which the clean mark and
// the checkpoint recorded durable, or one between two others) is refused
// by a plain Open with Corrupt, which names Options.Salvage; Open with
// Salvage opens it, puts an empty segment in its place, and reports the
// loss: a salvaged span, and every message the checkpoint placed there in
// LostMessages. A plain Open after it opens the store as the salvage left
// it.
func TestSalvageOpensALogMissingASegmentAndReportsTheLoss(t *testing.T) {
	for _, c := range []struct {
		name  string
		which func(segs []string) string
	}{
		{"last", func(segs []string) string { return segs[len(segs)-1] }},
		{"middle", func(segs []string) string { return segs[1] }},
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
			e.close() // a checkpoint holding all 130 live, and the clean mark
			segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
			if err != nil || len(segs) < 3 {
				t.Fatalf("setup: want three segments, got %v (%v)", segs, err)
			}
			gone := c.which(segs)
			if err := os.Remove(gone); err != nil {
				t.Fatal(err)
			}
			_, err = broker.Open(e.dir, e.opts)
			if !errors.Is(err, broker.Corrupt) || !strings.Contains(err.Error(), "Options.Salvage may open the store") {
				t.Fatalf("Open without Salvage of a store missing %s: want Corrupt pointing to Options.Salvage, got %v", filepath.Base(gone), err)
			}
			e.opts.Salvage = true
			s, err := broker.Open(e.dir, e.opts)
			if err != nil {
				t.Fatalf("Open with Salvage (which \"refuses no damage\") of a store missing %s failed: %v", filepath.Base(gone), err)
			}
			e.s = s
			left := e.queue("jobs", pol).Stats().Ready
			rep := e.s.Recovery()
			if left == published {
				t.Fatalf("setup: nothing was lost")
			}
			if rep.SalvagedSpans == 0 || len(rep.LostMessages) != published-left {
				t.Fatalf("Salvage opened a store missing %s (which the clean mark and the checkpoint recorded durable): %d of %d messages are gone, but Recovery reports %q (%d salvaged spans, %d lost messages); want the loss reported as a salvaged span with the %d messages the checkpoint placed there in LostMessages",
					filepath.Base(gone), published-left, published, rep.String(), rep.SalvagedSpans, len(rep.LostMessages), published-left)
			}
			e.opts.Salvage = false
			e.reopen()
			if got := e.queue("jobs", pol).Stats().Ready; got != left {
				t.Fatalf("a plain Open after the salvage holds %d messages, want the %d the salvage left", got, left)
			}
		})
	}
}
