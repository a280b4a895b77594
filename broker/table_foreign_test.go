package broker_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

var dumpPosRE = regexp.MustCompile(`(?m)^\s+(\d+): .* pos=(\S+) `)

// dumpPositions maps each message of a store's Dump to its position.
func dumpPositions(s *broker.Store) map[string]string {
	out := map[string]string{}
	for _, m := range dumpPosRE.FindAllStringSubmatch(broker.Dump(s), -1) {
		out[m[1]] = m[2]
	}
	return out
}

// TestATableFileOfAnotherStoreNeverHandsOutAnotherMessagesPayload: a
// table file from another store (a restore that mixed two stores' index
// files) passes every check of its own: its entries' checksums cover the
// sequence number and the entry's fields, not the store. Here the other
// store's entry of message 2 names this log's publish record of message 3.
// A Receive must not hand out message 2 with message 3's payload (a
// duplicate of one body, the other never delivered): reading the payload
// finds the record is another message's publish, and the store stops as
// damaged, with its checkpoint marked suspect, so that the next open
// rebuilds the index from the log.
func TestATableFileOfAnotherStoreNeverHandsOutAnotherMessagesPayload(t *testing.T) {
	const l = 20
	x := func(c string) string { return c + strings.Repeat("x", l-1) }
	a := newEnv(t)
	qa := a.queue("jobs", policy())
	mustPublish(t, qa, x("1"))
	mustPublish(t, qa, x("2"))
	mustPublish(t, qa, x("3"))
	posA := dumpPositions(a.s)
	a.close()

	// The other store: its first message's frame is as long as two of
	// this store's, so its entry of message 2 names this log's message 3.
	b := newEnv(t)
	qb := b.queue("jobs", policy())
	frame := posOffset(t, posA["2"]) - posOffset(t, posA["1"])
	long := strings.Repeat("y", frame+l) // a frame of 2*frame bytes
	mustPublish(t, qb, long)
	mustPublish(t, qb, x("5"))
	mustPublish(t, qb, x("6"))
	posB := dumpPositions(b.s)
	b.close()
	require.Equal(t, posA["3"], posB["2"], "the setup: the other store's entry of message 2 must name this store's message 3 (A %v, B %v)", posA, posB)

	tbl := filepath.Join("index", "tbl-000000000000.idx")
	data, err := os.ReadFile(filepath.Join(b.dir, tbl))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(a.dir, tbl), data, 0o600))

	// The other store's entries verify on their own: Open takes them.
	// The first Receive hands out message 1, whose entry is the same in
	// both; the second meets the entry of message 2, which names this
	// log's message 3, and stops the store rather than hand it out.
	s, err := broker.Open(a.dir, a.opts)
	require.NoError(t, err)
	a.s = s
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	ds, err := q.Receive(context.Background(), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, x("1"), string(ds[0].Message.Payload))
	ds, err = q.Receive(context.Background(), 1)
	require.ErrorIs(t, err, broker.Corrupt, "message 2's entry names message 3's record: want the store stopped as damaged, got %d deliveries %v", len(ds), ids(ds))
	require.Empty(t, ds)
	require.Contains(t, err.Error(), "the index is damaged")
	require.ErrorIs(t, s.Err(), broker.Corrupt)
	a.close()

	// The next open rebuilds the index from the log: every message with
	// its own payload, once the leases taken meanwhile lapsed.
	a.open()
	q = a.queue("jobs", policy())
	a.clock.Advance(time.Hour)
	got := map[string]string{}
	for len(got) < 3 {
		ds, err := q.Receive(context.Background(), 3)
		require.NoError(t, err)
		require.NotEmpty(t, ds, "after the rebuild, delivered only %v", got)
		for _, d := range ds {
			got[d.Message.ID] = string(d.Message.Payload)
		}
	}
	for id, p := range got {
		seq, _ := broker.MessageSeq(id)
		require.Equal(t, x(strconv.FormatUint(seq, 10)), p, "message %s after the rebuild", id)
	}
}

// posOffset is the offset of a position Dump printed ("seg:off").
func posOffset(t *testing.T, pos string) int {
	t.Helper()
	_, off, ok := strings.Cut(pos, ":")
	require.True(t, ok, pos)
	n, err := strconv.Atoi(off)
	require.NoError(t, err)
	return n
}
