package broker_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

var reclaimPosRE = regexp.MustCompile(`(pos|size)=\S+ `)

// TestReclaimKeepsStateAcrossRebuilds drives random traffic (keys, leases,
// extends, nacks, rejects, replays, deletes, policy changes, under SyncAll
// and SyncNone) with frequent maintenance and checks that reclamation
// changes nothing but positions and record sizes, and that a reopen from
// the checkpoint and a full rebuild (index/ removed) after it restore the
// same state, LiveBytes, accept the same receipts, and hand out no ID
// twice.
func TestReclaimKeepsStateAcrossRebuilds(t *testing.T) {
	for seed := uint64(1); seed <= 1; seed++ {
		for _, mode := range []broker.SyncMode{broker.SyncAll, broker.SyncNone} {
			t.Run(fmt.Sprint(seed, mode), func(t *testing.T) { runReclaimKeepsState(t, seed, mode) })
		}
	}
}

func runReclaimKeepsState(t *testing.T, seed uint64, mode broker.SyncMode) {
	rng := rand.New(rand.NewPCG(seed, 7))
	dir := fastDir(t)
	clock := newFakeClock()
	opts := reclaimOptions(clock, nil)
	opts.Sync = mode
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	pols := []broker.PolicyValue{
		policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 2048; p.DedupWindow = time.Minute }),
		policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 2048; p.MaxDeliveries = 2 }),
	}
	names := []string{"a", "b"}
	qs := make([]*broker.Queue, 2)
	for i := range qs {
		qs[i], err = s.Queue(names[i], pols[i])
		require.NoError(t, err)
	}
	var maxSeq uint64
	var receipts [][]broker.ReceiptValue = make([][]broker.ReceiptValue, 2)
	for step := 0; step < 1500; step++ {
		i := rng.IntN(2)
		q := qs[i]
		switch r := rng.IntN(100); {
		case r < 30:
			p := bytes.Repeat([]byte{byte('a' + step%26)}, 100+rng.IntN(900))
			var m broker.MessageValue
			if rng.IntN(2) == 0 {
				m, err = q.PublishKeyed(ctx(t), fmt.Sprintf("k%d", rng.IntN(40)), p)
			} else {
				m, err = q.Publish(ctx(t), p)
			}
			if err == nil {
				seq, _ := broker.MessageSeq(m.ID)
				maxSeq = max(maxSeq, seq)
			}
			if err != nil {
				require.ErrorIs(t, err, broker.QueueFull)
			}
		case r < 50:
			ds, err := q.Receive(ctx(t), 1+rng.IntN(3))
			require.NoError(t, err)
			for _, d := range ds {
				receipts[i] = append(receipts[i], d.Lease.Receipt)
			}
		case r < 70:
			if n := len(receipts[i]); n > 0 {
				k := rng.IntN(n)
				rc := receipts[i][k]
				receipts[i] = append(receipts[i][:k], receipts[i][k+1:]...)
				switch rng.IntN(10) {
				case 0, 1, 4, 5, 6, 7, 8, 9:
					_ = q.Ack(ctx(t), rc)
				case 2:
					_, _ = q.Nack(ctx(t), rc, broker.NewError("R", 3, "pub", "priv"))
				case 3:
					_ = q.Reject(ctx(t), rc, broker.NewError("X", 4, "public text", "priv"))
				}
			}
		case r < 75:
			if n := len(receipts[i]); n > 0 {
				_, _ = q.Extend(ctx(t), receipts[i][rng.IntN(n)], time.Duration(1+rng.IntN(60))*time.Second)
			}
		case r < 80:
			dls, err := q.DeadLetters(ctx(t), 5)
			require.NoError(t, err)
			if len(dls) > 0 {
				d := dls[rng.IntN(len(dls))]
				if rng.IntN(4) == 0 {
					_ = q.ReplayDeadLetter(ctx(t), d.Message.ID)
				} else {
					_ = q.DeleteDeadLetter(ctx(t), d.Message.ID)
				}
			}
		case r < 81:
			// A policy change: MaxDeliveries and the dedup window move.
			p := pols[i]
			p.MaxDeliveries = 1 + rng.IntN(4)
			if i == 0 {
				p.DedupWindow = time.Duration(30+rng.IntN(60)) * time.Second
			}
			nq, err := s.Queue(names[i], p)
			require.NoError(t, err)
			qs[i], pols[i] = nq, p
		case r < 92:
			clock.Advance(time.Duration(rng.IntN(4000)) * time.Millisecond)
		default:
			before := reclaimPosRE.ReplaceAllString(broker.Dump(s), "")
			require.NoError(t, s.Maintain())
			after := reclaimPosRE.ReplaceAllString(broker.Dump(s), "")
			require.Equal(t, before, after, "step %d: maintenance changed state: %s", step, broker.StateDiff(before, after))
		}
	}
	require.NoError(t, s.Maintain())
	require.NoError(t, s.Maintain())
	want := broker.Dump(s)
	wantStats := s.Stats()
	t.Logf("reclaimed %d copied %d segments %d", wantStats.BytesReclaimed, wantStats.CopiedForward, wantStats.Segments)
	require.NoError(t, s.Close())

	alone := filepath.Join(fastDir(t), "copy")
	copyTree(t, dir, alone)
	require.NoError(t, os.RemoveAll(filepath.Join(alone, "index")))

	acks := func(r *broker.Store) int {
		n := 0
		for i, name := range names {
			q, err := r.Queue(name, pols[i])
			require.NoError(t, err)
			for _, rc := range receipts[i] {
				if q.Ack(ctx(t), rc) == nil {
					n++
				}
			}
		}
		return n
	}
	r, err := broker.Open(dir, opts)
	require.NoError(t, err)
	got := broker.Dump(r)
	gotStats := r.Stats()
	require.Equal(t, want, got, "reopen from checkpoint: %s", broker.StateDiff(want, got))
	require.Equal(t, wantStats.LiveBytes, gotStats.LiveBytes, "LiveBytes after reopen from checkpoint")
	ackedCk := acks(r)
	require.NoError(t, r.Close())

	r, err = broker.Open(alone, opts)
	require.NoError(t, err)
	got = broker.Dump(r)
	gotStats = r.Stats()
	require.Equal(t, want, got, "full rebuild: %s", broker.StateDiff(want, got))
	require.Equal(t, wantStats.LiveBytes, gotStats.LiveBytes, "LiveBytes after full rebuild")
	ackedRb := acks(r)
	require.Equal(t, ackedCk, ackedRb, "receipts accepted after a reopen from the checkpoint and after a full rebuild")
	t.Logf("receipts accepted: %d", ackedRb)
	ra, err := r.Queue(names[0], pols[0])
	require.NoError(t, err)
	m, err := ra.Publish(ctx(t), []byte("after rebuild"))
	require.NoError(t, err)
	seq, ok := broker.MessageSeq(m.ID)
	require.True(t, ok)
	require.Greater(t, seq, maxSeq, "a message published after a full rebuild takes a new ID")
	require.NoError(t, r.Close())
}

// TestLiveBytesFallsAtMostByAForgottenKeyAtACopy: StoreStats.LiveBytes
// counts a live message's records at the length they were written; a copy
// forward leaves out a dedup key the queue has forgotten since, so the
// figure may fall at the copy, with nothing consumed, by that key's bytes
// (a 256-byte key and its length prefix) and no more.
func TestLiveBytesFallsAtMostByAForgottenKeyAtACopy(t *testing.T) {
	clock := newFakeClock()
	s, err := broker.Open(fastDir(t), reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	keyed, err := s.Queue("keyed", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024; p.DedupWindow = time.Minute }))
	require.NoError(t, err)
	key := string(bytes.Repeat([]byte{'k'}, 256))
	_, err = keyed.PublishKeyed(ctx(t), key, []byte("kept, never received"))
	require.NoError(t, err)
	// The window passes; the next keyed publish forgets the first key.
	clock.Advance(2 * time.Minute)
	_, err = keyed.PublishKeyed(ctx(t), "other", []byte("x"))
	require.NoError(t, err)
	ds, err := keyed.Receive(ctx(t), 2)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	// Only the first stays live; the second is acknowledged.
	for _, d := range ds {
		if string(d.Message.Payload) == "x" {
			require.NoError(t, keyed.Ack(ctx(t), d.Lease.Receipt))
		} else {
			_, err := keyed.Nack(ctx(t), d.Lease.Receipt, nil)
			require.NoError(t, err)
		}
	}
	require.NoError(t, s.Maintain())
	before := s.Stats().LiveBytes

	churnSegments(t, s, 4)
	copied := s.Stats().CopiedForward
	for range 3 {
		require.NoError(t, s.Maintain())
	}
	st := s.Stats()
	require.Greater(t, st.CopiedForward, copied, "the kept message was copied forward")
	require.Positive(t, st.BytesReclaimed)
	require.LessOrEqual(t, st.LiveBytes, before, "LiveBytes rose at a copy forward")
	require.LessOrEqual(t, before-st.LiveBytes, int64(len(key)+2),
		"LiveBytes fell by more than the forgotten %d-byte key at the copy: %d before, %d after", len(key), before, st.LiveBytes)
}

// TestADrainedStoreKeepsAtMostTwoSpares: a store whose messages come and
// go holds the active segment, the next one prepared and up to two spares
// (maintain.go, keepSealed; StoreStats: plan for 3 × SegmentBytes beside
// the log).
func TestADrainedStoreKeepsAtMostTwoSpares(t *testing.T) {
	clock := newFakeClock()
	dir := fastDir(t)
	s, err := broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	churnSegments(t, s, 4)
	// Let the next segment's preparation finish (it would take a spare
	// that arrives while it fills).
	deadline := time.Now().Add(2 * time.Second)
	for {
		ready := false
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && len(e.Name()) > 8 && e.Name()[len(e.Name())-8:] == ".seg.tmp" && fi.Size() == broker.MinSegmentBytes {
				ready = true
			}
		}
		if ready || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, s.Maintain())
	require.NoError(t, s.Maintain())
	require.Equal(t, 1, s.Stats().Segments, "drained: the log is its active segment")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var spares, names []string
	for _, e := range ents {
		names = append(names, e.Name())
		if len(e.Name()) > 6 && e.Name()[:6] == "spare-" {
			spares = append(spares, e.Name())
		}
	}
	require.LessOrEqual(t, len(spares), 2,
		"a drained store holds the active segment, the prepared one and up to two spares; the directory holds %v", names)
}
