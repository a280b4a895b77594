package broker_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// writeEveryStateTemplate builds a store whose oldest segments hold live
// records of every kind — a nacked message waiting out its retry delay, an
// extended lease, a replayed dead letter, a dead letter, a message never
// received, a keyed message acked (its key in the window) and a live keyed
// one — behind segments of acknowledged churn, on two queues.
func writeEveryStateTemplate(t *testing.T, dir string, clock *fakeClock) {
	s, err := broker.Open(dir, manualOptions(clock, broker.MinSegmentBytes))
	require.NoError(t, err)
	pa := policy(func(p *broker.PolicyValue) {
		p.MaxMessageBytes = 1024
		p.DedupWindow = time.Hour
		p.MaxDeliveries = 3
		p.RetryDelay = 20 * time.Minute
		p.VisibilityTimeout = 10 * time.Minute
	})
	pb := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024; p.MaxDeliveries = 1 })
	a, err := s.Queue("a", pa)
	require.NoError(t, err)
	b, err := s.Queue("b", pb)
	require.NoError(t, err)
	for i := range 6 {
		mustPublish(t, a, fmt.Sprintf("a-%d", i))
		mustPublish(t, b, fmt.Sprintf("b-%d", i))
	}
	_, err = a.PublishKeyed(ctx(t), "live-key", []byte("keyed live"))
	require.NoError(t, err)
	_, err = a.PublishKeyed(ctx(t), "acked-key", []byte("keyed acked"))
	require.NoError(t, err)
	ds := mustReceive(t, a, 8)
	require.Len(t, ds, 8)
	_, err = a.Nack(ctx(t), ds[0].Lease.Receipt, fmt.Errorf("later"))
	require.NoError(t, err)
	_, err = a.Extend(ctx(t), ds[1].Lease.Receipt, 30*time.Minute)
	require.NoError(t, err)
	require.NoError(t, a.Ack(ctx(t), ds[7].Lease.Receipt)) // acked-key
	for _, d := range ds[2:5] {
		require.NoError(t, a.Ack(ctx(t), d.Lease.Receipt))
	}
	// ds[5], ds[6] stay leased (ds[6] is live-key's)
	bs := mustReceive(t, b, 3)
	for _, d := range bs {
		_, err := b.Nack(ctx(t), d.Lease.Receipt, fmt.Errorf("boom %s", d.Message.ID))
		require.NoError(t, err)
	}
	dls, err := b.DeadLetters(ctx(t), 3)
	require.NoError(t, err)
	require.Len(t, dls, 3)
	require.NoError(t, b.ReplayDeadLetter(ctx(t), dls[0].Message.ID))
	require.NoError(t, b.DeleteDeadLetter(ctx(t), dls[1].Message.ID))
	c, err := s.Queue("churn", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	require.NoError(t, err)
	for i := range 250 {
		mustPublish(t, c, fmt.Sprintf("churn-%04d-%s", i, strings.Repeat("c", 190)))
		require.NoError(t, c.Ack(ctx(t), mustReceiveOne(t, c).Lease.Receipt))
	}
	require.NoError(t, s.Close())
}

// Reclamation moves records and changes no state: a crash (or power loss)
// at any file operation of a reopen, a maintenance pass and a close leaves
// a store that opens to the very state it held before — retry instants,
// extended leases, replayed dead letters and dedup keys included — from
// its checkpoint and rebuilt from its log alone.
func TestReclaimOfEveryStateSurvivesACrashAtEveryStep(t *testing.T) {
	root := fastDir(t)
	clock := newFakeClock()
	template := filepath.Join(root, "template")
	writeEveryStateTemplate(t, template, clock)
	s, err := broker.Open(filepath.Join(root, "template"), manualOptions(clock, broker.MinSegmentBytes))
	require.NoError(t, err)
	want := broker.Dump(s)
	require.NoError(t, s.Close())

	work := func(dir string, fs *vfs.CrashFS) broker.StoreStats {
		o := manualOptions(clock, broker.MinSegmentBytes)
		o.FS = fs
		s, err := broker.Open(dir, o)
		if err != nil {
			return broker.StoreStats{}
		}
		_ = s.Maintain()
		st := s.Stats()
		_ = s.Close()
		return st
	}
	dry := vfs.NewCrashFS(vfs.Default)
	dryDir := filepath.Join(root, "dry")
	copyTree(t, template, dryDir)
	st := work(dryDir, dry)
	require.NotZero(t, st.CopiedForward, "the workload copies forward")
	require.NotZero(t, st.BytesReclaimed, "the workload reclaims")
	total := dry.Ops()
	check := func(dir, what string) {
		rebuilt := dir + "-rebuilt"
		copyTree(t, dir, rebuilt)
		require.NoError(t, os.RemoveAll(filepath.Join(rebuilt, "index")))
		for _, d := range []string{dir, rebuilt} {
			s, err := broker.Open(d, manualOptions(clock, broker.MinSegmentBytes))
			require.NoError(t, err, what)
			requireSameState(t, withoutPlaces(want), withoutPlaces(broker.Dump(s)), what+" "+d)
			require.NoError(t, s.Close())
		}
	}
	check(dryDir, "no crash")
	rng := rand.New(rand.NewPCG(11, 12))
	for k := int64(0); k <= total; k += 4 { // every fourth operation: each kind of crash in turn (k%3)
		dir := filepath.Join(root, fmt.Sprintf("run-%d", k))
		copyTree(t, template, dir)
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		work(dir, cfs)
		opts := crashOptionsFor(k, dir, rand.New(rand.NewPCG(rng.Uint64(), 5)))
		clone := filepath.Join(root, fmt.Sprintf("clone-%d", k))
		require.NoError(t, cfs.CrashClone(clone, opts))
		check(clone, fmt.Sprintf("crash after op %d of %d (keep %.1f)", k, total, opts.KeepUnsyncedFraction))
		if k%16 == 4 {
			// The same power loss with unsynced names and sizes kept
			// apart from the data.
			mopts, state := metadataCrashOptions(k/16, dir, opts.Rand.Uint64())
			mclone := filepath.Join(root, fmt.Sprintf("metadata-clone-%d", k))
			require.NoError(t, cfs.CrashClone(mclone, mopts))
			check(mclone, fmt.Sprintf("crash after op %d of %d (%s)", k, total, state))
			for _, d := range []string{mclone, mclone + "-rebuilt"} {
				require.NoError(t, os.RemoveAll(d))
			}
		}
		for _, d := range []string{dir, clone, clone + "-rebuilt"} {
			require.NoError(t, os.RemoveAll(d))
		}
	}
}

var dumpPlaceRE = regexp.MustCompile(` (pos|size|seg)=\S+`)

// withoutPlaces drops where records lie from a Dump: a copy forward moves them.
func withoutPlaces(d string) string { return dumpPlaceRE.ReplaceAllString(d, "") }
