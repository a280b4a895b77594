package broker_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// indexFileBytes sums the sizes of the files under dir/index.
func indexFileBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	ents, err := os.ReadDir(filepath.Join(dir, "index"))
	require.NoError(t, err)
	for _, de := range ents {
		if !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		require.NoError(t, err)
		n += fi.Size()
	}
	return n
}

// StoreStats.IndexBytes is "table and checkpoint files": after a clean
// reopen the checkpoint file Close wrote is on disk and must be counted.
func TestStoreStatsIndexBytesCountsTheCheckpointAfterACleanReopen(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", policy())
	for i := range 10 {
		_, err := q.PublishKeyed(ctx(t), string(rune('a'+i)), []byte("x"))
		require.NoError(t, err)
	}
	require.NoError(t, e.s.Maintain())
	require.Equal(t, indexFileBytes(t, e.dir), e.s.Stats().IndexBytes, "after a checkpoint")

	e.reopen()
	require.Equal(t, indexFileBytes(t, e.dir), e.s.Stats().IndexBytes, "after a clean reopen: the checkpoint file is on disk")
}

// Concurrent PublishKeyed of one key: exactly one enqueues, every call
// returns the same ID and EnqueuedAt, and the counters say so.
func TestConcurrentKeyedPublishesOfOneKeyEnqueueOnce(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	const n = 32
	var wg sync.WaitGroup
	out := make([]broker.MessageValue, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = q.PublishKeyed(ctx(t), "k", []byte("p"))
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, out[0].ID, out[i].ID)
		requireSameInstant(t, out[0].EnqueuedAt, out[i].EnqueuedAt)
	}
	st := q.Stats()
	require.EqualValues(t, 1, st.Published)
	require.EqualValues(t, n-1, st.Duplicates)
	require.Equal(t, 1, st.Ready)
	mustReceiveOne(t, q)
	requireNoneReceivable(t, q)
}

// Counters count since open: a message whose last lease lapsed is counted
// DeadLettered by the process that saw it lapse. The process that opens
// the store afterwards did not move it (it lapsed before that open) and
// must not count it again: summed over restarts, the counter would say
// two messages died where one did.
func TestDeadLetteredCountsALapseBeforeOpenInNoLaterProcess(t *testing.T) {
	e := newEnv(t)
	p := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
	q := e.queue("jobs", p)
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Set(d.Lease.ExpiresAt)
	require.EqualValues(t, 1, q.Stats().DeadLettered, "this process saw the last lease lapse")

	e.reopen()
	q = e.queue("jobs", p)
	require.Equal(t, 1, q.Stats().DeadLetters, "the gauge still holds it")
	require.EqualValues(t, 0, q.Stats().DeadLettered, "nothing was dead-lettered since this open")
	require.Len(t, mustDeadLetters(t, q), 1)
	require.EqualValues(t, 0, q.Stats().DeadLettered, "sweeping what lapsed before the open moves nothing new")
}
