package broker_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// Dedup keys past their window are forgotten by the store's maintenance,
// not only by the next keyed publish: a queue whose keyed publishes stop
// must not keep its last window's keys (and the records they pin) for
// good. The eviction is an event in the log, so a store rebuilt from its
// log forgets the same keys; and a round with nothing past the window
// writes nothing.
func TestExpiredKeysAreForgottenWithoutAnotherKeyedPublish(t *testing.T) {
	const window = time.Minute
	p := policy(func(p *broker.PolicyValue) { p.DedupWindow = window; p.MaxMessageBytes = 1024 })
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	q := e.queue("jobs", p)
	first := map[string]string{}
	for i := range 60 {
		k := fmt.Sprintf("k%02d", i)
		m, err := q.PublishKeyed(ctx(t), k, []byte(k+strings.Repeat("p", 600)))
		require.NoError(t, err)
		first[k] = m.ID
		require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
	}
	require.Equal(t, 60, broker.DedupKeys(q))

	e.clock.Advance(window) // exactly the window: every key is still remembered
	require.NoError(t, e.s.Maintain())
	require.Equal(t, 60, broker.DedupKeys(q), "a key is forgotten only when strictly older than the window")
	st := e.s.Stats()
	require.Positive(t, st.CopiedForward, "the keys of acknowledged messages are kept: copied forward from old segments")
	t.Logf("keys remembered: %d segments, %d records copied forward", st.Segments, st.CopiedForward)

	e.clock.Advance(time.Nanosecond)
	records := e.s.Stats().Records
	require.NoError(t, e.s.Maintain())
	require.Zero(t, broker.DedupKeys(q), "maintenance forgets the keys past the window")
	after := e.s.Stats()
	require.Equal(t, records+1, after.Records, "one eviction record")
	// Segments retired from now on hold nothing live: the keys are no
	// longer copied forward at every round.
	for i := range 100 {
		mustPublish(t, q, strings.Repeat("c", 600))
		require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
		if i%20 == 19 {
			require.NoError(t, e.s.Maintain())
		}
	}
	after = e.s.Stats()
	require.Equal(t, st.CopiedForward, after.CopiedForward, "nothing copied forward once the keys are forgotten")
	require.Greater(t, after.BytesReclaimed, st.BytesReclaimed, "segments were retired meanwhile")

	e.clock.Advance(time.Hour)
	records = e.s.Stats().Records
	require.NoError(t, e.s.Maintain())
	require.Equal(t, records, e.s.Stats().Records, "a round with no key past the window logs nothing")

	// The log alone says the keys are gone.
	e.close()
	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	e.open()
	q = e.queue("jobs", p)
	require.True(t, e.s.Recovery().IndexRebuilt)
	require.Zero(t, broker.DedupKeys(q), "a rebuild from the log forgets the same keys")
	m, err := q.PublishKeyed(ctx(t), "k00", []byte("new"))
	require.NoError(t, err)
	require.NotEqual(t, first["k00"], m.ID, "a forgotten key names a new message")
}

// Maintenance reads the clock like a keyed publish does: when the clock is
// behind a reading the store already saw, it evicts nothing, even keys
// older than the window by the clock's present reading, and logs nothing.
func TestMaintenanceEvictsNothingWhenTheClockWentBackwards(t *testing.T) {
	const window = time.Hour
	p := policy(func(p *broker.PolicyValue) { p.DedupWindow = window })
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", p)
	e.clock.Set(t0.Add(10 * time.Hour))
	late, err := q.PublishKeyed(ctx(t), "late", []byte("x")) // the broker has seen t0+10h
	require.NoError(t, err)
	e.clock.Set(t0) // the clock jumps back
	early, err := q.PublishKeyed(ctx(t), "early", []byte("a"))
	require.NoError(t, err)
	e.clock.Set(t0.Add(2 * time.Hour)) // "early" is 2 h old; the clock is behind t0+10h
	records := e.s.Stats().Records
	require.NoError(t, e.s.Maintain())
	require.Equal(t, 2, broker.DedupKeys(q))
	require.Equal(t, records, e.s.Stats().Records, "no eviction, no record")
	for key, orig := range map[string]broker.MessageValue{"early": early, "late": late} {
		dup, err := q.PublishKeyed(ctx(t), key, []byte("again"))
		require.NoError(t, err)
		require.Equal(t, orig.ID, dup.ID, "key %q is still remembered", key)
	}
}

// The in-memory broker forgets a key past its window at any call that
// reads the clock, not only at a keyed publish.
func TestMemoryForgetsExpiredKeysAtAnyCall(t *testing.T) {
	clock := newFakeClock()
	const window = time.Minute
	mem, err := broker.NewMemory(policy(func(p *broker.PolicyValue) { p.DedupWindow = window }), broker.MemoryOptions{Now: clock.Now})
	require.NoError(t, err)
	orig, err := mem.PublishKeyed(ctx(t), "k", []byte("a"))
	require.NoError(t, err)
	ds, err := mem.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.NoError(t, mem.Ack(ctx(t), ds[0].Lease.Receipt))

	clock.Advance(window)
	_, err = mem.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Equal(t, 1, broker.MemoryDedupKeys(mem), "a key exactly the window old is kept")

	clock.Advance(time.Nanosecond)
	_, err = mem.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Zero(t, broker.MemoryDedupKeys(mem), "a receive forgets the key past the window")
	m, err := mem.PublishKeyed(ctx(t), "k", []byte("b"))
	require.NoError(t, err)
	require.NotEqual(t, orig.ID, m.ID)
}
