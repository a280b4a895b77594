package broker_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// An Open with Salvage that fails part way (here the fdatasync after the
// damaged span was overwritten) leaves a store whose damage may already
// read as repaired: the next Open without Salvage refuses it with Corrupt,
// and the next Open with Salvage reports the message the span held as lost
// (RecoveryReport.LostMessages), as the first would have, and keeps the
// message beside it.
func TestASalvageThatFailsIsFinishedAndReportedByTheNextOne(t *testing.T) {
	dir, opts, intact, lost, path := damagedStore(t)

	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpSync, Match: func(n string) bool { return n == path }, Times: 1})
	salvage := opts
	salvage.Salvage, salvage.FS = true, fs
	_, err := broker.Open(dir, salvage)
	require.ErrorIs(t, err, syscall.EIO)
	require.Positive(t, fs.Injected(vfs.OpSync))

	_, err = broker.Open(dir, opts)
	requireErrorIs(t, err, broker.Corrupt, filepath.Base(path), "did not finish")

	salvage.FS = nil
	s, err := broker.Open(dir, salvage)
	require.NoError(t, err)
	rep := s.Recovery()
	require.Equal(t, 1, rep.SalvagedSpans)
	require.Equal(t, []string{lost.ID}, rep.LostMessages)
	require.Equal(t, map[string][]string{"stuck": {lost.ID}}, rep.LostByQueue)
	requireOnlyIntact(t, s, intact, "")
	require.FileExists(t, filepath.Join(dir, "salvage", "unfinished.json"), "the list stays until Open has returned its report")
	require.NoError(t, s.Close())
	require.NoFileExists(t, filepath.Join(dir, "salvage", "unfinished.json"), "Close removed it")
}

// An Open with Salvage whose log salvage succeeded but which then fails
// itself (here the index cannot be rebuilt) has handed no report on: the
// log keeps its list of the repaired spans, so the next Open without
// Salvage refuses the store, and the next with it reports the spans and
// the message they held.
func TestAStoreOpenThatFailsAfterItsLogWasSalvagedLeavesTheReportToTheNext(t *testing.T) {
	dir, opts, intact, lost, _ := damagedStore(t)
	salvage := failAfterTheLogsSalvage(t, dir, opts)

	_, err := broker.Open(dir, opts)
	requireErrorIs(t, err, broker.Corrupt, "did not finish")

	s, err := broker.Open(dir, salvage)
	require.NoError(t, err)
	rep := s.Recovery()
	require.Equal(t, 1, rep.SalvagedSpans)
	require.Equal(t, []string{lost.ID}, rep.LostMessages)
	requireOnlyIntact(t, s, intact, "")
	require.NoError(t, s.Maintain())
	require.NoFileExists(t, filepath.Join(dir, "salvage", "unfinished.json"), "the first maintenance round after the Open that reported removed the list")
	require.NoError(t, s.Close())
}

// failAfterTheLogsSalvage opens the store in dir with Salvage and fails
// that Open after its log was salvaged (the index's rebuild cannot remove
// the old checkpoint), leaving the log's list of the spans it repaired.
// It returns opts with Salvage, for the Open that finishes it.
func failAfterTheLogsSalvage(t *testing.T, dir string, opts broker.Options) broker.Options {
	t.Helper()
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: "checkpoint", Times: 1})
	salvage := opts
	salvage.Salvage, salvage.FS = true, fs
	_, err := broker.Open(dir, salvage)
	require.ErrorIs(t, err, syscall.EIO)
	require.Positive(t, fs.Injected(vfs.OpRemove), "the fault was met")
	require.FileExists(t, filepath.Join(dir, "salvage", "unfinished.json"))
	salvage.FS = nil
	return salvage
}

// The note that a salvage met a later build's record goes with the list
// of lost messages once a salvage is finished (finishSalvage), not only
// before a salvage that finishes no earlier one begins: here a note is
// planted by hand in a store whose salvage failed after the log's repair,
// which this build finishes. The Open that finishes it keeps the note
// until its report has been returned; the first maintenance round
// removes it.
func TestAFinishedSalvageForgetsALaterBuildsNote(t *testing.T) {
	dir, opts, _, lost, _ := damagedStore(t)
	salvage := failAfterTheLogsSalvage(t, dir, opts)
	note := filepath.Join(dir, "salvage", "later-build.txt")
	require.NoError(t, os.WriteFile(note, []byte("an earlier refusal"), 0o600))

	s, err := broker.Open(dir, salvage)
	require.NoError(t, err)
	require.Equal(t, []string{lost.ID}, s.Recovery().LostMessages)
	require.FileExists(t, note, "kept by the Open that finishes the salvage, until its report has been returned")
	require.NoError(t, s.Maintain())
	require.NoFileExists(t, filepath.Join(dir, "salvage", "unfinished.json"))
	require.NoFileExists(t, note, "the salvage is finished: the first maintenance round after the Open that reported removed the note")
	require.NoError(t, s.Close())
}

// A power loss at any point of an Open with Salvage, before it returns,
// hides nothing (the lists of what it repaired and lost stay until its
// report has been returned): after it, whatever of the unsynced changes
// survive, an Open without Salvage either refuses the store, or opens it
// with the damage still in place (a checkpoint vouches for the segment,
// which Open does not read: a Receive meets it); and an Open with Salvage
// reports the span and the message it held (kept in salvage/lost.json
// when the crashed Open had already dropped the checkpoint that knew it),
// and keeps the message beside it.
func TestAPowerLossDuringASalvagingOpenHidesNothing(t *testing.T) {
	template, opts, intact, lost, _ := damagedStore(t)

	copyOf := func() string {
		d := filepath.Join(fastDir(t), "store")
		copyTree(t, template, d)
		return d
	}
	// How many mutating operations a salvaging Open takes to return.
	cfs := vfs.NewCrashFS(vfs.Default)
	salvage := opts
	salvage.Salvage, salvage.FS = true, cfs
	s, err := broker.Open(copyOf(), salvage)
	require.NoError(t, err)
	total := cfs.Ops()
	require.NoError(t, s.Close())

	step, again := int64(1), 0
	if testing.Short() {
		step = 7
	}
	// check checks clone, the store a power loss during a salvaging Open
	// left.
	check := func(clone, what string) {
		plain := filepath.Join(fastDir(t), "plain")
		copyTree(t, clone, plain)
		if s, err := broker.Open(plain, opts); err == nil {
			// Open reads no segment a checkpoint covers: no salvage
			// was reported, so the damage must still be there, and
			// the message with it.
			q, err := s.Queue("stuck", stuckPolicy)
			require.NoError(t, err)
			ds, err := q.Receive(ctx(t), 10)
			if err == nil {
				ids := []string{}
				for _, d := range ds {
					ids = append(ids, d.Message.ID)
				}
				require.Contains(t, ids, lost.ID, "%s: the message is gone, and no Open reported it", what)
			} else {
				requireErrorIs(t, err, broker.Corrupt)
			}
			_ = s.Close()
			return
		} else {
			requireErrorIs(t, err, broker.Corrupt)
		}

		salvage.FS = nil
		s, err := broker.Open(clone, salvage)
		require.NoError(t, err, what)
		again++
		rep := s.Recovery()
		require.Equal(t, 1, rep.SalvagedSpans, "%s: %v", what, rep)
		require.Equal(t, []string{lost.ID}, rep.LostMessages, "%s: %v", what, rep)
		requireOnlyIntact(t, s, intact, what)
		require.NoError(t, s.Close())
	}
	for k := int64(0); k <= total; k += step {
		for _, keep := range []float64{0, 0.5, 1} {
			what := fmt.Sprintf("power lost after %d of %d operations, unsynced kept %v", k, total, keep)
			dir := copyOf()
			cfs := vfs.NewCrashFS(vfs.Default)
			cfs.CrashAfter(k)
			salvage.FS = cfs
			// Whether or not this Open returns (past the power loss its
			// files fail), its caller never sees the report: the machine
			// went down before it could. Nor does Close run: an Open
			// that took fewer operations than the count (the background
			// preparer's vary) returns before the power loss, and its
			// Close, which removes the lists once the report was
			// returned, must not write; the power goes now, and Close
			// only lets the files go.
			if s, err := broker.Open(dir, salvage); err == nil {
				cfs.Crash()
				_ = s.Close()
			}
			clone := filepath.Join(fastDir(t), "clone")
			require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir, KeepUnsyncedFraction: keep, Rand: rand.New(rand.NewPCG(uint64(k), 3))}), what)
			check(clone, what)
			if keep == 1 && k/step%2 == 1 {
				// The same power loss with unsynced names and sizes kept
				// apart from the data.
				mopts, state := metadataCrashOptions(k/step/2, dir, uint64(k))
				mclone := clone + "-metadata"
				require.NoError(t, cfs.CrashClone(mclone, mopts), what)
				check(mclone, fmt.Sprintf("power lost after %d of %d operations, %s", k, total, state))
			}
		}
	}
	t.Logf("a power loss after each of the %d operations of a salvaging Open (every %d under -short): %d reported by a second one", total, step, again)
}

// The list of lost messages a salvage keeps is read only by the Open that
// finishes that salvage: a fresh salvage removes one an earlier Open left
// behind, and names only what its own spans held.
func TestAFreshSalvageIgnoresTheLostMessagesAnEarlierOneKept(t *testing.T) {
	dir, opts, _, lost, _ := damagedStore(t)
	kept := filepath.Join(dir, "salvage", "lost.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(kept), 0o700))
	require.NoError(t, os.WriteFile(kept, []byte(`[{"seq": 999, "queue": 1}]`), 0o600))

	opts.Salvage = true
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	require.Equal(t, []string{lost.ID}, s.Recovery().LostMessages)
	require.NoError(t, s.Close())
	require.NoFileExists(t, kept)
}

// damagedStore makes a closed store whose queue "stuck" holds intact and
// lost (intactAndVictim) behind three segments of churn, a checkpoint
// covering them, and damages lost's payload in path, its segment file.
// opts opens it again.
func damagedStore(t *testing.T) (dir string, opts broker.Options, intact, lost broker.MessageValue, path string) {
	t.Helper()
	dir, opts = fastDir(t), reclaimOptions(newFakeClock(), nil)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	intact, lost = intactAndVictim(t, q)
	churnSegments(t, s, 3)
	require.NoError(t, s.Close())
	return dir, opts, intact, lost, damagePayload(t, dir, victimPayload)
}

// Salvage keeps the store's secret: a store whose log lost its only meta
// event (the one record that holds the secret, one bit flipped) opened
// with Salvage takes the secret from the checkpoint it consults, so that
// the receipt of a lease salvage kept still counts, and writes it to the
// log again, so that a later rebuild from the log alone keeps it too.
func TestSalvageKeepsTheStoreSecret(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "one")
	mustPublish(t, q, "two")
	ds, err := q.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	e.close() // with a checkpoint holding the secret

	// One bit of the meta event's body (the log's first record) flipped.
	p := filepath.Join(e.dir, "0000000001.seg")
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	data[segment.HeaderSize+segment.FrameHeaderSize+3] ^= 0x40
	require.NoError(t, os.WriteFile(p, data, 0o600))

	e.opts.Salvage = true
	e.open()
	require.Equal(t, 1, e.s.Recovery().SalvagedSpans)
	q = e.queue("jobs", policy())
	require.Equal(t, 1, q.Stats().Leased, "salvage kept the lease")
	require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt),
		"a receipt for a lease salvage kept is refused: salvage drew a new store secret although the checkpoint held the old one")

	// The secret is in the log again: a rebuild from the log alone keeps
	// it too.
	ds, err = q.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	e.close()
	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	e.opts.Salvage = false
	e.open()
	q = e.queue("jobs", policy())
	require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt), "after a rebuild from the log alone")
}
