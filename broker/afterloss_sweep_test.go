package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// TestAStoreReopenedAfterAPowerLossKeepsALogThatReplaysAlone: a store
// loses power at a random file operation, under each sync mode; the clone
// the device holds is reopened and worked on (publishes, consumption,
// maintenance: checkpoints, copy forward, segment removal), then closed.
// It must open from its checkpoint and from its log alone with the same
// state. Half the cases first restart on the page cache the crash left
// (a process crash), work on and then lose power. Every eighth case also
// checks a clone of the same power loss with unsynced names and sizes
// kept apart from the data (metadataStates).
// WALBROKER_AFTERLOSS_CASES sets the number of cases (default 30),
// WALBROKER_AFTERLOSS_SEED the first seed (logged).
func TestAStoreReopenedAfterAPowerLossKeepsALogThatReplaysAlone(t *testing.T) {
	cases := 30
	if v, err := strconv.Atoi(os.Getenv("WALBROKER_AFTERLOSS_CASES")); err == nil {
		cases = v
	}
	if testing.Short() {
		cases = 6
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("WALBROKER_AFTERLOSS_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (WALBROKER_AFTERLOSS_SEED), %d cases", seed, cases)
	modes := []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}
	for i := 0; i < cases; i++ {
		cs := seed + uint64(i)
		mode := modes[i%len(modes)]
		if msg := afterLossCase(t, cs, mode, i%8 == 5); msg != "" {
			t.Fatalf("seed %d, mode %v: %s", cs, mode, msg)
		}
	}
}

// lossJournal records what calls returned: publishes, and the acks and
// deletions attempted (tried) and returned (done).
type lossJournal struct {
	published, tried, done map[uint64]bool
}

func newLossJournal() *lossJournal {
	return &lossJournal{published: map[uint64]bool{}, tried: map[uint64]bool{}, done: map[uint64]bool{}}
}

func (j *lossJournal) seq(id string) uint64 {
	n, _ := broker.MessageSeq(id)
	return n
}

// afterLossWork runs n random calls on the queues of s.
func afterLossWork(s *broker.Store, rng *rand.Rand, now *time.Time, n int, j *lossJournal) error {
	ctx := context.Background()
	pol := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 2, RetryDelay: time.Second, MaxMessageBytes: 4096, DedupWindow: time.Hour}
	var qs []*broker.Queue
	for _, name := range []string{"a", "b", "c"} {
		q, err := s.Queue(name, pol)
		if err != nil {
			return err
		}
		qs = append(qs, q)
	}
	var held []struct {
		q *broker.Queue
		d broker.DeliveryValue
	}
	for i := 0; i < n; i++ {
		q := qs[rng.IntN(len(qs))]
		var err error
		switch r := rng.IntN(100); {
		case r < 35:
			var m broker.MessageValue
			if m, err = q.Publish(ctx, make([]byte, 50+rng.IntN(900))); err == nil {
				j.published[j.seq(m.ID)] = true
			}
		case r < 45:
			var m broker.MessageValue
			if m, err = q.PublishKeyed(ctx, fmt.Sprintf("k%d", rng.IntN(20)), make([]byte, 100)); err == nil {
				j.published[j.seq(m.ID)] = true
			}
		case r < 65:
			var ds []broker.DeliveryValue
			ds, err = q.Receive(ctx, 1+rng.IntN(3))
			for _, d := range ds {
				held = append(held, struct {
					q *broker.Queue
					d broker.DeliveryValue
				}{q, d})
			}
		case r < 90 && len(held) > 0:
			k := rng.IntN(len(held))
			h := held[k]
			held = append(held[:k], held[k+1:]...)
			switch rng.IntN(4) {
			case 0, 1:
				j.tried[j.seq(h.d.Message.ID)] = true
				if err = h.q.Ack(ctx, h.d.Lease.Receipt); err == nil {
					j.done[j.seq(h.d.Message.ID)] = true
				}
			case 2:
				_, err = h.q.Nack(ctx, h.d.Lease.Receipt, errors.New("retry"))
			case 3:
				err = h.q.Reject(ctx, h.d.Lease.Receipt, errors.New("bad"))
			}
			if errors.Is(err, broker.LeaseExpired) {
				err = nil
			}
		case r < 93:
			var dls []broker.DeadLetterValue
			dls, err = q.DeadLetters(ctx, 2)
			for _, dl := range dls {
				if err == nil {
					if rng.IntN(2) == 0 {
						err = q.ReplayDeadLetter(ctx, dl.Message.ID)
					} else {
						j.tried[j.seq(dl.Message.ID)] = true
						if err = q.DeleteDeadLetter(ctx, dl.Message.ID); err == nil {
							j.done[j.seq(dl.Message.ID)] = true
						}
					}
				}
			}
		case r < 97:
			*now = now.Add(time.Duration(rng.IntN(90)) * time.Second)
		default:
			err = s.Maintain()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// afterLossCase runs the case of seed under mode; with metadata, it also
// checks a second clone of the same power loss, in one of the
// metadataStates.
func afterLossCase(t *testing.T, seed uint64, mode broker.SyncMode, metadata bool) string {
	ctx := context.Background()
	_ = ctx
	rng := rand.New(rand.NewPCG(seed, 7))
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	cfs := vfs.NewCrashFS(vfs.Default)
	cfs.CrashAfter(int64(50 + rng.IntN(400)))
	opts := broker.Options{Now: clock, SegmentBytes: broker.MinSegmentBytes, Sync: mode, SyncInterval: time.Duration(1+rng.IntN(5)) * time.Millisecond, FS: cfs}
	broker.ManualMaintenance(&opts)
	j := newLossJournal()
	if s, err := broker.Open(dir, opts); err == nil {
		_ = afterLossWork(s, rng, &now, 400, j)
		cfs.Crash()
		_ = s.Close()
	}
	cfs.Crash()
	if rng.IntN(2) == 0 {
		// The process died and restarts on the page cache; it works
		// on, and the power goes at another random operation.
		cfs.Restart()
		cfs.CrashAfter(cfs.Ops() + int64(20+rng.IntN(400)))
		if s, err := broker.Open(dir, opts); err == nil {
			_ = afterLossWork(s, rng, &now, 300, j)
			for range 2 {
				_ = s.Maintain()
			}
			cfs.Crash()
			_ = s.Close()
		}
		cfs.Crash()
	}
	clone := filepath.Join(root, "clone")
	co := []vfs.CrashOptions{{}, {KeepUnsyncedFraction: 0.5, TearLastWrite: true}, {KeepUnsyncedFraction: 1},
		{KeepUnsyncedFraction: 0.5, BlockSize: 512}}[rng.IntN(4)]
	co.Root, co.Rand = dir, rand.New(rand.NewPCG(seed, 8))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err.Error()
	}
	if err := cfs.CrashClone(clone, co); err != nil {
		return "CrashClone: " + err.Error()
	}
	if msg := afterLossClone(t, clone, clock, &now, rng, j, mode); msg != "" {
		return msg
	}
	if !metadata {
		return ""
	}
	// The same power loss as file systems that commit names and sizes
	// apart from the data may leave it; its Rand is drawn from the first
	// clone's, so that the seeds keep their meaning.
	mopts, state := metadataCrashOptions(int64(seed), dir, co.Rand.Uint64())
	mclone := filepath.Join(root, "metadata-clone")
	if err := cfs.CrashClone(mclone, mopts); err != nil {
		return "CrashClone: " + err.Error()
	}
	if msg := afterLossClone(t, mclone, clock, &now, rand.New(rand.NewPCG(mopts.Rand.Uint64(), 9)), j, mode); msg != "" {
		return "a clone of " + state + ": " + msg
	}
	return ""
}

// afterLossClone checks the clone a power loss left against the journal,
// works on it and checks that it opens from its checkpoint and from its
// log alone with the same state.
func afterLossClone(t *testing.T, clone string, clock func() time.Time, now *time.Time, rng *rand.Rand, j *lossJournal, mode broker.SyncMode) string {
	opts2 := broker.Options{Now: clock, SegmentBytes: broker.MinSegmentBytes, Sync: mode, SyncInterval: time.Millisecond}
	broker.ManualMaintenance(&opts2)
	s, err := broker.Open(clone, opts2)
	if err != nil {
		return "the clone does not open: " + err.Error()
	}
	if msg := checkLossJournal(broker.Dump(s), j, mode); msg != "" {
		_ = s.Close()
		return msg
	}
	if err := afterLossWork(s, rng, now, 300, newLossJournal()); err != nil {
		_ = s.Close()
		return "work after the reopen: " + err.Error()
	}
	for range 3 {
		if err := s.Maintain(); err != nil {
			_ = s.Close()
			return "maintain: " + err.Error()
		}
	}
	if err := s.Close(); err != nil {
		return "close: " + err.Error()
	}
	alone := clone + "-alone"
	copyTree(t, clone, alone)
	if err := os.RemoveAll(filepath.Join(alone, "index")); err != nil {
		return err.Error()
	}
	dump := func(d string) (string, error) {
		o := broker.Options{Now: clock, SegmentBytes: broker.MinSegmentBytes}
		broker.ManualMaintenance(&o)
		s, err := broker.Open(d, o)
		if err != nil {
			return "", err
		}
		defer s.Close()
		return broker.Dump(s), nil
	}
	a, err := dump(clone)
	if err != nil {
		return "reopen: " + err.Error()
	}
	b, err := dump(alone)
	if err != nil {
		return "reopen from the log alone: " + err.Error()
	}
	if a != b {
		return fmt.Sprintf("from the checkpoint and from the log alone the store differs:\n%s\n---\n%s", a, b)
	}
	require.NotEmpty(t, a)
	return ""
}

// checkLossJournal checks the state a power loss left against what the
// mode promises: under SyncAll and SyncPublish every publish that returned
// is there unless an ack or a deletion of it was tried; under SyncAll no
// message whose ack or deletion returned is.
func checkLossJournal(dump string, j *lossJournal, mode broker.SyncMode) string {
	held := map[uint64]bool{}
	for _, line := range strings.Split(dump, "\n") {
		if i := strings.Index(line, ": state="); i > 0 {
			if n, err := strconv.ParseUint(strings.TrimSpace(line[:i]), 10, 64); err == nil {
				held[n] = true
			}
		}
	}
	if mode == broker.SyncNone {
		return ""
	}
	for seq := range j.published {
		if !held[seq] && !j.tried[seq] {
			return fmt.Sprintf("message %d, whose publish returned, is gone:\n%s", seq, dump)
		}
	}
	if mode == broker.SyncAll {
		for seq := range j.done {
			if held[seq] {
				return fmt.Sprintf("message %d, whose ack or deletion returned, is back:\n%s", seq, dump)
			}
		}
	}
	return ""
}
