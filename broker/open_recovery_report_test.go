package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/broker"
)

// TestAnUnfinishedListWithAnOverflowingSpanIsRefused: the list of an
// unfinished salvage refuses a span that is no span of a segment, and
// DESIGN ("Recovery") says a list that does not read stops Open, Salvage
// or not, naming it. A span at offset MaxInt64 of length 1 must not pass
// for one by overflowing the sum of the two.
func TestAnUnfinishedListWithAnOverflowingSpanIsRefused(t *testing.T) {
	e := newEnv(t)
	mustPublish(t, e.queue("jobs", policy()), "x")
	e.close()
	salv := filepath.Join(e.dir, "salvage")
	if err := os.MkdirAll(salv, 0o700); err != nil {
		t.Fatal(err)
	}
	list := `{"spans":[{"file":"x","segment":1,"offset":9223372036854775807,"length":1,"cause":"c","copied_to":""}]}`
	if err := os.WriteFile(filepath.Join(salv, "unfinished.json"), []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := e.opts
	opts.Salvage = true
	s, err := broker.Open(e.dir, opts)
	if err == nil {
		rep := s.Recovery()
		_ = s.Close()
		t.Fatalf("Open with Salvage accepted salvage/unfinished.json listing %d bytes at offset 9223372036854775807 of segment 1 (no span of any segment; the same list with offset 2147483648 and length 0 is refused) and reported %q; want an error naming the list", 1, rep.String())
	}
	if !strings.Contains(err.Error(), "unfinished.json") {
		t.Fatalf("error does not name the list: %v", err)
	}
}

// TestTheRecoveryReportIsNotChangedByItsCaller: Store.Recovery returns
// what Open found and did, in slices and a map of the caller's own: a
// caller that works through the report (deleting each queue from
// LostByQueue once its producers have sent again) changes no later one.
func TestTheRecoveryReportIsNotChangedByItsCaller(t *testing.T) {
	e, id := twoQueueLog(t, false, "B")
	e.opts.Salvage = true
	e.open()
	first := e.s.Recovery()
	if len(first.LostMessages) != 1 || first.LostMessages[0] != id["B"] || len(first.LostByQueue["jobs"]) != 1 || len(first.SalvageCopies) == 0 {
		t.Fatalf("setup: want B (%s) lost in jobs, with a copy; got %v", id["B"], first)
	}
	want := first.String()
	first.LostMessages[0] = "tampered"
	first.SalvageCopies[0] = "tampered"
	delete(first.LostByQueue, "jobs")
	if got := e.s.Recovery(); got.String() != want || got.LostByQueue["jobs"] == nil {
		t.Fatalf("Recovery after its caller changed the report it returned:\n got %q (LostByQueue %v)\nwant %q", got.String(), got.LostByQueue, want)
	}
}
