package broker_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/broker"
)

// publishLostTail publishes 130 messages in 16 KiB segments, closes the
// store, has cut change the segment files, and opens the store with
// Salvage. It returns the IDs published.
func publishLostTail(t *testing.T, cut func(segs []string) error) (*env, broker.PolicyValue, map[string]bool) {
	t.Helper()
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = 16384; broker.ManualMaintenance(o) })
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 500 })
	q := e.queue("jobs", pol)
	taken := map[string]bool{}
	for range 130 {
		m, err := q.Publish(ctx(t), []byte(strings.Repeat("x", 300)))
		if err != nil {
			t.Fatal(err)
		}
		taken[m.ID] = true
	}
	e.close()
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("setup: want three segments, got %v (%v)", segs, err)
	}
	if err := cut(segs); err != nil {
		t.Fatal(err)
	}
	e.opts.Salvage = true
	e.open()
	if len(e.s.Recovery().LostMessages) == 0 {
		t.Fatalf("setup: the salvage reported no lost message: %v", e.s.Recovery())
	}
	return e, pol, taken
}

// A salvage that cuts the log's tail takes the publishes of the last
// sequences handed out; the next sequence the rebuilt index draws from the
// log must still be above them (IDs are "unique in the store, never
// reused"), and stay so for a later Open that rebuilds from the log alone.
func TestASalvagedTailHandsOutNoIDAgain(t *testing.T) {
	for _, c := range []struct {
		name string
		cut  func(segs []string) error
	}{
		{"cut short", func(segs []string) error { return os.Truncate(segs[len(segs)-1], 5000) }},
		{"zeroed", func(segs []string) error { return zeroFrom(segs[len(segs)-1], 5000) }},
		{"deleted", func(segs []string) error { return os.Remove(segs[len(segs)-1]) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, pol, taken := publishLostTail(t, c.cut)
			lost := e.s.Recovery().LostMessages
			m := mustPublish(t, e.queue("jobs", pol), "new")
			if taken[m.ID] {
				t.Fatalf("after Salvage cut the log's tail (reporting %s), a new publish got ID %s, which a message published before had (reported lost: %v): IDs are never reused",
					e.s.Recovery().String(), m.ID, slices.Contains(lost, m.ID))
			}

			// Closed before any publish, its index gone, the store
			// rebuilds from the log at the next Open: the raised next
			// sequence must be in the log.
			e, pol, taken = publishLostTail(t, c.cut)
			e.close()
			if err := os.RemoveAll(filepath.Join(e.dir, "index")); err != nil {
				t.Fatal(err)
			}
			e.opts.Salvage = false
			e.open()
			m = mustPublish(t, e.queue("jobs", pol), "new")
			if taken[m.ID] {
				t.Fatalf("an Open that rebuilt the index from the log after a salvage handed out ID %s again: the next sequence the salvage raised is not in the log", m.ID)
			}
		})
	}
}

// zeroFrom overwrites the file at path with zeros from offset off to its end.
func zeroFrom(path string, off int64) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(make([]byte, fi.Size()-off), off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
