package broker_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// TestAStoreFreesTheDedupKeysItEvicts: the file-backed queue, like Memory
// (TestMemoryFreesTheDedupKeysItDrops), must not keep the dedup keys a
// keyed publish evicted (the index's eviction heap left each popped slot
// in its backing array, holding the key until a later push overwrote it).
func TestAStoreFreesTheDedupKeysItEvicts(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.DedupWindow = time.Minute }))
	const n = 1000
	var freed atomic.Int64
	func() {
		for i := range n {
			key := watchedKey(i, &freed)
			if _, err := q.PublishKeyed(t.Context(), key, nil); err != nil {
				t.Fatal(err)
			}
		}
	}()
	for {
		ds, err := q.Receive(t.Context(), 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			if err := q.Ack(t.Context(), d.Lease.Receipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.clock.Advance(2 * time.Minute)
	if _, err := q.PublishKeyed(t.Context(), "fresh", nil); err != nil {
		t.Fatal(err)
	}
	requireKeysFreed(t, &freed, n)
	runtime.KeepAlive(q)
}

// TestABatchThatRotatesIsAllOrNothingAcrossPowerLoss: a batch that needs
// a rotation is all or nothing across power losses, as one that does not
// (TestPublishBatchAllOrNothingAcrossPowerLoss).
func TestABatchThatRotatesIsAllOrNothingAcrossPowerLoss(t *testing.T) {
	cfs := vfs.NewCrashFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) {
		o.FS = cfs
		o.Sync = broker.SyncNone
		o.SyncInterval = time.Hour
		o.SegmentBytes = broker.MinSegmentBytes
	})
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 4096 })
	q := e.queue("jobs", pol)
	// Fill the first segment.
	for e.s.Stats().Segments < 2 {
		mustPublish(t, q, string(bytes.Repeat([]byte("p"), 3000)))
	}
	batch := make([][]byte, 6)
	for i := range batch {
		batch[i] = bytes.Repeat([]byte{byte('a' + i)}, 1500)
	}
	segBefore := e.s.Stats().Segments
	// Publish until a batch rotates
	var ms []broker.MessageValue
	for e.s.Stats().Segments == segBefore {
		var err error
		ms, err = q.PublishBatch(ctx(t), batch)
		require.NoError(t, err)
	}
	want := map[string]bool{}
	for _, m := range ms {
		want[m.ID] = true
	}
	found := map[int]int{}
	check := func(c *env, what string) {
		cq := c.queue("jobs", pol)
		n := 0
		for {
			ds := mustReceive(t, cq, 100)
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				if want[d.Message.ID] {
					n++
				}
			}
		}
		require.True(t, n == 0 || n == len(batch), "%s: %d of the batch's %d messages survived", what, n, len(batch))
		found[n]++
		c.close()
	}
	for seed := range uint64(30) {
		opts := []vfs.CrashOptions{
			{KeepUnsyncedFraction: 0.5, TearLastWrite: true},
			{KeepUnsyncedFraction: 0.8},
			{KeepUnsyncedFraction: 1},
		}[seed%3]
		opts.Rand = rand.New(rand.NewPCG(seed, 7))
		check(powerLoss(t, e, cfs, opts), fmt.Sprintf("seed %d", seed))
		if seed%5 == 0 {
			// Every fifth, the same power loss with unsynced names and
			// sizes kept apart from the data.
			mopts, state := metadataCrashOptions(int64(seed/5), "", opts.Rand.Uint64())
			check(powerLoss(t, e, cfs, mopts), fmt.Sprintf("seed %d, %s", seed, state))
		}
	}
	require.Positive(t, found[len(batch)], "some clones kept the batch: %v", found)
	require.Positive(t, found[0], "some lost it: %v", found)
}

// Concurrent keyed publishes on a queue with a Capacity, with checkpoints
// (which commit in-flight publishes and count them) running meanwhile: the
// counters add up exactly, and every key names one message.
func TestConcurrentKeyedPublishStatsAreExact(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncAll, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.Sync = mode; o.SegmentBytes = broker.MinSegmentBytes })
			q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.Capacity = 150; p.MaxMessageBytes = 512 }))
			const workers, per = 8, 60
			type res struct {
				key string
				id  string
				dup bool
				err error
			}
			out := make(chan res, workers*per)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range 20 {
					_ = e.s.Maintain()
				}
			}()
			var wg = make(chan struct{}, workers)
			for w := range workers {
				go func() {
					defer func() { wg <- struct{}{} }()
					for i := range per {
						k := fmt.Sprintf("k%d", (w*7+i)%90)
						m, err := q.PublishKeyed(ctx(t), k, []byte("x"))
						out <- res{k, m.ID, err == nil && m.Payload == nil, err}
					}
				}()
			}
			for range workers {
				<-wg
			}
			<-done
			close(out)
			ids := map[string]string{}
			var pub, dup, shed int64
			for r := range out {
				switch {
				case r.err != nil:
					require.ErrorIs(t, r.err, broker.QueueFull)
					shed++
				case r.dup:
					dup++
				default:
					pub++
				}
				if r.err == nil {
					if prev, ok := ids[r.key]; ok {
						require.Equal(t, prev, r.id, "key %s named two messages", r.key)
					}
					ids[r.key] = r.id
				}
			}
			st := q.Stats()
			require.Equal(t, [3]int64{pub, dup, shed}, [3]int64{st.Published, st.Duplicates, st.Shed}, "published, duplicates, shed")
			require.Equal(t, int(pub), st.Ready)
		})
	}
}

// Two stores driven by one sequence of keyed publishes, acks and clock
// moves (forwards and backwards); store B is reopened or rebuilt from the
// log at random (also while the clock is behind), with maintenance
// reclaiming segments. Every keyed publish must get the same verdict
// (duplicate or new) from both, also when B reopens while the clock is
// behind.
func TestKeyedVerdictsSurviveReopensWhileTheClockIsBehind(t *testing.T) {
	for run := range 3 {
		rng := rand.New(rand.NewPCG(uint64(run), 99))
		clock := newFakeClock()
		mk := func() (string, broker.Options, *broker.Store) {
			dir := t.TempDir()
			o := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes}
			broker.ManualMaintenance(&o)
			s, err := broker.Open(dir, o)
			require.NoError(t, err)
			return dir, o, s
		}
		pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024; p.DedupWindow = time.Minute })
		_, _, sa := mk()
		dirB, ob, sb := mk()
		qa, err := sa.Queue("jobs", pol)
		require.NoError(t, err)
		qb, err := sb.Queue("jobs", pol)
		require.NoError(t, err)
		lastA, lastB := map[string]string{}, map[string]string{}
		var hist []string
		for step := range 400 {
			switch op := rng.IntN(10); {
			case op < 5:
				k := fmt.Sprintf("k%d", rng.IntN(12))
				pay := bytes.Repeat([]byte("x"), 200+rng.IntN(600))
				ma, ea := qa.PublishKeyed(ctx(t), k, pay)
				mb, eb := qb.PublishKeyed(ctx(t), k, pay)
				require.NoError(t, ea)
				require.NoError(t, eb)
				da, db := ma.ID == lastA[k], mb.ID == lastB[k]
				hist = append(hist, fmt.Sprintf("%d t+%v pub %s dupA=%v dupB=%v", step, clock.Now().Sub(t0), k, da, db))
				require.Equal(t, da, db, "run %d step %d key %s: duplicate in A %v, in B %v\n%s", run, step, k, da, db, strings.Join(hist, "\n"))
				lastA[k], lastB[k] = ma.ID, mb.ID
			case op < 7:
				for _, q := range []*broker.Queue{qa, qb} {
					ds, err := q.Receive(ctx(t), 3)
					require.NoError(t, err)
					for _, d := range ds {
						require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
					}
				}
			case op < 8:
				d := time.Duration(rng.IntN(90)) * time.Second
				if rng.IntN(3) == 0 {
					d = -d
				}
				clock.Advance(d)
				hist = append(hist, fmt.Sprintf("clock %v", d))
			case op < 9:
				require.NoError(t, sb.Maintain())
				require.NoError(t, sa.Maintain())
			default:
				require.NoError(t, sb.Close())
				if rng.IntN(2) == 0 {
					require.NoError(t, os.RemoveAll(filepath.Join(dirB, "index")))
					hist = append(hist, "rebuild")
				} else {
					hist = append(hist, "reopen")
				}
				sb, err = broker.Open(dirB, ob)
				require.NoError(t, err)
				qb, err = sb.Queue("jobs", pol)
				require.NoError(t, err)
			}
		}
		require.NoError(t, sa.Close())
		require.NoError(t, sb.Close())
	}
}
