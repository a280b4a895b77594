package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// drainState receives every message q holds and returns each as its ID
// and payload, in the order they came.
func drainState(t *testing.T, q *broker.Queue) []string {
	t.Helper()
	var out []string
	for _, d := range mustReceive(t, q, 100) {
		out = append(out, d.Message.ID+"="+string(d.Message.Payload))
	}
	return out
}

// A salvaged store is an ordinary store afterwards: a second Open with
// Salvage finds nothing more to skip (the padding reads as intact: no
// span, no lost message, no copy, and the messages salvage kept are still
// there), an Open without Salvage opens it, and a Backup of it opens to
// the same state and needs no Salvage either.
func TestASalvagedStoreSalvagedAgainBackedUpAndReopenedKeepsWhatTheFirstSalvageKept(t *testing.T) {
	e, a, c, file := corruptLog(t)
	e.opts.Salvage = true
	s := e.open()
	first := s.Recovery()
	require.Equal(t, 1, first.SalvagedSpans, "the first salvage skips B's record")
	require.Equal(t, []string{e.lostB}, first.LostMessages)
	e.close()
	copies, err := filepath.Glob(filepath.Join(e.dir, "salvage", "*"))
	require.NoError(t, err)
	require.Len(t, copies, 1, "one copy of %s", file)
	copyBefore, err := os.ReadFile(copies[0])
	require.NoError(t, err)

	// Salvage again: nothing left to repair.
	s = e.open()
	again := s.Recovery()
	require.Zero(t, again.SalvagedSpans, "a second salvage skips nothing: %s", again)
	require.Empty(t, again.LostMessages)
	require.Empty(t, again.SalvageCopies)
	require.Zero(t, s.Stats().OwnRecords, "nothing salvaged: no salvaged event written")
	e.close()
	copiesAfter, err := filepath.Glob(filepath.Join(e.dir, "salvage", "*"))
	require.NoError(t, err)
	require.Equal(t, copies, copiesAfter, "the second salvage copied nothing aside, and removed nothing")
	copyAfter, err := os.ReadFile(copies[0])
	require.NoError(t, err)
	require.Equal(t, copyBefore, copyAfter, "the damaged file's copy is kept as it was")

	// Without Salvage, and a Backup of it, also without.
	e.opts.Salvage = false
	s = e.open()
	require.Zero(t, s.Recovery().SalvagedSpans)
	backup := filepath.Join(t.TempDir(), "backup")
	require.NoError(t, s.Backup(ctx(t), backup))
	q := e.queue("jobs", policy())
	want := []string{a.ID + "=" + strings.Repeat("A", 300), c.ID + "=" + strings.Repeat("C", 300)}
	require.Equal(t, want, drainState(t, q), "the reopened salvaged store holds A and C, never B")

	b, err := broker.Open(backup, broker.Options{Now: e.clock.Now, SegmentBytes: testSegmentBytes})
	require.NoError(t, err, "the backup of a salvaged store opens without Salvage")
	defer b.Close()
	require.Zero(t, b.Recovery().SalvagedSpans)
	require.False(t, b.Recovery().IndexRebuilt, "the backup's index is used as it was copied")
	bq, err := b.Queue("jobs", policy())
	require.NoError(t, err)
	require.Equal(t, want, drainState(t, bq), "the backup holds what the store held")
	mustPublish(t, bq, "after")
	next := mustPublish(t, q, "after")
	require.NotEqual(t, e.lostB, next.ID, "no ID salvage reported lost is handed out again")
	_, err = os.Stat(filepath.Join(backup, "salvage"))
	require.ErrorIs(t, err, os.ErrNotExist, "a Backup does not copy the salvage directory")
}
