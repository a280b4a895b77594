package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// The sweep below runs concurrent publishers and consumers under each
// sync mode on a vfs.CrashFS that fails at a random file operation, and
// checks two clones of the store the failure left, opened as the next
// process would open them, through the public API only:
//
//   - a process crash (every written byte and every change of names, the
//     tree as the page cache held it): every call that returned is there,
//     under every mode;
//   - a power loss (only what the device held; half the cases keep half
//     the unsynced blocks too, the last write torn): every call that a
//     completed fdatasync of the active segment covered is there, and
//     what the mode promises on top (SyncAll: every call that returned;
//     SyncPublish: every publish that returned, and every call that
//     returned before a publish that returned began).
//
// On each clone: no message that no publish made; every message a kept
// publish made, unless an Ack of it was tried; no message a kept Ack
// settled; every message a kept Reject or dead-lettering Nack settled is
// a dead letter; a delivery count never below what a kept Receive
// handed out and never above MaxDeliveries; a kept keyed publish's key
// still answers with its original; no ID handed out before is handed
// out again; and the reopened queues' Stats agree with what Receive and
// DeadLetters show, before and after every lease has lapsed.
//
// The power-loss sweep of the recovery package checks most of these with
// one goroutine; the process-crash suite checks them with many, under
// SyncAll and SyncPublish power losses only. This one adds SyncNone's
// power losses under concurrent calls, and the gauges of the reopened
// store.

// rsPolicy is the policy of the sweep's queues: small messages (the
// segments are the smallest), three deliveries, a 1 s retry delay.
var rsPolicy = broker.PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 3, RetryDelay: time.Second,
	MaxMessageBytes: 1024, DedupWindow: 6 * time.Hour}

// rsQueues are the sweep's queues: "p" only published to, "w" published
// to and consumed, "k" keyed publishes, consumed.
var rsQueues = []string{"p", "w", "k"}

// rsCall is one call that returned.
type rsCall struct {
	op    string // "publish", "keyed", "receive", "ack", "nack", "reject"
	idx   int    // its place among the calls that returned, from 1
	start int    // how many calls had returned when it began
	queue string
	ids   []string
	key   string
	count int  // receive: the delivery's count
	dead  bool // nack: it dead-lettered
	dup   bool // keyed: it returned an earlier message, and enqueued nothing
}

// rsJournal is what the workload's calls returned.
type rsJournal struct {
	mu        sync.Mutex
	n         int               // calls returned
	calls     []rsCall          // in the order they returned
	payloads  map[string]string // payload → queue of every publish attempted
	published map[string]string // ID → payload, of the publishes that returned
	ackTried  map[string]bool   // IDs an Ack was tried for
	handed    map[string]bool   // every ID a returned call handed out
	keys      map[string]string // key → the original's ID, as returned
}

func newRSJournal() *rsJournal {
	return &rsJournal{payloads: map[string]string{}, published: map[string]string{}, ackTried: map[string]bool{},
		handed: map[string]bool{}, keys: map[string]string{}}
}

// begin returns how many calls have returned (the new call's start).
func (j *rsJournal) begin() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.n
}

// returned records c, which returned.
func (j *rsJournal) returned(c rsCall) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.n++
	c.idx = j.n
	j.calls = append(j.calls, c)
	for _, id := range c.ids {
		j.handed[id] = true
	}
	if _, ok := j.keys[c.key]; c.op == "keyed" && !ok {
		j.keys[c.key] = c.ids[0]
	}
}

// returnedCount is the sweep's view of how many calls have returned, for
// the file system watch.
func (j *rsJournal) returnedCount() int { return j.begin() }

// rsSegmentName matches a segment file's name.
var rsSegmentName = regexp.MustCompile(`^[0-9]{10}\.seg$`)

// rsWatchFS learns which calls a completed fdatasync of a segment made
// durable: every call that returned before it began wrote its records
// before it.
type rsWatchFS struct {
	vfs.FS
	j *rsJournal

	mu      sync.Mutex
	covered int                   // calls a completed segment fdatasync covered
	files   map[*rsWatchFile]bool // open files, so that renames rename them
}

type rsWatchFile struct {
	vfs.File
	w    *rsWatchFS
	path string // guarded by w.mu
}

func (w *rsWatchFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := w.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	wf := &rsWatchFile{File: f, w: w, path: filepath.Clean(name)}
	w.mu.Lock()
	w.files[wf] = true
	w.mu.Unlock()
	return wf, nil
}

func (w *rsWatchFS) Rename(oldname, newname string) error {
	if err := w.FS.Rename(oldname, newname); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for f := range w.files {
		if f.path == filepath.Clean(oldname) {
			f.path = filepath.Clean(newname)
		}
	}
	return nil
}

func (f *rsWatchFile) Close() error {
	f.w.mu.Lock()
	delete(f.w.files, f)
	f.w.mu.Unlock()
	return f.File.Close()
}

func (f *rsWatchFile) Sync() error {
	before := f.w.j.returnedCount()
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if rsSegmentName.MatchString(filepath.Base(f.path)) {
		f.w.covered = max(f.w.covered, before)
	}
	return nil
}

// refusal reports whether err is an answer about a lease (it lapsed while
// the workload held it), not a failure of the store.
func refusal(err error) bool {
	return errors.Is(err, broker.LeaseExpired) || errors.Is(err, broker.UnknownReceipt)
}

// rsRun runs the workload on s, journaling in j, until each goroutine has
// made its calls or met a failure. It leaves the store open: the caller
// clones and closes it.
func rsRun(t *testing.T, s *broker.Store, clock *fakeClock, j *rsJournal, seed uint64) {
	t.Helper()
	qs := map[string]*broker.Queue{}
	for _, name := range rsQueues {
		q, err := s.Queue(name, rsPolicy)
		if err != nil {
			return // the power failed already
		}
		qs[name] = q
	}
	const calls = 60
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for i := range calls {
				payload := func(n int) string {
					return fmt.Sprintf("g%d-i%d-j%d|%s", g, i, n, strings.Repeat("x", 50+rng.IntN(300)))
				}
				start := j.begin()
				switch r := rng.IntN(10); {
				case r < 4:
					queue := []string{"p", "w"}[rng.IntN(2)]
					p := payload(0)
					j.mu.Lock()
					j.payloads[p] = queue
					j.mu.Unlock()
					m, err := qs[queue].Publish(ctx(t), []byte(p))
					if err != nil {
						return
					}
					j.mu.Lock()
					j.published[m.ID] = p
					j.mu.Unlock()
					j.returned(rsCall{op: "publish", start: start, queue: queue, ids: []string{m.ID}})
				case r < 6:
					queue := []string{"p", "w"}[rng.IntN(2)]
					var batch [][]byte
					j.mu.Lock()
					for n := range 2 + rng.IntN(2) {
						p := payload(n)
						j.payloads[p] = queue
						batch = append(batch, []byte(p))
					}
					j.mu.Unlock()
					ms, err := qs[queue].PublishBatch(ctx(t), batch)
					if err != nil {
						return
					}
					var ids []string
					j.mu.Lock()
					for n, m := range ms {
						j.published[m.ID] = string(batch[n])
						ids = append(ids, m.ID)
					}
					j.mu.Unlock()
					j.returned(rsCall{op: "publish", start: start, queue: queue, ids: ids})
				default:
					key := fmt.Sprintf("key-%d", rng.IntN(30))
					p := payload(0)
					j.mu.Lock()
					j.payloads[p] = "k"
					j.mu.Unlock()
					m, err := qs["k"].PublishKeyed(ctx(t), key, []byte(p))
					if err != nil {
						return
					}
					if m.Payload != nil {
						j.mu.Lock()
						j.published[m.ID] = p
						j.mu.Unlock()
					}
					j.returned(rsCall{op: "keyed", start: start, queue: "k", key: key, ids: []string{m.ID}, dup: m.Payload == nil})
				}
			}
		})
	}
	for g := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(10+g)))
			for range calls {
				switch r := rng.IntN(50); {
				case r == 0:
					clock.Advance(31 * time.Second) // every lease held lapses
				case r < 12:
					clock.Advance(1500 * time.Millisecond) // retry delays end
				}
				queue := []string{"w", "k"}[rng.IntN(2)]
				q := qs[queue]
				start := j.begin()
				ds, err := q.Receive(ctx(t), 1+rng.IntN(3))
				if err != nil {
					return
				}
				for _, d := range ds {
					j.returned(rsCall{op: "receive", start: start, queue: queue, ids: []string{d.Message.ID}, count: d.Deliveries})
				}
				for _, d := range ds {
					id := d.Message.ID
					start := j.begin()
					var err error
					c := rsCall{start: start, queue: queue, ids: []string{id}}
					switch r := rng.IntN(20); {
					case r < 11:
						c.op = "ack"
						j.mu.Lock()
						j.ackTried[id] = true
						j.mu.Unlock()
						err = q.Ack(ctx(t), d.Lease.Receipt)
					case r < 16:
						c.op = "nack"
						var nv broker.NackValue
						nv, err = q.Nack(ctx(t), d.Lease.Receipt, broker.NewError("HANDLER_FAILED", 0, "failed", ""))
						c.dead = nv.DeadLettered
					case r < 18:
						c.op = "reject"
						err = q.Reject(ctx(t), d.Lease.Receipt, broker.DoNotRetry(nil))
					default:
						continue // held: its lease lapses
					}
					switch {
					case err == nil:
						j.returned(c)
					case refusal(err):
					default:
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// rsCase is one crash of the workload and the checks of its clones.
type rsCase struct {
	mode broker.SyncMode
	seed uint64
	k    int64 // the file operation after which the power fails
}

func (c rsCase) String() string {
	return fmt.Sprintf("mode %v, seed %d, power lost after operation %d", c.mode, c.seed, c.k)
}

// rsOptions are the store's options under mode.
func rsOptions(mode broker.SyncMode, clock *fakeClock, fs vfs.FS) broker.Options {
	return broker.Options{Now: clock.Now, Sync: mode, SyncInterval: time.Millisecond, SegmentBytes: broker.MinSegmentBytes, FS: fs}
}

// run runs the case under root and returns what is wrong with its clones.
func (c rsCase) run(t *testing.T, root string) []string {
	t.Helper()
	dir := filepath.Join(root, "store")
	clock := newFakeClock()
	j := newRSJournal()
	cfs := vfs.NewCrashFS(vfs.Default)
	cfs.CrashAfter(c.k)
	w := &rsWatchFS{FS: cfs, j: j, files: map[*rsWatchFile]bool{}}
	require.NoError(t, os.MkdirAll(dir, 0o700))
	s, err := broker.Open(dir, rsOptions(c.mode, clock, w))
	if err != nil {
		return nil // the power failed inside Open: nothing returned
	}
	rsRun(t, s, clock, j, c.seed)
	cfs.Crash() // if the workload ended first, the power fails now
	var fails []string
	kinds := []struct {
		name  string
		opts  vfs.CrashOptions
		crash bool // a process crash: every call that returned is kept
	}{
		{"process crash (the page cache)", vfs.CrashOptions{Root: dir, KeepUnsyncedFraction: 1, KeepUnsyncedNames: vfs.KeepAll, KeepUnsyncedSizes: vfs.KeepAll}, true},
		{"power loss (synced only)", vfs.CrashOptions{Root: dir}, false},
		{"power loss (half the unsynced blocks, last write torn)", vfs.CrashOptions{Root: dir, KeepUnsyncedFraction: 0.5, TearLastWrite: true,
			Rand: rand.New(rand.NewPCG(c.seed, uint64(c.k)))}, false},
	}
	w.mu.Lock()
	covered := w.covered
	w.mu.Unlock()
	for i, kind := range kinds {
		clone := filepath.Join(root, fmt.Sprintf("clone-%d", i))
		if err := cfs.CrashClone(clone, kind.opts); err != nil {
			fails = append(fails, fmt.Sprintf("%v, %s: CrashClone: %v", c, kind.name, err))
			continue
		}
		for _, f := range c.check(clone, clock.Now(), j, kept(c.mode, j, covered, kind.crash)) {
			fails = append(fails, fmt.Sprintf("%v, %s: %s", c, kind.name, f))
		}
	}
	_ = s.Close()
	return fails
}

// kept returns the calls that must survive: all that returned after a
// process crash; after a power loss, those a completed fdatasync covered
// and those the mode promises.
func kept(mode broker.SyncMode, j *rsJournal, covered int, crash bool) map[int]bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	bound := covered
	if crash || mode == broker.SyncAll {
		bound = j.n
	}
	if mode == broker.SyncPublish {
		for _, c := range j.calls {
			if c.op == "publish" || c.op == "keyed" && !c.dup {
				// Its fdatasync covered every call that returned before it
				// began. (A duplicate answer may wait for none.)
				bound = max(bound, c.start)
			}
		}
	}
	out := map[int]bool{}
	for _, c := range j.calls {
		if c.idx <= bound || mode == broker.SyncPublish && (c.op == "publish" || c.op == "keyed") {
			out[c.idx] = true
		}
	}
	return out
}

// check opens clone at now and checks it against the journal, the calls
// in keep having to be there. It returns what is wrong.
func (c rsCase) check(clone string, now time.Time, j *rsJournal, keep map[int]bool) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	clock := newFakeClock()
	clock.Set(now)
	s, err := broker.Open(clone, rsOptions(c.mode, clock, nil))
	if err != nil {
		return []string{fmt.Sprintf("does not open: %v", err)}
	}
	defer func() { _ = s.Close() }()
	j.mu.Lock()
	defer j.mu.Unlock()

	type seen struct {
		queue   string
		payload string
		before  int // its delivery count before the crash
		dead    bool
	}
	msgs := map[string]*seen{}
	qs := map[string]*broker.Queue{}
	for _, name := range rsQueues {
		q, err := s.Queue(name, rsPolicy)
		if err != nil {
			return []string{fmt.Sprintf("Queue %s: %v", name, err)}
		}
		qs[name] = q
	}
	receiveAll := func(name string) ([]broker.DeliveryValue, error) {
		var all []broker.DeliveryValue
		for {
			ds, err := qs[name].Receive(context.Background(), 100)
			if err != nil || len(ds) == 0 {
				return all, err
			}
			all = append(all, ds...)
		}
	}
	// On reopening, at the clock's last reading: the gauges against
	// what Receive and DeadLetters show.
	st0 := map[string]broker.QueueStats{}
	for _, name := range rsQueues {
		q := qs[name]
		st := q.Stats()
		st0[name] = st
		if counters := [...]int64{st.Published, st.Duplicates, st.Shed, st.Delivered, st.Acked, st.Nacked, st.Rejected, st.DeadLettered, st.Replayed}; counters != [9]int64{} {
			bad("queue %s: the counters of a store just opened are not zero: %+v", name, st)
		}
		ds, err := receiveAll(name)
		if err != nil {
			return append(out, fmt.Sprintf("Receive %s: %v", name, err))
		}
		dls, err := q.DeadLetters(context.Background(), 1<<20)
		if err != nil {
			return append(out, fmt.Sprintf("DeadLetters %s: %v", name, err))
		}
		if len(ds) != st.Ready || len(dls) != st.DeadLetters {
			bad("queue %s: on reopening Stats says %d ready and %d dead letters (%+v); Receive hands out %d, DeadLetters lists %d",
				name, st.Ready, st.DeadLetters, st, len(ds), len(dls))
		}
		if oldest := oldestOf(ds); !st.OldestReady.Equal(oldest) {
			bad("queue %s: on reopening Stats says the oldest ready message was enqueued at %v, Receive hands out first one enqueued at %v", name, st.OldestReady, oldest)
		}
		for _, d := range ds {
			if d.Deliveries > rsPolicy.MaxDeliveries {
				bad("message %s delivered a %d-th time, MaxDeliveries %d", d.Message.ID, d.Deliveries, rsPolicy.MaxDeliveries)
			}
			msgs[d.Message.ID] = &seen{queue: name, payload: string(d.Message.Payload), before: d.Deliveries - 1}
		}
		for _, dl := range dls {
			if _, ok := msgs[dl.Message.ID]; ok {
				bad("message %s is both receivable and a dead letter", dl.Message.ID)
			}
			msgs[dl.Message.ID] = &seen{queue: name, payload: string(dl.Message.Payload), before: dl.Deliveries, dead: true}
		}
	}
	// Two hours on, every lease and retry delay is over: every message is
	// ready or dead, and the gauges count each one once.
	clock.Advance(2 * time.Hour)
	for _, name := range rsQueues {
		q := qs[name]
		st := q.Stats()
		was := st0[name]
		if st.Leased != 0 || st.Delayed != 0 {
			bad("queue %s: two hours on, every lease and retry delay is over, yet Stats says %d leased, %d delayed", name, st.Leased, st.Delayed)
		}
		if got, want := st.Ready+st.DeadLetters, was.Ready+was.Leased+was.Delayed+was.DeadLetters; got != want {
			bad("queue %s: Stats on reopening counts %d messages (%+v), two hours later %d (%+v)", name, want, was, got, st)
		}
		ds, err := receiveAll(name)
		if err != nil {
			return append(out, fmt.Sprintf("Receive %s: %v", name, err))
		}
		dls, err := q.DeadLetters(context.Background(), 1<<20)
		if err != nil {
			return append(out, fmt.Sprintf("DeadLetters %s: %v", name, err))
		}
		if len(ds) != st.Ready || len(dls) != st.DeadLetters {
			bad("queue %s: two hours on, Stats says %d ready and %d dead letters; Receive hands out %d, DeadLetters lists %d",
				name, st.Ready, st.DeadLetters, len(ds), len(dls))
		}
		if oldest := oldestOf(ds); !st.OldestReady.Equal(oldest) {
			bad("queue %s: two hours on, Stats says the oldest ready message was enqueued at %v, Receive hands out first one enqueued at %v", name, st.OldestReady, oldest)
		}
		for _, d := range ds {
			if d.Deliveries > rsPolicy.MaxDeliveries {
				bad("message %s delivered a %d-th time, MaxDeliveries %d", d.Message.ID, d.Deliveries, rsPolicy.MaxDeliveries)
			}
			if _, ok := msgs[d.Message.ID]; !ok { // leased or delayed on reopening
				msgs[d.Message.ID] = &seen{queue: name, payload: string(d.Message.Payload), before: d.Deliveries - 1}
			}
		}
		for _, dl := range dls {
			if dl.Deliveries > rsPolicy.MaxDeliveries {
				bad("dead letter %s with %d deliveries, MaxDeliveries %d", dl.Message.ID, dl.Deliveries, rsPolicy.MaxDeliveries)
			}
			if _, ok := msgs[dl.Message.ID]; !ok { // leased on its last delivery on reopening
				msgs[dl.Message.ID] = &seen{queue: name, payload: string(dl.Message.Payload), before: dl.Deliveries, dead: true}
			}
		}
	}

	// No message that no publish made, and each as it was published.
	for _, id := range sortedKeysOf(msgs) {
		m := msgs[id]
		if p, ok := j.published[id]; ok {
			if p != m.payload {
				bad("message %s holds %.20q, published with %.20q", id, m.payload, p)
			}
			continue
		}
		if q, ok := j.payloads[m.payload]; !ok || q != m.queue {
			bad("message %s (%.20q in %s) was made by no publish", id, m.payload, m.queue)
		}
	}
	// What the kept calls did is there.
	for _, cl := range j.calls {
		if !keep[cl.idx] {
			continue
		}
		switch cl.op {
		case "publish", "keyed":
			for _, id := range cl.ids {
				if msgs[id] == nil && !j.ackTried[id] {
					bad("message %s, whose publish returned (call %d) and must be kept, is gone", id, cl.idx)
				}
			}
		case "ack":
			if msgs[cl.ids[0]] != nil {
				bad("message %s is still there, though its Ack returned (call %d) and must be kept", cl.ids[0], cl.idx)
			}
		case "reject", "nack":
			if m := msgs[cl.ids[0]]; (cl.op == "reject" || cl.dead) && (m == nil || !m.dead) {
				bad("message %s is not a dead letter, though its %s dead-lettered it (call %d) and must be kept (found %+v)", cl.ids[0], cl.op, cl.idx, m)
			}
		case "receive":
			if m := msgs[cl.ids[0]]; m != nil && m.before < cl.count {
				bad("message %s: its delivery count went back from %d (call %d, to be kept) to %d", cl.ids[0], cl.count, cl.idx, m.before)
			}
		}
	}
	// A key whose publish must be kept answers with its original; any
	// other answer is a new message, under an ID never handed out.
	k := qs["k"]
	for _, key := range sortedKeysOf(j.keys) {
		orig := j.keys[key]
		mustKeep := false
		for _, cl := range j.calls {
			if cl.op == "keyed" && cl.key == key && keep[cl.idx] {
				mustKeep = true
			}
		}
		m, err := k.PublishKeyed(context.Background(), key, []byte("probe"))
		if err != nil {
			bad("PublishKeyed %s: %v", key, err)
			continue
		}
		switch {
		case m.ID == orig:
		case mustKeep:
			bad("PublishKeyed %s returned %s, not the original %s a kept call returned", key, m.ID, orig)
		case j.handed[m.ID]:
			bad("PublishKeyed %s returned %s, an ID handed out before the crash to another message", key, m.ID)
		}
	}
	for _, name := range rsQueues {
		for range 3 {
			m, err := qs[name].Publish(context.Background(), []byte("after"))
			if err != nil {
				bad("Publish after reopening: %v", err)
				break
			}
			if j.handed[m.ID] {
				bad("a publish after reopening got ID %s, handed out before the crash", m.ID)
			}
		}
	}
	return out
}

// oldestOf is the EnqueuedAt of the first of ds, which Receive hands out
// oldest first, or the zero Time when there is none.
func oldestOf(ds []broker.DeliveryValue) time.Time {
	if len(ds) == 0 {
		return time.Time{}
	}
	return ds[0].Message.EnqueuedAt
}

func sortedKeysOf[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestEachSyncModeKeepsWhatItPromisesAcrossCrashesOfConcurrentCalls: see
// the comment at the top of this file.
func TestEachSyncModeKeepsWhatItPromisesAcrossCrashesOfConcurrentCalls(t *testing.T) {
	cases := 12
	if testing.Short() {
		cases = 3
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for mi, mode := range []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			// The number of file operations of a run, from one without a
			// crash: the cases crash at random ones up to a little past it.
			root := fastDir(t)
			dry := vfs.NewCrashFS(vfs.Default)
			clock := newFakeClock()
			s, err := broker.Open(filepath.Join(root, "dry"), rsOptions(mode, clock, dry))
			require.NoError(t, err)
			rsRun(t, s, clock, newRSJournal(), seed)
			require.NoError(t, s.Close())
			total := dry.Ops()
			rng := rand.New(rand.NewPCG(seed, uint64(mi)))
			failures := 0
			for i := range cases {
				c := rsCase{mode: mode, seed: seed + uint64(i), k: rng.Int64N(total * 11 / 10)}
				for _, f := range c.run(t, filepath.Join(root, fmt.Sprint(i))) {
					failures++
					if failures <= 5 {
						t.Error(f)
					}
				}
			}
			if failures > 5 {
				t.Errorf("%d more failures", failures-5)
			}
		})
	}
}

// TestUnderSyncNoneConcurrentPublishesPastManyReservationsNeverReuseAnID:
// under SyncNone a power loss may take publishes that returned, never
// hand their IDs to other messages (SyncMode): the sequences are
// reserved ahead by durable marks, a new one queued when half of the last
// is used. Here four goroutines publish (single, batch and keyed, with
// duplicates of keys still in flight) through several reservations, with
// no background commit to help (SyncInterval an hour), and the power
// fails at a random file operation. The store the device kept must hold
// each message it shows under the ID its publish returned, and hand out
// none of the returned IDs again, to a publish or to a key whose
// original it lost.
func TestUnderSyncNoneConcurrentPublishesPastManyReservationsNeverReuseAnID(t *testing.T) {
	cases, perGoroutine := 6, 3000
	if testing.Short() {
		cases, perGoroutine = 2, 1500
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	root := fastDir(t)
	opts := func(clock *fakeClock, fs vfs.FS) broker.Options {
		return broker.Options{Now: clock.Now, Sync: broker.SyncNone, SyncInterval: time.Hour, SegmentBytes: 1 << 20, FS: fs}
	}
	pol := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024}
	// run publishes until the goroutines are done or the power fails, and
	// returns the payload each returned ID was handed out for.
	run := func(dir string, fs vfs.FS, rng *rand.Rand) map[string]string {
		clock := newFakeClock()
		s, err := broker.Open(dir, opts(clock, fs))
		if err != nil {
			return nil
		}
		defer func() { _ = s.Close() }()
		q, err := s.Queue("q", pol)
		if err != nil {
			return nil
		}
		var mu sync.Mutex
		handed := map[string]string{}
		var wg sync.WaitGroup
		for g := range 4 {
			grng := rand.New(rand.NewPCG(rng.Uint64(), uint64(g)))
			wg.Go(func() {
				for i := 0; i < perGoroutine; {
					p := func(n int) string { return fmt.Sprintf("g%d-i%d-n%d", g, i, n) }
					switch r := grng.IntN(10); {
					case r < 6:
						m, err := q.Publish(context.Background(), []byte(p(0)))
						if err != nil {
							return
						}
						mu.Lock()
						handed[m.ID] = p(0)
						mu.Unlock()
						i++
					case r < 8:
						batch := [][]byte{[]byte(p(0)), []byte(p(1)), []byte(p(2))}
						ms, err := q.PublishBatch(context.Background(), batch)
						if err != nil {
							return
						}
						mu.Lock()
						for n, m := range ms {
							handed[m.ID] = string(batch[n])
						}
						mu.Unlock()
						i += len(batch)
					default:
						// Keys shared by the goroutines: a duplicate often
						// answers an original still in flight.
						key := fmt.Sprintf("k%d", i/4)
						m, err := q.PublishKeyed(context.Background(), key, []byte(p(0)))
						if err != nil {
							return
						}
						mu.Lock()
						if m.Payload != nil {
							handed[m.ID] = p(0)
						} else if _, ok := handed[m.ID]; !ok {
							handed[m.ID] = "" // an original whose own call has not returned yet
						}
						mu.Unlock()
						i++
					}
				}
			})
		}
		wg.Wait()
		return handed
	}
	dry := vfs.NewCrashFS(vfs.Default)
	run(filepath.Join(root, "dry"), dry, rand.New(rand.NewPCG(seed, 0)))
	total := dry.Ops()
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range cases {
		dir := filepath.Join(root, fmt.Sprint(i), "store")
		require.NoError(t, os.MkdirAll(dir, 0o700))
		cfs := vfs.NewCrashFS(vfs.Default)
		k := rng.Int64N(total)
		cfs.CrashAfter(k)
		handed := run(dir, cfs, rand.New(rand.NewPCG(seed, uint64(2+i))))
		cfs.Crash()
		clone := filepath.Join(root, fmt.Sprint(i), "clone")
		require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))

		clock := newFakeClock()
		s, err := broker.Open(clone, opts(clock, nil))
		require.NoError(t, err, "power lost after operation %d of %d", k, total)
		q, err := s.Queue("q", pol)
		require.NoError(t, err)
		kept := 0
		for {
			ds, err := q.Receive(context.Background(), 1000)
			require.NoError(t, err)
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				if p, ok := handed[d.Message.ID]; ok {
					kept++
					if p != "" {
						require.Equal(t, p, string(d.Message.Payload), "power lost after operation %d: message %s", k, d.Message.ID)
					}
				}
			}
		}
		for n := range 20 {
			m, err := q.Publish(context.Background(), []byte("after"))
			require.NoError(t, err)
			_, reused := handed[m.ID]
			require.False(t, reused, "power lost after operation %d of %d: publish %d after reopening got ID %s, handed out before", k, total, n, m.ID)
			m, err = q.PublishKeyed(context.Background(), fmt.Sprintf("k%d", n), []byte("after"))
			require.NoError(t, err)
			if p, ok := handed[m.ID]; ok && m.Payload != nil {
				t.Fatalf("power lost after operation %d of %d: key k%d got a new message under ID %s, handed out before (for %q)", k, total, n, m.ID, p)
			}
		}
		t.Logf("power lost after operation %d of %d: %d IDs handed out, %d of their messages kept", k, total, len(handed), kept)
		require.NoError(t, s.Close())
	}
}
