package broker_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/recovery"
	"github.com/walbroker/walbroker/vfs"
)

// A checkpoint taken before a salvage repaired the log (an older copy of
// index/ put back, which holds the same secret and a position inside the
// log) is not a projection of the log as it is: the salvage padded over
// the record of a message the checkpoint holds. Open must not take it for
// the log's state: the message the salvage reported lost must not come
// back, counted Ready and failing the Receive that reaches it.
func TestCheckpointFromBeforeASalvageIsNotTakenForTheLogsState(t *testing.T) {
	e, a, c, _ := corruptLog(t) // B's record damaged; the checkpoint holds A, B, C
	old := t.TempDir()
	require.NoError(t, recovery.CopyTree(filepath.Join(e.dir, "index"), filepath.Join(old, "index")))

	e.opts.Salvage = true
	s := e.open()
	require.Contains(t, s.Recovery().LostMessages, e.lostB, "the salvage reports B lost")
	e.close()
	e.opts.Salvage = false
	e.open()
	e.close()

	swapIndex(t, old, e.dir) // the index from before the salvage
	s = e.open()
	t.Logf("rebuilt: %v, replayed %d", s.Recovery().IndexRebuilt, s.Recovery().Replayed)
	q := e.queue("jobs", policy())
	ready := q.Stats().Ready
	ds, err := q.Receive(ctx(t), 10)
	require.NoError(t, err, "every message the store holds can be read")
	require.ElementsMatch(t, []string{a.ID, c.ID}, ids(ds))
	require.Equal(t, 2, ready, "A and C: B's record is gone")
}

// The salvaging Open records in the log that it repaired it, before the
// checkpoint it ends with: that checkpoint, past the record, is used by
// the next Open as any other (no rebuild); an index from before the
// salvage put back is refused, and the warning says why; and a rebuild
// from the whole log (no index at all) passes over the record.
func TestAnIndexFromBeforeASalvageIsRebuiltFromAndOneFromAfterIsUsed(t *testing.T) {
	e, a, c, _ := corruptLog(t)
	old := t.TempDir()
	require.NoError(t, recovery.CopyTree(filepath.Join(e.dir, "index"), filepath.Join(old, "index")))
	e.opts.Salvage = true
	require.Equal(t, []string{e.lostB}, e.open().Recovery().LostMessages)
	e.close()
	e.opts.Salvage = false

	requireAAndC := func(s *broker.Store, what string) {
		t.Helper()
		q, err := s.Queue("jobs", policy())
		require.NoError(t, err)
		require.Equal(t, 2, q.Stats().Ready, what)
		ds, err := q.Receive(ctx(t), 10)
		require.NoError(t, err, what)
		require.ElementsMatch(t, []string{a.ID, c.ID}, ids(ds), what)
		e.clock.Advance(time.Minute) // the leases lapse: both ready again
	}
	var logs lockedBuffer
	e.opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	rebuilds := func() []string { // the reasons of the rebuilds logged
		var why []string
		for _, r := range logs.records(t) {
			if r["msg"] == "broker: rebuilding the index from the log" {
				why = append(why, fmt.Sprint(r["reason"]))
			}
		}
		return why
	}
	s := e.open()
	require.False(t, s.Recovery().IndexRebuilt, "the checkpoint the salvaging Open wrote is past its record: %v %q", s.Recovery(), rebuilds())
	requireAAndC(s, "from the checkpoint written after the salvage")
	e.close()

	swapIndex(t, old, e.dir)
	s = e.open()
	require.True(t, s.Recovery().IndexRebuilt, "%v", s.Recovery())
	require.Len(t, rebuilds(), 1)
	require.Contains(t, rebuilds()[0], "a salvage repaired the log after the last checkpoint was taken")
	requireAAndC(s, "rebuilt past an index from before the salvage")
	e.close()

	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	s = e.open()
	require.True(t, s.Recovery().IndexRebuilt)
	requireAAndC(s, "rebuilt from the whole log")
}

// Records less OwnRecords is what the callers' calls appended: what a
// salvaging Open records for itself (that it salvaged; the next sequence
// it raised past the publishes the salvage took) counts as the store's
// own, so a store no caller has touched since reports none of the
// callers'.
func TestASalvagingOpenCountsWhatItRecordsAsItsOwnRecords(t *testing.T) {
	for _, last := range []bool{false, true} {
		t.Run(fmt.Sprintf("last=%v", last), func(t *testing.T) {
			e := newEnv(t, broker.ManualMaintenance)
			q := e.queue("jobs", policy())
			mustPublish(t, q, "A")
			victim := []byte(strings.Repeat("B", 300))
			lost := mustPublish(t, q, string(victim))
			if !last {
				mustPublish(t, q, "C")
			}
			e.close()
			damagePayload(t, e.dir, victim)

			e.opts.Salvage = true
			s := e.open()
			require.Equal(t, []string{lost.ID}, s.Recovery().LostMessages)
			st := s.Stats()
			require.Equal(t, st.Records, st.OwnRecords, "no call was made since Open (%+v)", st)
			next := mustPublish(t, e.queue("jobs", policy()), "D")
			require.NotEqual(t, lost.ID, next.ID, "the ID of the message lost is never handed out again")
		})
	}
}

// A power loss at any point of a salvaging Open, or of the Close that
// follows it (which removes the log's list of the spans repaired), never
// leaves a log that an index from before the salvage is replayed forward
// over: with that index put back, the next Open (with Salvage, as an
// Open that finds the list asks for) holds only the intact message, and
// none whose record the salvage padded over.
func TestAPowerLossDuringASalvageNeverLeavesAnOlderIndexUsable(t *testing.T) {
	template, opts, intact, _, _ := damagedStore(t)
	old := filepath.Join(fastDir(t), "old")
	copyTree(t, filepath.Join(template, "index"), filepath.Join(old, "index"))

	copyOf := func() string {
		d := filepath.Join(fastDir(t), "store")
		copyTree(t, template, d)
		return d
	}
	// How many mutating operations a salvaging Open and its Close take.
	cfs := vfs.NewCrashFS(vfs.Default)
	salvage := opts
	salvage.Salvage, salvage.FS = true, cfs
	s, err := broker.Open(copyOf(), salvage)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	total := cfs.Ops()

	step := int64(1)
	if testing.Short() {
		step = 5
	}
	for k := int64(0); k <= total; k += step {
		for _, keep := range []float64{0, 1} {
			what := fmt.Sprintf("power lost after %d of %d operations, unsynced kept %v", k, total, keep)
			dir := copyOf()
			cfs := vfs.NewCrashFS(vfs.Default)
			cfs.CrashAfter(k)
			salvage.FS = cfs
			if s, err := broker.Open(dir, salvage); err == nil {
				_ = s.Close() // past the power loss, its writes fail
			}
			clone := filepath.Join(fastDir(t), "clone")
			require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir, KeepUnsyncedFraction: keep, Rand: rand.New(rand.NewPCG(uint64(k), 5))}), what)
			swapIndex(t, old, clone)

			salvage.FS = nil
			s, err := broker.Open(clone, salvage)
			require.NoError(t, err, what)
			q, err := s.Queue("stuck", stuckPolicy)
			require.NoError(t, err)
			require.Equal(t, 1, q.Stats().Ready, "%s: %v", what, s.Recovery())
			requireOnlyIntact(t, s, intact, what)
			require.NoError(t, s.Close())
		}
	}
	t.Logf("a power loss after each of the %d operations of a salvaging Open and its Close (every %d under -short)", total, step)
}

// An index from before a salvage whose position falls inside the span the
// salvage padded over (the damage took the records on both sides of it)
// gives the replay nowhere to start: Open failed with "no frame starts
// there", Salvage or not, until the index was removed by hand. The
// salvaged event after it says why, and Open rebuilds from the log.
func TestAnIndexWhosePositionASalvagePaddedOverIsRebuiltFrom(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	a := mustPublish(t, q, strings.Repeat("A", 300))
	b := []byte(strings.Repeat("B", 300))
	mustPublish(t, q, string(b))
	e.close() // the checkpoint's position is just past B's record
	old := t.TempDir()
	require.NoError(t, recovery.CopyTree(filepath.Join(e.dir, "index"), filepath.Join(old, "index")))
	c := []byte(strings.Repeat("C", 300))
	e.open()
	mustPublish(t, e.queue("jobs", policy()), string(c)) // its record starts there
	e.close()
	damagePayload(t, e.dir, b)
	damagePayload(t, e.dir, c)

	e.opts.Salvage = true
	rep := e.open().Recovery()
	require.Equal(t, 1, rep.SalvagedSpans, "one span, from B's record to past C's: %v", rep)
	require.Len(t, rep.LostMessages, 2)
	e.close()
	e.opts.Salvage = false

	swapIndex(t, old, e.dir)
	var logs lockedBuffer
	e.opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	s := e.open()
	require.True(t, s.Recovery().IndexRebuilt, "%v", s.Recovery())
	var why []string
	for _, r := range logs.records(t) {
		if r["msg"] == "broker: rebuilding the index from the log" {
			why = append(why, fmt.Sprint(r["reason"]))
		}
	}
	require.Len(t, why, 1)
	require.Contains(t, why[0], "a salvage repaired the log after the last checkpoint was taken")
	require.Contains(t, why[0], "padded over")
	q = e.queue("jobs", policy())
	require.Equal(t, 1, q.Stats().Ready)
	ds, err := q.Receive(ctx(t), 10)
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, ids(ds))
}
