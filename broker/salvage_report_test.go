package broker_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// damageRun flips one byte in the middle of the only run of 300 letter in
// the store's segments (a publish's payload).
func damageRun(t *testing.T, dir, letter string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	pattern := bytes.Repeat([]byte(letter), 300)
	for _, seg := range segs {
		raw, err := os.ReadFile(seg)
		require.NoError(t, err)
		if i := bytes.Index(raw, pattern); i >= 0 {
			raw[i+150] ^= 0x40
			require.NoError(t, os.WriteFile(seg, raw, 0o600))
			return
		}
	}
	t.Fatalf("%q is in no segment", letter)
}

// Under SyncNone, as under SyncAll, a message whose publish salvage skipped
// but whose lease survived (an orphan) is named lost. The loss tracker took
// every mark before the damage to say that every sequence below it was
// taken, but under SyncNone a mark reserves sequences ahead of those handed
// out (4,096 from Open): every orphan below the reservation went unnamed.
func TestSalvageNamesAnOrphanUnderSyncNone(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone} {
		e := newEnv(t, func(o *broker.Options) { o.Sync = mode })
		q := e.queue("jobs", policy())
		mustPublish(t, q, strings.Repeat("A", 300))
		b := mustPublish(t, q, strings.Repeat("B", 300)).ID
		mustPublish(t, q, strings.Repeat("C", 300))
		require.Len(t, mustReceive(t, q, 10), 3)
		e.close()
		require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
		damageRun(t, e.dir, "B")
		e.opts.Salvage = true
		rec := e.open().Recovery()
		require.Equal(t, 1, rec.SalvagedSpans, "mode %v", mode)
		require.Equal(t, []string{b}, rec.LostMessages, "mode %v: B's lease survived its publish: B is lost and must be named", mode)
		e.close()
	}
}

// A store killed after a checkpoint, whose last record (an acknowledged
// publish) is then damaged on disk: Open refuses it with Corrupt (the
// checkpoint vouched for that record), and Open with Salvage copies the
// damaged file aside, reports the span and names the message lost. It
// zeroed it as a torn tail instead: no copy, no span, no lost message, and
// the report said the bytes were never fdatasynced, of a publish SyncAll
// had acknowledged.
func TestSalvageOfTheLastRecordBeforeACheckpointReportsItLost(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", policy())
	a := mustPublish(t, q, strings.Repeat("A", 300)).ID
	b := mustPublish(t, q, strings.Repeat("B", 300)).ID
	require.NoError(t, e.s.Maintain()) // a checkpoint after B
	killed := filepath.Join(t.TempDir(), "killed")
	copyTree(t, e.dir, killed) // the files as a process kill leaves them
	damageRun(t, killed, "B")

	opts := e.opts
	_, err := broker.Open(killed, opts)
	requireErrorIs(t, err, broker.Corrupt, "offset")

	opts.Salvage = true
	s, err := broker.Open(killed, opts)
	require.NoError(t, err)
	defer s.Close()
	rec := s.Recovery()
	t.Logf("report: %s", rec)
	kq, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	require.Equal(t, []string{a}, ids(mustReceive(t, kq, 10)))
	copies, _ := filepath.Glob(filepath.Join(killed, "salvage", "*.seg.*"))
	require.NotEmpty(t, copies, "the damaged file was copied aside before the repair")
	require.Equal(t, copies, rec.SalvageCopies)
	require.False(t, rec.TornTail, "B was acknowledged under SyncAll: its loss is no torn tail")
	require.NotContains(t, rec.String(), "torn tail")
	require.Equal(t, 1, rec.SalvagedSpans)
	require.Equal(t, []string{b}, rec.LostMessages)
}

// A segment file cut short from outside the log (the bytes of the last,
// acknowledged publish gone) is refused with Corrupt; opened with Salvage
// ("Options.Salvage opens what is left", says the refusal), the cut is
// reported, the file copied aside, and the message the checkpoint knew
// live there named lost. It was lost without a word: no span, no copy, no
// lost message; only IndexRebuilt.
func TestSalvageOfACutSegmentNamesTheMessagesCut(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	a := mustPublish(t, q, strings.Repeat("A", 300)).ID
	b := mustPublish(t, q, strings.Repeat("B", 300)).ID
	e.close()
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
	require.NoError(t, err)
	cut := false
	for _, seg := range segs {
		raw, err := os.ReadFile(seg)
		require.NoError(t, err)
		if i := bytes.Index(raw, bytes.Repeat([]byte("B"), 300)); i >= 0 {
			j := bytes.LastIndex(raw[:i], bytes.Repeat([]byte("A"), 300)) + 300
			require.NoError(t, os.Truncate(seg, int64(j))) // just past A's payload
			cut = true
		}
	}
	require.True(t, cut)

	_, err = broker.Open(e.dir, e.opts)
	requireErrorIs(t, err, broker.Corrupt, "synced records are gone")

	e.opts.Salvage = true
	rec := e.open().Recovery()
	t.Logf("report: %s", rec)
	require.Equal(t, []string{a}, ids(mustReceive(t, e.queue("jobs", policy()), 10)))
	require.Equal(t, []string{b}, rec.LostMessages, "the checkpoint knew B was live; Salvage must report it lost")
	require.Equal(t, 1, rec.SalvagedSpans)
	require.Len(t, rec.SalvageCopies, 1)
	require.False(t, rec.TornTail)

	// The store works on, and opens without Salvage.
	c := mustPublish(t, e.queue("jobs", policy()), "C").ID
	e.close()
	e.opts.Salvage = false
	rec = e.open().Recovery()
	require.Zero(t, rec.SalvagedSpans)
	require.Equal(t, []string{c}, ids(mustReceive(t, e.queue("jobs", policy()), 10)), "A is leased still; C follows the span")
}

// A message that was acknowledged, or deleted as a dead letter, is not
// lost, even when salvage skips its publish record: nothing is left to send
// again. RecoveryReport.LostByQueue says its IDs are the ones whose
// producers must send again, so naming such a message there had its
// producer send a message already processed (a duplicate side effect).
// Every event about a message the index does not hold was taken for a sign
// of loss, and the checkpoint's live messages were named whatever the log
// did with them after it.
func TestSalvageDoesNotNameAnAcknowledgedMessageLost(t *testing.T) {
	deadPolicy := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
	ends := []struct {
		name string
		end  func(t *testing.T, q *broker.Queue, d broker.DeliveryValue)
	}{
		{"acknowledged", func(t *testing.T, q *broker.Queue, d broker.DeliveryValue) {
			require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
		}},
		{"deleted", func(t *testing.T, q *broker.Queue, d broker.DeliveryValue) {
			require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, errors.New("no")))
			require.NoError(t, q.DeleteDeadLetter(ctx(t), d.Message.ID))
		}},
	}
	for _, how := range ends {
		for _, checkpoint := range []bool{false, true} {
			name := how.name + " after the last checkpoint"
			if !checkpoint {
				name = how.name + ", no checkpoint"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, broker.ManualMaintenance)
				q := e.queue("jobs", deadPolicy)
				mustPublish(t, q, strings.Repeat("A", 300))
				b := mustPublish(t, q, strings.Repeat("B", 300)).ID
				c := mustPublish(t, q, strings.Repeat("C", 300)).ID
				if checkpoint {
					require.NoError(t, e.s.Maintain()) // B live, its publish placed
				}
				for _, d := range mustReceive(t, q, 10) {
					if d.Message.ID == b {
						how.end(t, q, d)
					}
				}
				dir := filepath.Join(t.TempDir(), "killed")
				copyTree(t, e.dir, dir) // the files as a process kill leaves them
				if !checkpoint {
					require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
				}
				damageRun(t, dir, "B")

				opts := e.opts
				opts.Salvage = true
				s, err := broker.Open(dir, opts)
				require.NoError(t, err)
				defer s.Close()
				rec := s.Recovery()
				t.Logf("report: %s", rec)
				require.Equal(t, 1, rec.SalvagedSpans)
				require.NotContains(t, rec.LostMessages, b, "B was processed (or given up): it is not to be sent again")
				require.NotContains(t, rec.LostMessages, c)
				require.Empty(t, rec.LostByQueue)
			})
		}
	}
}
