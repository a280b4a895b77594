package broker_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

var (
	policyBefore = policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout = time.Second
		p.MaxDeliveries = 3
		p.MaxMessageBytes = 1024
		p.DedupWindow = time.Hour
	})
	policyAfter = policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout = time.Second
		p.MaxDeliveries = 2
		p.MaxMessageBytes = 1024
		p.DedupWindow = time.Hour
	})
)

func policyLossOpts(clock *fakeClock, fs vfs.FS) broker.Options {
	o := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, FS: fs}
	broker.ManualMaintenance(&o)
	return o
}

// policyTemplate: a queue under policyBefore whose messages are
// in every state a policy change judges: lapsed leases on delivery 1, 2
// and 3 (the last), a lease held, a ready message, a dead letter, a key.
func policyTemplate(t *testing.T, dir string, clock *fakeClock) {
	s, err := broker.Open(dir, policyLossOpts(clock, nil))
	require.NoError(t, err)
	q, err := s.Queue("jobs", policyBefore)
	require.NoError(t, err)
	_, err = q.PublishKeyed(ctx(t), "key", []byte("keyed"))
	require.NoError(t, err)
	for i := range 6 {
		mustPublish(t, q, fmt.Sprintf("m%d", i))
	}
	// Lease everything twice and let the leases lapse.
	for range 2 {
		ds := mustReceive(t, q, 10)
		require.NotEmpty(t, ds)
		clock.Advance(2 * time.Second)
	}
	// A third delivery (the last under the old policy) of two, lapsed.
	ds := mustReceive(t, q, 2)
	require.Len(t, ds, 2)
	clock.Advance(2 * time.Second)
	// One nacked to death: a dead letter.
	ds = mustReceive(t, q, 1)
	require.Len(t, ds, 1)
	_, err = q.Nack(ctx(t), ds[0].Lease.Receipt, errors.New("no"))
	require.NoError(t, err)
	// One held now.
	mustReceive(t, q, 1)
	require.NoError(t, s.Close())
}

// policyWorkload opens dir on fs, changes the policy, publishes and
// acks enough to rotate, reclaims (copying forward the template's
// messages), and closes. It returns the IDs of the publishes that
// returned and were not acked, those whose ack returned, and whether the
// policy change returned nil.
func policyWorkload(t *testing.T, dir string, clock *fakeClock, fs vfs.FS) (live, acked map[string]bool, changed bool) {
	live, acked = map[string]bool{}, map[string]bool{}
	s, err := broker.Open(dir, policyLossOpts(clock, fs))
	if err != nil {
		return live, acked, false
	}
	defer func() { _ = s.Close() }()
	q, err := s.Queue("jobs", policyAfter)
	if err != nil {
		return live, acked, false
	}
	changed = true
	for i := range 40 {
		m, err := q.Publish(ctx(t), []byte(fmt.Sprintf("after-%02d-%s", i, strings.Repeat("x", 900))))
		if err != nil {
			return live, acked, changed
		}
		live[m.ID] = true
		ds, err := q.Receive(ctx(t), 10)
		if err != nil {
			return live, acked, changed
		}
		for _, d := range ds {
			if !strings.HasPrefix(string(d.Message.Payload), "after-") {
				continue
			}
			delete(live, d.Message.ID) // an ack that fails may have happened
			if err := q.Ack(ctx(t), d.Lease.Receipt); err != nil {
				return live, acked, changed
			}
			acked[d.Message.ID] = true
		}
	}
	if err := s.Maintain(); err != nil {
		return live, acked, changed
	}
	if testing.Verbose() {
		t.Logf("stats %+v", s.Stats())
	}
	return live, acked, changed
}

// A power loss at every file operation of a policy change (its sweep, its
// declaration), of the publishes after it and of the checkpoint and
// reclamation that follow: the store opens, every publish that returned is
// there, and a change that returned is in force.
func TestAPolicyChangeSurvivesAPowerLossAtEveryStep(t *testing.T) {
	root := fastDir(t)
	clock := newFakeClock()
	template := filepath.Join(root, "template")
	policyTemplate(t, template, clock)
	start := clock.Now()

	dry := vfs.NewCrashFS(vfs.Default)
	dryDir := filepath.Join(root, "dry")
	copyTree(t, template, dryDir)
	_, acked, changed := policyWorkload(t, dryDir, clock, dry)
	require.True(t, changed)
	require.Len(t, acked, 40)
	total := dry.Ops()
	t.Logf("workload: %d operations", total)

	rng := rand.New(rand.NewPCG(1, 2))
	step := int64(1)
	if testing.Short() {
		step = 5
	}
	for k := int64(1); k <= total; k += step {
		clock.Set(start)
		dir := filepath.Join(root, fmt.Sprintf("run-%d", k))
		copyTree(t, template, dir)
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		live, acked, changed := policyWorkload(t, dir, clock, cfs)
		// One clone per crash point: the synced data alone, or half the
		// rest kept with the last write torn; at every sixth, a second
		// one with unsynced names and sizes kept apart from the data.
		keep := float64(k%2) / 2
		opts := vfs.CrashOptions{Root: dir, KeepUnsyncedFraction: keep, TearLastWrite: keep > 0, Rand: rand.New(rand.NewPCG(rng.Uint64(), 3))}
		clone := filepath.Join(root, fmt.Sprintf("clone-%d", k))
		require.NoError(t, cfs.CrashClone(clone, opts))
		what := fmt.Sprintf("power loss after operation %d of %d (keep %.1f)", k, total, keep)
		checkPolicyClone(t, clone, clock, k%3 == 0, live, acked, changed, what)
		if k%6 == 2 {
			mopts, state := metadataCrashOptions(k/6, dir, opts.Rand.Uint64())
			mclone := filepath.Join(root, fmt.Sprintf("metadata-clone-%d", k))
			require.NoError(t, cfs.CrashClone(mclone, mopts))
			checkPolicyClone(t, mclone, clock, false, live, acked, changed, fmt.Sprintf("power loss after operation %d of %d (%s)", k, total, state))
		}
		require.NoError(t, os.RemoveAll(dir))
	}
}

// checkPolicyClone opens clone, the store a power loss left, and checks
// that every publish in live is there, that none in acked is, and that
// the policy change is in force if it returned (changed); with rebuild,
// it also rebuilds the index from the log and compares. It removes clone.
func checkPolicyClone(t *testing.T, clone string, clock *fakeClock, rebuild bool, live, acked map[string]bool, changed bool, what string) {
	t.Helper()
	rebuilds := []bool{false}
	if rebuild {
		copyTree(t, clone, clone+"-rebuilt")
		require.NoError(t, os.RemoveAll(filepath.Join(clone+"-rebuilt", "index")))
		rebuilds = append(rebuilds, true)
	}
	var dumps []string
	for _, rebuild := range rebuilds {
		d := clone
		if rebuild {
			d = clone + "-rebuilt"
		}
		w := what + map[bool]string{false: "", true: ", index rebuilt"}[rebuild]
		s, err := broker.Open(d, policyLossOpts(clock, nil))
		require.NoError(t, err, w)
		dump := broker.Dump(s)
		dumps = append(dumps, dump)
		if changed {
			require.Contains(t, dump, "MaxDeliveries:2", "%s: the policy change returned nil, so it is in force:\n%s", w, dump)
		}
		for id := range live {
			seq, ok := broker.MessageSeq(id)
			require.True(t, ok)
			require.Contains(t, dump, fmt.Sprintf("\n  %d: ", seq), "%s: published message %s lost", w, id)
		}
		for id := range acked {
			seq, ok := broker.MessageSeq(id)
			require.True(t, ok)
			require.NotContains(t, dump, fmt.Sprintf("\n  %d: ", seq), "%s: acked message %s came back", w, id)
		}
		require.NoError(t, s.Close())
		require.NoError(t, os.RemoveAll(d))
	}
	if len(dumps) == 2 {
		requireSameState(t, dumps[1], dumps[0], what+": from the checkpoint vs rebuilt from the log")
	}
}
