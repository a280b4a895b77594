package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/segment"
)

var syncModes = []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}

// restartPolicy is the policy of every restart scenario, in the parent and
// in its children alike.
func restartPolicy() broker.PolicyValue {
	return broker.PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 5, RetryDelay: time.Minute}
}

// facts are what a scenario recorded as each step was acknowledged.
type facts map[string]string

func (f facts) instant(t testing.TB, key string) time.Time {
	t.Helper()
	v, ok := f[key]
	require.True(t, ok, "missing fact %s", key)
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err)
	return time.Unix(0, n)
}

func (f facts) int(t testing.TB, key string) int {
	t.Helper()
	n, err := strconv.Atoi(f[key])
	require.NoError(t, err, "fact %s", key)
	return n
}

func nanos(at time.Time) string { return strconv.FormatInt(at.UnixNano(), 10) }

// runScenario builds every kind of state a restart must keep, calling mark
// after each acknowledged step: A leased on its 2nd delivery, B leased, C
// leased then extended, D nacked (delayed), E rejected (dead), K keyed and
// acked (its key must still be a duplicate), P pending.
func runScenario(t testing.TB, q *broker.Queue, clock *fakeClock, mark func(key, value string)) {
	clock.Set(t0)
	mustPublish(t, q, "A")
	mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil)
	clock.Set(t0.Add(60 * time.Second))
	a := mustReceiveOne(t, q)
	mark("A.id", a.Message.ID)
	mark("A.receipt", string(a.Lease.Receipt))
	mark("A.expires", nanos(a.Lease.ExpiresAt))
	mark("A.deliveries", strconv.Itoa(a.Deliveries))

	clock.Set(t0.Add(61 * time.Second))
	mustPublish(t, q, "B")
	b := mustReceiveOne(t, q)
	mark("B.id", b.Message.ID)
	mark("B.expires", nanos(b.Lease.ExpiresAt))

	clock.Set(t0.Add(62 * time.Second))
	mustPublish(t, q, "C")
	c := mustReceiveOne(t, q)
	mark("C.oldReceipt", string(c.Lease.Receipt))
	l, err := q.Extend(ctx(t), c.Lease.Receipt, 10*time.Minute)
	require.NoError(t, err)
	mark("C.receipt", string(l.Receipt))
	mark("C.expires", nanos(l.ExpiresAt))

	clock.Set(t0.Add(63 * time.Second))
	mustPublish(t, q, "D")
	d := mustReceiveOne(t, q)
	nv := mustNack(t, q, d.Lease.Receipt, nil)
	mark("D.id", d.Message.ID)
	mark("D.visibleAt", nanos(nv.VisibleAt))

	clock.Set(t0.Add(64 * time.Second))
	mustPublish(t, q, "E")
	require.NoError(t, q.Reject(ctx(t), mustReceiveOne(t, q).Lease.Receipt,
		broker.NewError("BAD_INPUT", 0x07020001, "the input was refused", "private detail")))
	dl := mustDeadLetters(t, q)[0]
	js, err := json.Marshal(dl)
	require.NoError(t, err)
	mark("E.deadLetter", string(js))

	clock.Set(t0.Add(65 * time.Second))
	k, err := q.PublishKeyed(ctx(t), "key-1", []byte("K"))
	require.NoError(t, err)
	require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
	mark("K.id", k.ID)
	mark("K.enqueued", nanos(k.EnqueuedAt))

	clock.Set(t0.Add(66 * time.Second))
	p := mustPublish(t, q, "P")
	mark("P.id", p.ID)
	mark("now", nanos(clock.Now()))
}

// checkScenario verifies, on a reopened store, that everything runScenario
// recorded survived.
func checkScenario(t *testing.T, q *broker.Queue, clock *fakeClock, f facts) {
	clock.Set(f.instant(t, "now"))
	st := q.Stats()
	require.Equal(t, [4]int{1, 3, 1, 1}, [4]int{st.Ready, st.Leased, st.Delayed, st.DeadLetters}, "ready, leased, delayed, dead")

	t.Run("pending", func(t *testing.T) {
		ds := mustReceive(t, q, 10)
		require.Equal(t, []string{f["P.id"]}, ids(ds), "only the pending message is receivable")
		require.Equal(t, "P", string(ds[0].Message.Payload))
		require.Equal(t, 1, ds[0].Deliveries)
		require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt))
	})
	t.Run("dedup key", func(t *testing.T) {
		dup, err := q.PublishKeyed(ctx(t), "key-1", []byte("again"))
		require.NoError(t, err)
		require.Equal(t, f["K.id"], dup.ID)
		requireSameInstant(t, f.instant(t, "K.enqueued"), dup.EnqueuedAt)
	})
	t.Run("dead letter", func(t *testing.T) {
		var want broker.DeadLetterValue
		require.NoError(t, json.Unmarshal([]byte(f["E.deadLetter"]), &want))
		dls := mustDeadLetters(t, q)
		require.Len(t, dls, 1)
		got := dls[0]
		requireSameInstant(t, want.FailedAt, got.FailedAt)
		requireSameInstant(t, want.Message.EnqueuedAt, got.Message.EnqueuedAt)
		want.FailedAt, got.FailedAt = time.Time{}, time.Time{}
		want.Message.EnqueuedAt, got.Message.EnqueuedAt = time.Time{}, time.Time{}
		require.Equal(t, want, got, "same Reason, Code, Cause, Deliveries, message")
		require.Equal(t, "the input was refused", got.Cause)
	})
	t.Run("extended lease", func(t *testing.T) {
		_, err := q.Extend(ctx(t), broker.ReceiptValue(f["C.oldReceipt"]), time.Second)
		requireErrorIs(t, err, broker.LeaseExpired) // replaced before the restart: still void
	})
	t.Run("leased", func(t *testing.T) {
		clock.Set(f.instant(t, "A.expires").Add(-time.Nanosecond))
		requireNoneReceivable(t, q, "a lease survives: invisible until its ExpiresAt")
		require.NoError(t, q.Ack(ctx(t), broker.ReceiptValue(f["A.receipt"])), "the old receipt still acks")

		clock.Set(f.instant(t, "B.expires").Add(-time.Nanosecond))
		requireNoneReceivable(t, q)
		clock.Set(f.instant(t, "B.expires"))
		d := mustReceiveOne(t, q)
		require.Equal(t, f["B.id"], d.Message.ID)
		require.Equal(t, 2, d.Deliveries, "the delivery count survived")
		require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
	})
	t.Run("delayed", func(t *testing.T) {
		clock.Set(f.instant(t, "D.visibleAt").Add(-time.Nanosecond))
		requireNoneReceivable(t, q, "a retry delay survives")
		clock.Set(f.instant(t, "D.visibleAt"))
		d := mustReceiveOne(t, q)
		require.Equal(t, f["D.id"], d.Message.ID)
		require.Equal(t, 2, d.Deliveries)
	})
	t.Run("extended lease acks", func(t *testing.T) {
		clock.Set(f.instant(t, "C.expires").Add(-time.Nanosecond))
		require.NoError(t, q.Ack(ctx(t), broker.ReceiptValue(f["C.receipt"])))
	})
}

func TestStateSurvivesCleanRestart(t *testing.T) {
	for _, mode := range syncModes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, func(o *broker.Options) { o.Sync = mode })
			f := facts{}
			runScenario(t, e.queue("jobs", restartPolicy()), e.clock, func(k, v string) { f[k] = v })
			e.reopen()
			checkScenario(t, e.queue("jobs", restartPolicy()), e.clock, f)
		})
	}
}

func TestStateSurvivesProcessKill(t *testing.T) {
	for _, mode := range syncModes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, func(o *broker.Options) { o.Sync = mode })
			e.close()
			f := runChild(t, "scenario", e.dir, mode, t0, "now")
			e.open()
			checkScenario(t, e.queue("jobs", restartPolicy()), e.clock, f)
		})
	}
}

// A message that kills its consumer every time still reaches the
// dead-letter store: each killed child's lease counted. It holds in every
// sync mode: under SyncPublish and SyncNone the lease a Receive takes is
// written to the log file before the Receive returns, and a process crash
// keeps what was written.
func TestDeliveryCountNeverGoesBackwardsAcrossKill(t *testing.T) {
	for _, mode := range syncModes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, func(o *broker.Options) { o.Sync = mode })
			p := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3 })
			m := mustPublish(t, e.queue("jobs", p), "poison")
			e.close()
			for i := 0; i <= p.MaxDeliveries; i++ {
				now := t0.Add(time.Duration(i) * p.VisibilityTimeout) // the previous lease has just lapsed
				f := runChild(t, "receive", e.dir, mode, now, "received")
				if i < p.MaxDeliveries {
					require.Equal(t, m.ID, f["id"], "child %d", i)
					require.Equal(t, i+1, f.int(t, "deliveries"), "child %d", i)
				} else {
					require.Equal(t, "", f["id"], "the last lease lapsed: nothing to deliver")
				}
			}
			e.clock.Set(t0.Add(time.Duration(p.MaxDeliveries) * p.VisibilityTimeout))
			e.open()
			q := e.queue("jobs", p)
			dls := mustDeadLetters(t, q)
			require.Len(t, dls, 1)
			require.Equal(t, m.ID, dls[0].Message.ID)
			require.Equal(t, broker.ReasonLeaseExpired, dls[0].Reason)
			require.Equal(t, p.MaxDeliveries, dls[0].Deliveries)
			requireSameInstant(t, e.clock.Now(), dls[0].FailedAt)
			requireNoneReceivable(t, q)
		})
	}
}

func TestSecondOpenInAnotherProcessIsLocked(t *testing.T) {
	e := newEnv(t)
	e.close()
	cmd, _ := startChild(t, "hold", e.dir, broker.SyncAll, t0, "open")
	_, err := broker.Open(e.dir, e.opts)
	requireErrorIs(t, err, broker.Locked, e.dir)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	e.open() // the lock died with its process
}

const (
	childRoleEnv = "WALBROKER_TEST_CHILD"
	childDirEnv  = "WALBROKER_TEST_DIR"
	childNowEnv  = "WALBROKER_TEST_NOW"
	childSyncEnv = "WALBROKER_TEST_SYNC"
)

// TestHelperChild is the child process of the kill tests: it runs only
// when the test binary re-executes itself with childRoleEnv set. It writes
// "MARK <json [key, value]>" after each acknowledged step, then blocks until
// it is killed.
func TestHelperChild(t *testing.T) {
	role := os.Getenv(childRoleEnv)
	if role == "" {
		t.Skip("not a test on its own: the kill tests run it as their child process, with " + childRoleEnv + " set")
	}
	mark := func(k, v string) {
		js, _ := json.Marshal([2]string{k, v})
		fmt.Fprintf(os.Stdout, "MARK %s\n", js)
	}
	nowNs, err := strconv.ParseInt(os.Getenv(childNowEnv), 10, 64)
	require.NoError(t, err)
	mode, err := strconv.Atoi(os.Getenv(childSyncEnv))
	require.NoError(t, err)
	clock := newFakeClock()
	clock.Set(time.Unix(0, nowNs))
	s, err := broker.Open(os.Getenv(childDirEnv), broker.Options{Now: clock.Now, Sync: broker.SyncMode(mode), SegmentBytes: testSegmentBytes})
	require.NoError(t, err)
	switch role {
	case "scenario":
		q, err := s.Queue("jobs", restartPolicy())
		require.NoError(t, err)
		runScenario(t, q, clock, mark)
	case "receive":
		q, err := s.Queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3 }))
		require.NoError(t, err)
		ds := mustReceive(t, q, 1)
		if len(ds) == 1 {
			mark("id", ds[0].Message.ID)
			mark("deliveries", strconv.Itoa(ds[0].Deliveries))
		}
		mark("received", "")
	case "hold":
		mark("open", "")
	default:
		t.Fatalf("unknown role %q", role)
	}
	time.Sleep(time.Hour) // until the parent's SIGKILL
}

// startChild re-executes the test binary as a child with role, and reads
// its markers until the marker named last.
func startChild(t *testing.T, role, dir string, mode broker.SyncMode, now time.Time, last string) (*exec.Cmd, facts) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperChild$", "-test.timeout=10m")
	cmd.Env = append(os.Environ(),
		childRoleEnv+"="+role, childDirEnv+"="+dir,
		childNowEnv+"="+nanos(now), childSyncEnv+"="+strconv.Itoa(int(mode)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	f := facts{}
	var other []string
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := bytes.CutPrefix([]byte(line), []byte("MARK "))
		if !ok {
			other = append(other, line)
			continue
		}
		var kv [2]string
		require.NoError(t, json.Unmarshal(rest, &kv))
		f[kv[0]] = kv[1]
		if kv[0] == last {
			return cmd, f
		}
	}
	_ = cmd.Wait()
	t.Fatalf("child %s ended before marker %q; stdout:\n%s\nstderr:\n%s", role, last, other, stderr.String())
	return nil, nil
}

// runChild runs a child until its last marker, then SIGKILLs it.
func runChild(t *testing.T, role, dir string, mode broker.SyncMode, now time.Time, last string) facts {
	t.Helper()
	cmd, f := startChild(t, role, dir, mode, now, last)
	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no Close, no deferred code
	_ = cmd.Wait()
	return f
}

func TestSyncModesRoundTripAndSurviveReopen(t *testing.T) {
	for _, mode := range syncModes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, func(o *broker.Options) { o.Sync = mode })
			q := e.queue("jobs", policy())
			acked := mustPublish(t, q, "acked")
			d := mustReceiveOne(t, q)
			require.Equal(t, acked.ID, d.Message.ID)
			require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
			kept := mustPublish(t, q, "kept")
			e.reopen()
			q = e.queue("jobs", policy())
			d = mustReceiveOne(t, q)
			require.Equal(t, kept.ID, d.Message.ID, "the acked message stayed gone")
			require.Equal(t, "kept", string(d.Message.Payload))
			require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
			requireNoneReceivable(t, q)
		})
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	e := newEnv(t)
	_, err := broker.Open(e.dir, e.opts)
	requireErrorIs(t, err, broker.Locked, e.dir)
	e.close()
	e.open()
}

func TestOpenCreatesMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	s, err := broker.Open(dir, broker.Options{SegmentBytes: testSegmentBytes})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
	require.Equal(t, fs.FileMode(0o700), fi.Mode().Perm())
}

// An empty path is refused, not taken for the current directory.
func TestOpenRefusesAnEmptyPath(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	s, err := broker.Open("", broker.Options{})
	require.Nil(t, s)
	require.ErrorContains(t, err, "directory path is empty")
	entries, err := os.ReadDir(cwd)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing was written to the current directory")
}

func TestFilesAre0600DirsAre0700(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	e := openEnvAt(t, root) // Open creates the directory
	q := e.queue("jobs", policy())
	for range 3 {
		mustPublish(t, q, "x")
	}
	require.NoError(t, q.Reject(ctx(t), mustReceiveOne(t, q).Lease.Receipt, nil))
	check := func() {
		n := 0
		require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			require.NoError(t, err)
			fi, err := d.Info()
			require.NoError(t, err)
			want := fs.FileMode(0o600)
			if d.IsDir() {
				want = 0o700
			}
			require.Equal(t, want, fi.Mode().Perm(), path)
			n++
			return nil
		}))
		require.Greater(t, n, 2)
	}
	check()
	e.close()
	check()
}

func TestCloseThenCallsFailWithClosed(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	m := mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	require.NoError(t, e.s.Close())
	s := e.s
	e.s = nil

	checks := map[string]error{}
	_, checks["Publish"] = q.Publish(ctx(t), nil)
	_, checks["PublishKeyed"] = q.PublishKeyed(ctx(t), "k", nil)
	_, checks["PublishBatch"] = q.PublishBatch(ctx(t), [][]byte{nil})
	_, checks["Receive"] = q.Receive(ctx(t), 1)
	checks["Ack"] = q.Ack(ctx(t), d.Lease.Receipt)
	_, checks["Nack"] = q.Nack(ctx(t), d.Lease.Receipt, nil)
	checks["Reject"] = q.Reject(ctx(t), d.Lease.Receipt, nil)
	_, checks["Extend"] = q.Extend(ctx(t), d.Lease.Receipt, time.Second)
	_, checks["DeadLetters"] = q.DeadLetters(ctx(t), 1)
	checks["ReplayDeadLetter"] = q.ReplayDeadLetter(ctx(t), m.ID)
	checks["DeleteDeadLetter"] = q.DeleteDeadLetter(ctx(t), m.ID)
	_, checks["Store.Queue"] = s.Queue("jobs", policy())
	checks["Store.Close"] = s.Close()
	backup := filepath.Join(t.TempDir(), "backup")
	checks["Store.Backup"] = s.Backup(ctx(t), backup)
	checks["Store.Err"] = s.Err()
	for call, err := range checks {
		require.Error(t, err, call)
		require.ErrorIs(t, err, broker.Closed, call)
		require.Contains(t, err.Error(), "closed", call)
	}

	_, err := os.Stat(backup)
	require.ErrorIs(t, err, fs.ErrNotExist, "a Backup after Close made its directory")
	require.Equal(t, []string{"jobs"}, s.Queues(), "Queues names what Close left")
	require.Equal(t, 1, q.Stats().Leased)

	e.open()
	q = e.queue("jobs", policy())
	require.Equal(t, 1, q.Stats().Leased, "nothing moved after Close")
}

// corruptLog sets up a log whose middle record is damaged: publishes of A,
// B and C (each its own commit, so B's bytes are covered by a completed
// fdatasync), then one byte of B's payload flipped on disk. It returns the
// IDs and the damaged file's name.
func corruptLog(t *testing.T) (e *env, a, c broker.MessageValue, file string) {
	e = newEnv(t)
	q := e.queue("jobs", policy())
	a = mustPublish(t, q, strings.Repeat("A", 300))
	b := strings.Repeat("B", 300)
	e.lostB = mustPublish(t, q, b).ID
	c = mustPublish(t, q, strings.Repeat("C", 300))
	e.close()
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
	require.NoError(t, err)
	for _, seg := range segs {
		raw, err := os.ReadFile(seg)
		require.NoError(t, err)
		if i := bytes.Index(raw, []byte(b)); i >= 0 {
			raw[i+150] ^= 0x40
			require.NoError(t, os.WriteFile(seg, raw, 0o600))
			return e, a, c, filepath.Base(seg)
		}
	}
	t.Fatal("B's payload is in no segment")
	return
}

func TestCorruptLogRefusedNamingFileAndOffset(t *testing.T) {
	e, _, _, file := corruptLog(t)
	// The checkpoint written at close vouches for the damaged record, so
	// open does not read it: reading it finds the damage and stops the
	// store, and the next open scans everything and refuses the log.
	s, err := broker.Open(e.dir, e.opts)
	require.NoError(t, err)
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	_, err = q.Receive(ctx(t), 10)
	requireErrorIs(t, err, broker.Corrupt, file)
	_ = s.Close()
	_, err = broker.Open(e.dir, e.opts)
	requireErrorIs(t, err, broker.Corrupt, file, "offset")
}

// Damage found while consuming stops the store for good: Consume returns
// it (Corrupt, naming the file) rather than retrying a Receive that cannot
// succeed before the store is reopened.
func TestConsumeEndsOnDamageFound(t *testing.T) {
	e, a, _, file := corruptLog(t)
	e.open()
	q := e.queue("jobs", policy())
	guard, cancel := context.WithTimeout(ctx(t), 30*time.Second) // against a hang only
	defer cancel()
	var handled []string
	err := broker.Consume(guard, q, func(_ context.Context, d broker.DeliveryValue) error {
		handled = append(handled, d.Message.ID) // Concurrency 1: one handler at a time
		return nil
	}, broker.ConsumeOptions{})
	requireErrorIs(t, err, broker.Corrupt, file)
	require.Equal(t, []string{a.ID}, handled, "the message before the damage was handled")
}

func TestSalvageKeepsIntactRecordsBeforeAndAfter(t *testing.T) {
	e, a, c, file := corruptLog(t)
	b := e.lostB
	var logs lockedBuffer
	e.opts.Salvage = true
	e.opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	e.open()
	q := e.queue("jobs", policy())
	d := mustPublish(t, q, "D") // the salvaged log takes new records
	ds := mustReceive(t, q, 10)
	require.Equal(t, []string{a.ID, c.ID, d.ID}, ids(ds), "intact records before and after the damage; never the damaged one")
	require.Equal(t, strings.Repeat("C", 300), string(ds[1].Message.Payload))

	reported := false
	for _, r := range logs.records(t) {
		if n, ok := r["salvaged_spans"].(float64); ok && n >= 1 {
			reported = true
		}
	}
	require.True(t, reported, "Salvage reports what it skipped; logged: %v", logs.records(t))
	rec := e.s.Recovery()
	require.Equal(t, []string{b}, rec.LostMessages, "the checkpoint knew B was live: it is named lost")
	require.Equal(t, map[string][]string{"jobs": {b}}, rec.LostByQueue, "with the queue it was in")
	require.NotEmpty(t, rec.SalvageCopies)
	for _, says := range []string{"salvage skipped", rec.SalvageCopies[0], "1 message lost (1 in jobs): " + b} {
		require.Contains(t, rec.String(), says, "the report in one line says what salvage did")
	}
	copies, err := filepath.Glob(filepath.Join(e.dir, "salvage", file+"*"))
	require.NoError(t, err)
	require.NotEmpty(t, copies, "the damaged file was copied aside first")
	for _, p := range append(copies, filepath.Join(e.dir, "salvage")) {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		want := fs.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		require.Equal(t, want, fi.Mode().Perm(), p)
	}

	e.opts.Salvage = false
	e.reopen() // the salvaged log now opens without Salvage
	q = e.queue("jobs", policy())
	require.Equal(t, 3, q.Stats().Leased)
}

// twoQueueLog sets up a store with queues jobs and mail: publishes of
// A (jobs), B (jobs), M (mail), C (jobs) and N (mail), each its own commit,
// mail declared after A. With receive, every message is then received
// (leases, recorded after them all). It closes the store, and flips a
// byte in each record whose bytes hold one of damage (a payload's letter
// repeated, or "mail" for the queue's declaration). It returns the IDs by
// letter.
func twoQueueLog(t *testing.T, receive bool, damage ...string) (*env, map[string]string) {
	e := newEnv(t)
	jobs := e.queue("jobs", policy())
	id := map[string]string{"A": mustPublish(t, jobs, strings.Repeat("A", 300)).ID}
	mail := e.queue("mail", policy())
	for _, p := range []struct {
		q      *broker.Queue
		letter string
	}{{jobs, "B"}, {mail, "M"}, {jobs, "C"}, {mail, "N"}} {
		id[p.letter] = mustPublish(t, p.q, strings.Repeat(p.letter, 300)).ID
	}
	if receive {
		require.Len(t, mustReceive(t, jobs, 10), 3)
		require.Len(t, mustReceive(t, mail, 10), 2)
	}
	e.close()
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
	require.NoError(t, err)
	for _, what := range damage {
		pattern := []byte(what)
		if len(what) == 1 {
			pattern = bytes.Repeat(pattern, 300)
		}
		found := 0
		for _, seg := range segs {
			raw, err := os.ReadFile(seg)
			require.NoError(t, err)
			if i := bytes.Index(raw, pattern); i >= 0 {
				// (Past the match: a frame byte beside the payload may
				// happen to be the letter too, the checksums being salted.)
				require.Equal(t, -1, bytes.Index(raw[i+len(pattern):], pattern), "%q is in one record", what)
				raw[i+len(pattern)/2] ^= 0x40
				require.NoError(t, os.WriteFile(seg, raw, 0o600))
				found++
			}
		}
		require.Equal(t, 1, found, "%q is in one segment", what)
	}
	return e, id
}

// With several queues in a store, Salvage says which queue each lost
// message was in, so that the right producers send again: whether the
// checkpoint knew the message was live (nothing after its publish names
// it), or only a later event (its lease) names it, with no checkpoint.
// A queue whose declaration was lost as well is named by its number.
func TestSalvageNamesTheQueueOfEachLostMessage(t *testing.T) {
	open := func(t *testing.T, e *env) (broker.RecoveryReport, []map[string]any) {
		var logs lockedBuffer
		e.opts.Salvage = true
		e.opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		return e.open().Recovery(), logs.records(t)
	}
	loggedByQueue := func(t *testing.T, logs []map[string]any) any {
		for _, r := range logs {
			if r["msg"] == "broker: recovered" {
				return r["lost_by_queue"]
			}
		}
		t.Fatalf("no recovered line: %v", logs)
		return nil
	}

	t.Run("checkpoint", func(t *testing.T) {
		e, id := twoQueueLog(t, false, "B", "M")
		rec, logs := open(t, e)
		require.Equal(t, []string{id["B"], id["M"]}, rec.LostMessages)
		require.Equal(t, map[string][]string{"jobs": {id["B"]}, "mail": {id["M"]}}, rec.LostByQueue)
		require.Contains(t, rec.String(), fmt.Sprintf("2 messages lost (1 in jobs, 1 in mail): %s, %s", id["B"], id["M"]))
		require.Equal(t, map[string]any{"jobs": []any{id["B"]}, "mail": []any{id["M"]}}, loggedByQueue(t, logs), "the log line says it too")
		ds := mustReceive(t, e.queue("mail", policy()), 10)
		require.Equal(t, []string{id["N"]}, ids(ds), "the intact message of mail is kept")
	})

	t.Run("orphans", func(t *testing.T) {
		e, id := twoQueueLog(t, true, "B", "M")
		require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
		rec, logs := open(t, e)
		require.True(t, rec.IndexRebuilt)
		require.Equal(t, []string{id["B"], id["M"]}, rec.LostMessages)
		require.Equal(t, map[string][]string{"jobs": {id["B"]}, "mail": {id["M"]}}, rec.LostByQueue)
		require.Equal(t, map[string]any{"jobs": []any{id["B"]}, "mail": []any{id["M"]}}, loggedByQueue(t, logs))
	})

	t.Run("declaration lost", func(t *testing.T) {
		// mail's only declaration is gone with M: M's lease and N's
		// publish name a queue number nothing declares, so both are lost.
		e, id := twoQueueLog(t, true, "mail", "B", "M")
		require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
		rec, _ := open(t, e)
		require.Equal(t, []string{id["B"], id["M"], id["N"]}, rec.LostMessages)
		require.Equal(t, map[string][]string{"jobs": {id["B"]}, "queue #2": {id["M"], id["N"]}}, rec.LostByQueue)
		require.Contains(t, rec.String(), "3 messages lost (1 in jobs, 2 in queue #2): ")
		require.Equal(t, []string{"jobs"}, e.s.Queues())
	})
}

// A sealed segment that the last checkpoint vouched for is not scanned at
// open; damage in it is found when its record is read. That stops the
// store, and the next open scans the whole log: it refuses it naming the
// file and offset, and Salvage recovers every intact message.
func TestDamageInASealedSegmentIsFoundWhenRead(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	var sent []broker.MessageValue
	for i := range 200 {
		sent = append(sent, mustPublish(t, q, fmt.Sprintf("%04d%s", i, strings.Repeat("x", 296))))
	}
	require.Greater(t, e.s.Stats().Segments, 3)
	e.close()
	seg := filepath.Join(e.dir, "0000000001.seg")
	raw, err := os.ReadFile(seg)
	require.NoError(t, err)
	i := bytes.Index(raw, []byte("0007xxx"))
	require.Positive(t, i)
	raw[i+100] ^= 0x40
	require.NoError(t, os.WriteFile(seg, raw, 0o600))

	e.open() // the checkpoint vouches for segment 1: no scan
	q = e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	var err2 error
	got := 0
	for err2 == nil && got < len(sent) {
		var ds []broker.DeliveryValue
		ds, err2 = q.Receive(ctx(t), 1)
		got += len(ds)
	}
	requireErrorIs(t, err2, broker.Corrupt, "0000000001.seg")
	require.Equal(t, 7, got, "the messages before the damaged one were delivered")
	_, err = q.Receive(ctx(t), 1)
	requireErrorIs(t, err, broker.Corrupt)
	_ = e.s.Close()
	e.s = nil

	_, err = broker.Open(e.dir, e.opts)
	requireErrorIs(t, err, broker.Corrupt, "0000000001.seg", "offset")

	// A copy without its index: only the log can tell what was lost.
	bare := t.TempDir()
	require.NoError(t, os.CopyFS(bare, os.DirFS(e.dir)))
	require.NoError(t, os.RemoveAll(filepath.Join(bare, "index")))
	require.NoError(t, os.Remove(filepath.Join(bare, "LOCK")))

	e.opts.Salvage = true
	e.open()
	q = e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	st := q.Stats()
	require.Equal(t, len(sent)-8, st.Ready, "every intact message not yet delivered")
	require.Equal(t, 7, st.Leased)
	rec := e.s.Recovery()
	require.Equal(t, []string{sent[7].ID}, rec.LostMessages, "the lost message is named: the checkpoint knew it was live")
	require.Equal(t, map[string][]string{"jobs": {sent[7].ID}}, rec.LostByQueue)
	require.Equal(t, 1, rec.SalvagedSpans)
	require.True(t, rec.IndexRebuilt)

	// Without the checkpoint, a later event (its lease) names it, and the
	// publishes before the damage (the first segment has no sequence mark)
	// show it was not older than the damage.
	s, err := broker.Open(bare, e.opts)
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, []string{sent[7].ID}, s.Recovery().LostMessages, "named from the log alone")
	require.Equal(t, map[string][]string{"jobs": {sent[7].ID}}, s.Recovery().LostByQueue, "with its queue, from its lease")
}

// A damaged preamble record takes only itself: the queue declarations of
// the one segment left (older ones reclaimed) survive damage to the record
// beside them, and with no checkpoint to fall back on Salvage keeps every
// message after it — and never hands out a message ID again.
func TestSalvageOfADamagedPreambleKeepsTheDeclarations(t *testing.T) {
	// The preamble's last record is the mark of the next message sequence
	// (kind 12, index/doc.go).
	salvageADamagedPreamble(t, 12, false)
}

// When the damage takes the only record left that declares a queue, the
// checkpoint, which Salvage may no longer trust for the queues' state,
// still knows the declaration: the queue's messages after the damage are
// kept.
func TestSalvageThatCutsAQueuesOnlyDeclarationTakesItFromTheCheckpoint(t *testing.T) {
	salvageADamagedPreamble(t, 2, true) // kind 2: declare (index/doc.go)
}

// salvageADamagedPreamble fills two segments of a queue, removes the
// first (as reclaiming does) and, unless keepCheckpoint, the index, and
// zeroes from inside the preamble record of the given kind in the second
// into the record after it. Opened with Salvage, the store must hand out
// the messages after the damage, newest included, and never an ID again.
func salvageADamagedPreamble(t *testing.T, kind byte, keepCheckpoint bool) {
	t.Helper()
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	q := e.queue("jobs", pol)
	var sent []broker.MessageValue
	for i := 0; e.s.Stats().Segments < 2; i++ {
		sent = append(sent, mustPublish(t, q, fmt.Sprintf("%04d%s", i, strings.Repeat("x", 296))))
	}
	for i, n := len(sent), len(sent)+5; i < n; i++ {
		sent = append(sent, mustPublish(t, q, fmt.Sprintf("%04d%s", i, strings.Repeat("x", 296))))
	}
	e.close()
	// What reclaiming leaves when the first segment's messages were
	// acked: segment 2, the last, alone declares the queue.
	require.NoError(t, os.Remove(filepath.Join(e.dir, "0000000001.seg")))
	if !keepCheckpoint {
		require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	}
	seg := filepath.Join(e.dir, "0000000002.seg")
	raw, err := os.ReadFile(seg)
	require.NoError(t, err)
	off := segment.HeaderSize
	for raw[off+segment.Size(0)] != kind {
		off += segment.Size(int(binary.LittleEndian.Uint32(raw[off+4:])))
	}
	// Zero from inside it into the record after it: the span salvage
	// skips then begins in the preamble.
	clear(raw[off+12 : off+12+55])
	require.NoError(t, os.WriteFile(seg, raw, 0o600))

	_, err = broker.Open(e.dir, e.opts)
	requireErrorIs(t, err, broker.Corrupt, "0000000002.seg")
	e.opts.Salvage = true
	e.open()
	require.Equal(t, 1, e.s.Recovery().SalvagedSpans)
	q = e.queue("jobs", pol)
	var got []broker.DeliveryValue
	for {
		ds := mustReceive(t, q, 100)
		if len(ds) == 0 {
			break
		}
		got = append(got, ds...)
	}
	require.NotEmpty(t, got, "the messages of segment 2 are there")
	last := sent[len(sent)-1]
	require.Equal(t, last.ID, got[len(got)-1].Message.ID, "the newest message survived")
	for _, d := range got {
		require.Equal(t, fmt.Sprintf("%04d", slices.IndexFunc(sent, func(m broker.MessageValue) bool { return m.ID == d.Message.ID })), string(d.Message.Payload[:4]), "message %s", d.Message.ID)
	}
	fresh := mustPublish(t, q, "fresh")
	require.Greater(t, fresh.ID, last.ID, "a new message never takes an ID already given")
}

// TestConcurrentClosesCloseOnce: of Closes called together, one closes
// the store and the others, waiting for it, get Closed; none writes the
// index after the first let the directory go, and the store reopens with
// what it held.
func TestConcurrentClosesCloseOnce(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	for range 50 {
		mustPublish(t, q, "m")
	}
	mustReceive(t, q, 7)
	s := e.s
	e.s = nil
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() { errs <- s.Close() }()
	}
	closed := 0
	for range cap(errs) {
		if err := <-errs; err != nil {
			require.ErrorIs(t, err, broker.Closed)
			closed++
		}
	}
	require.Equal(t, cap(errs)-1, closed, "not exactly one Close closed the store")

	e.open()
	st := e.queue("jobs", policy()).Stats()
	require.Equal(t, 43, st.Ready)
	require.Equal(t, 7, st.Leased)
}

// TestCloseOfAStoreStoppedByDamage: Close releases a store that damage
// stopped, as it does one a failed write stopped, and returns nil (it
// closed every file; the damage is Err's to report, not a failure of
// Close), and the next Open scans the log, finding the damage, rather
// than failing with Locked.
func TestCloseOfAStoreStoppedByDamage(t *testing.T) {
	e, _, _, file := corruptLog(t)
	e.open()
	q := e.queue("jobs", policy())
	_, err := q.Receive(ctx(t), 10)
	requireErrorIs(t, err, broker.Corrupt, file)
	requireErrorIs(t, e.s.Err(), broker.Corrupt, file)
	require.NoError(t, e.s.Close())
	e.s = nil
	_, err = broker.Open(e.dir, e.opts)
	requireErrorIs(t, err, broker.Corrupt, file)
	require.NotErrorIs(t, err, broker.Locked)
}
