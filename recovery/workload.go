package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// The workload's queues.
const (
	// QueueWork is published to by every kind of publish and consumed by
	// Receive loops that ack, nack, reject, extend and abandon leases.
	QueueWork = "work"
	// QueueFlow is consumed by broker.Consume.
	QueueFlow = "flow"
	// QueuePoison holds poison messages: the consumer that receives one is
	// killed before it can settle it, on every delivery.
	QueuePoison = "poison"
	// QueueLapse has a short lease, few deliveries and a retry delay
	// longer than a child's restart, and a consumer that lets leases lapse
	// and settles late: its nacks' retry delays outlive the kill, its
	// late settles are refused as LeaseExpired, and its leases lapse into
	// LEASE_EXPIRED dead letters.
	QueueLapse = "lapse"
)

// QueueNames lists the workload's queues.
var QueueNames = []string{QueueWork, QueueFlow, QueuePoison, QueueLapse}

// SegmentBytes is the segment size of the workload's store: small, so that
// rotation, checkpoints, copy forward and segment removal happen every few
// hundred messages.
const SegmentBytes = 64 << 10

// Policy returns the policy of a workload queue, and false for any other
// name.
func Policy(queue string) (broker.PolicyValue, bool) {
	switch queue {
	case QueueWork:
		return broker.PolicyValue{VisibilityTimeout: time.Second, RetryDelay: 20 * time.Millisecond,
			MaxRetryDelay: 200 * time.Millisecond, MaxDeliveries: 4, MaxMessageBytes: 2048, DedupWindow: DedupWindow}, true
	case QueueFlow:
		return broker.PolicyValue{VisibilityTimeout: time.Second, RetryDelay: 10 * time.Millisecond,
			MaxDeliveries: 3, MaxMessageBytes: 2048}, true
	case QueuePoison:
		return broker.PolicyValue{VisibilityTimeout: 200 * time.Millisecond, MaxDeliveries: PoisonDeliveries, MaxMessageBytes: 2048}, true
	case QueueLapse:
		return broker.PolicyValue{VisibilityTimeout: LapseLease, RetryDelay: LapseRetryDelay, MaxDeliveries: 2, MaxMessageBytes: 2048}, true
	}
	return broker.PolicyValue{}, false
}

// DedupWindow is the work queue's dedup window: short, so that keys are
// forgotten (and eviction events written and replayed) during a run.
const DedupWindow = 2 * time.Second

// PoisonDeliveries is the poison queue's MaxDeliveries.
const PoisonDeliveries = 3

// LapseLease is the lapse queue's visibility timeout: short, so that a
// consumer that waits it out costs little.
const LapseLease = 150 * time.Millisecond

// LapseRetryDelay is the lapse queue's retry delay (constant): longer than
// a kill, the checks after it and the next child's start take together, so
// that the next child receives while a nack's delay is still pending.
const LapseRetryDelay = 1500 * time.Millisecond

// Intent is what a consumer does with a delivery; it is journaled with the
// delivery, before the consumer acts, so that the checker knows which
// effects a kill may have left half-known.
type Intent string

// The consumers' intents.
const (
	IntentAck        Intent = "ack"
	IntentNack       Intent = "nack"
	IntentReject     Intent = "reject"
	IntentExtendAck  Intent = "extend-ack"
	IntentExtendNack Intent = "extend-nack"
	// IntentHold: the consumer keeps the lease and does nothing; it lapses.
	IntentHold Intent = "hold"
	// IntentCrash: the poison; the process is killed holding the lease.
	IntentCrash Intent = "crash"
)

// Reason returns the reason of the cause a consumer of queue gives for
// intent, which a dead letter records when the settle dead-letters the
// message (a reject, or a nack of the last delivery), or "" for an intent
// that gives no cause (an ack, a hold, ...). It does not know the
// delivery: a nack with deliveries left has its reason too.
func Reason(queue string, intent Intent) string {
	prefix := strings.ToUpper(queue)
	switch intent {
	case IntentNack, IntentExtendNack:
		return prefix + "_RETRY"
	case IntentReject:
		return prefix + "_REJECT"
	}
	return ""
}

// causeFor is the cause a consumer of queue gives for intent.
func causeFor(queue string, intent Intent) error {
	reason := Reason(queue, intent)
	err := broker.NewError(reason, 0x07630001, "the workload said so", "private detail of "+queue)
	if intent == IntentReject {
		return broker.DoNotRetry(err)
	}
	return err
}

// A payload is its reference, a '|' and filler bytes that are a function
// of the reference, so that any payload can be checked on its own and the
// publish it came from found by its reference alone.
//
// A reference is "queue/c<cycle>/<who>/n<attempt>.<index>[of<size>]/<key>":
// the queue, the child's cycle, the publishing goroutine, its attempt
// number, the message's index in its batch and, for a PublishBatch, the
// batch's size (so that a batch missing its last messages can be told from
// a whole one), and the dedup key (empty if none).

// Ref is a parsed payload reference.
type Ref struct {
	Queue string
	Cycle int
	Who   string
	N     int64
	Index int
	Of    int // the size of its PublishBatch; 0 for a single publish
	Key   string
}

// MakeRef renders a reference.
func MakeRef(r Ref) string {
	n := fmt.Sprintf("n%d.%d", r.N, r.Index)
	if r.Of > 0 {
		n += fmt.Sprintf("of%d", r.Of)
	}
	return fmt.Sprintf("%s/c%d/%s/%s/%s", r.Queue, r.Cycle, r.Who, n, r.Key)
}

// ParseRef parses a reference made by MakeRef.
func ParseRef(s string) (Ref, error) {
	parts := strings.Split(s, "/")
	bad := func(why string) (Ref, error) { return Ref{}, fmt.Errorf("recovery: payload reference %q: %s", s, why) }
	if len(parts) != 5 {
		return bad("want 5 parts")
	}
	r := Ref{Queue: parts[0], Who: parts[2], Key: parts[4]}
	c, ok := strings.CutPrefix(parts[1], "c")
	if !ok {
		return bad("no cycle")
	}
	var err error
	if r.Cycle, err = strconv.Atoi(c); err != nil {
		return bad("bad cycle")
	}
	n, ok := strings.CutPrefix(parts[3], "n")
	if !ok {
		return bad("no attempt")
	}
	num, idx, ok := strings.Cut(n, ".")
	if !ok {
		return bad("no batch index")
	}
	if r.N, err = strconv.ParseInt(num, 10, 64); err != nil {
		return bad("bad attempt")
	}
	idx, of, batch := strings.Cut(idx, "of")
	if r.Index, err = strconv.Atoi(idx); err != nil {
		return bad("bad batch index")
	}
	if batch {
		if r.Of, err = strconv.Atoi(of); err != nil || r.Index >= r.Of {
			return bad("bad batch size")
		}
	}
	if MakeRef(r) != s {
		return bad("not canonical")
	}
	return r, nil
}

// Payload returns the payload of reference ref.
func Payload(ref string) []byte {
	h := fnv.New64a()
	h.Write([]byte(ref))
	x := h.Sum64()
	n := 16 + int(x%480)
	out := make([]byte, 0, len(ref)+1+n)
	out = append(append(out, ref...), '|')
	for range n {
		// splitmix64
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		out = append(out, byte(z^(z>>31)))
	}
	return out
}

// CheckPayload returns the reference of payload, or an error if payload is
// not exactly Payload of its reference.
func CheckPayload(payload []byte) (string, error) {
	i := bytes.IndexByte(payload, '|')
	if i < 0 {
		return "", fmt.Errorf("recovery: payload of %d bytes has no reference", len(payload))
	}
	ref := string(payload[:i])
	if _, err := ParseRef(ref); err != nil {
		return "", err
	}
	if !bytes.Equal(Payload(ref), payload) {
		return ref, fmt.Errorf("recovery: payload %q... (%d bytes) is not the one its reference makes", ref, len(payload))
	}
	return ref, nil
}

// Child roles.
const (
	// RoleWorkload runs the mixed workload until the process is killed.
	RoleWorkload = "workload"
)

// ChildEnv is the environment variable that carries a child's
// configuration (JSON) to the re-executed test binary.
const ChildEnv = "WALBROKER_CRASH_CHILD"

// ChildConfig is what a parent tells a child.
type ChildConfig struct {
	Role    string
	Dir     string // the store
	Journal string // the journal file to create
	Cycle   int
	Seed    uint64
	Sync    broker.SyncMode
	// Hook, if set, is where the child pauses (see Hooks); HookSkip
	// occurrences are let through first.
	Hook      string
	HookSkip  int
	Poison    bool // publish a poison message first
	ParentPID int  // the child exits when its parent is gone
	// Publishers and Consumers count the goroutines of each kind.
	Publishers int
	Consumers  int
	// PowerLoss, if set, makes the power fail in the child, under a
	// vfs.CrashFS: at its hook, or, if it has none, at the first write to
	// a segment file PowerLossAfter after its workload started. The child
	// then writes the store as the device holds it into the directory
	// PowerLoss names (which must not exist), reports LinePowerLost, and
	// waits for its kill. The calls that fail after the power loss are not
	// journaled: they were in flight. Under SyncPublish the results a
	// power loss may take are journaled only once certain, but for a
	// delivery's maybe and a settle's returned entry (see result).
	PowerLoss      string
	PowerLossAfter time.Duration
}

// Env returns the environment entry that passes c to a child.
func (c ChildConfig) Env() string {
	b, _ := json.Marshal(c) // plain fields: cannot fail
	return ChildEnv + "=" + string(b)
}

// ChildConfigFromEnv returns the configuration a parent passed, and false
// if this process is not a child.
func ChildConfigFromEnv() (ChildConfig, bool, error) {
	v := os.Getenv(ChildEnv)
	if v == "" {
		return ChildConfig{}, false, nil
	}
	var c ChildConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		return c, true, fmt.Errorf("recovery: %s: %w", ChildEnv, err)
	}
	return c, true, nil
}

// Lines a child writes on its standard output for its parent.
const (
	LineRunning = "RUNNING"  // the store is open and the workload started
	LinePaused  = "PAUSED "  // + hook name: a goroutine is blocked at the hook
	LinePoison  = "POISON "  // + ID and delivery count: a poison was received
	LineFatal   = "FATAL "   // + error: the child could not go on
	LineHolding = "HOLDING " // + message ID: a lock test child holds the store
	// LinePowerLost + the state it was left in (see losePower): the
	// power failed and the store as the device holds it is in
	// ChildConfig.PowerLoss.
	LinePowerLost = "POWERLOST "
)

// lineWriter writes whole lines to the parent, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
}

// WatchParent exits the process when its parent is gone, so that a child
// never outlives the test that started it.
func WatchParent(pid int) {
	if pid <= 0 {
		return
	}
	go func() {
		for {
			if os.Getppid() != pid {
				os.Exit(3)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

// child is one run of the workload in a child process.
type child struct {
	cfg    ChildConfig
	out    *lineWriter
	j      *Journal
	queues map[string]*broker.Queue
	hook   *hookState

	// Under ChildConfig.PowerLoss: the file system the store runs on,
	// and whether its power has failed (set before it fails).
	cfs       *vfs.CrashFS
	powerLost atomic.Bool
	lossOnce  sync.Once

	// uncertain: a power loss may take results that returned (SyncPublish:
	// only a publish waits for an fdatasync). Results other than publishes
	// are then held in pending until a publish that started after their
	// call returned has returned (its fdatasync covered them), and a
	// delivery is journaled at once only as OpMaybe, a settle only as
	// OpReturned. pendMu guards pending.
	uncertain bool
	pendMu    sync.Mutex
	pending   []Entry
}

// RunChild runs the workload described by cfg against the store in
// cfg.Dir until the process is killed, writing its lines to stdout. It
// returns only when it cannot go on; it has then written a FATAL line.
func RunChild(cfg ChildConfig, stdout io.Writer) error {
	c := &child{cfg: cfg, out: &lineWriter{w: stdout}, queues: map[string]*broker.Queue{}}
	err := c.run() // never nil: the child runs until it is killed or fails
	c.out.printf("%s%v", LineFatal, strings.ReplaceAll(err.Error(), "\n", " "))
	return err
}

func (c *child) run() error {
	WatchParent(c.cfg.ParentPID)
	j, err := CreateJournal(c.cfg.Journal)
	if err != nil {
		return err
	}
	c.j = j
	opts := broker.Options{
		Sync:         c.cfg.Sync,
		SegmentBytes: SegmentBytes,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	var inner vfs.FS = vfs.Default
	var armed atomic.Bool // a timed power loss is due
	c.uncertain = c.cfg.PowerLoss != "" && c.cfg.Sync != broker.SyncAll
	if c.cfg.PowerLoss != "" {
		c.cfs = vfs.NewCrashFS(vfs.Default)
		inner, opts.FS = c.cfs, c.cfs
		if c.cfg.Hook == "" {
			// The power fails at the first write to a segment file once it
			// is due: mostly a commit written and not yet fdatasynced, the
			// moment a power loss has the most to take (else the zero-fill
			// of the next segment). The writer goes on, and its fdatasync
			// fails.
			fs := vfs.NewFaultFS(inner)
			fs.Observe(func(e vfs.Event) {
				if e.Op == vfs.OpWrite && strings.Contains(filepath.Base(e.Name), ".seg") && armed.Load() {
					c.losePower()
				}
			})
			opts.FS = fs
		}
	}
	if c.cfg.Hook != "" {
		pause := func() { c.out.printf("%s%s", LinePaused, c.cfg.Hook) }
		if c.cfs != nil {
			pause = c.losePower
		}
		h, err := newHookState(c.cfg.Hook, c.cfg.HookSkip, c.cfg.Dir, pause)
		if err != nil {
			return err
		}
		c.hook = h
		// The observer runs after the operation returned from the
		// CrashFS, outside its lock, so the hook can fail the power.
		fs := vfs.NewFaultFS(inner)
		fs.Observe(h.observe)
		opts.FS = fs
		h.opening.Store(true)
	}
	s, err := broker.Open(c.cfg.Dir, opts)
	if c.hook != nil {
		c.hook.opening.Store(false)
	}
	if err != nil {
		return fmt.Errorf("open after the previous kill: %w", err)
	}
	for _, name := range QueueNames {
		p, _ := Policy(name)
		q, err := s.Queue(name, p)
		if err != nil {
			return fmt.Errorf("declare %s: %w", name, err)
		}
		c.queues[name] = q
	}
	if err := c.j.Append(Entry{Op: OpStart, Cycle: c.cfg.Cycle, Sync: c.cfg.Sync.String(), Hook: c.cfg.Hook, PID: os.Getpid()}); err != nil {
		return err
	}
	if c.hook != nil && c.hook.name == HookAfterCopyForward {
		go c.hook.pollCopyForward(s)
	}
	ctx := context.Background()
	if c.cfg.Poison {
		if err := c.publishPoison(ctx); err != nil {
			return err
		}
	}
	for i := range c.cfg.Publishers {
		go c.publisher(ctx, fmt.Sprintf("pub%d", i), c.cfg.Seed+uint64(i)*7919)
	}
	for i := range c.cfg.Consumers {
		go c.consumer(ctx, fmt.Sprintf("con%d", i), c.cfg.Seed+uint64(i)*104729)
	}
	go c.janitor(ctx, c.cfg.Seed^0x5bd1e995)
	if !c.uncertain {
		// A poison delivery counts as a kill only if it is certain.
		go c.poisonConsumer(ctx)
	}
	go c.flow(ctx, c.cfg.Seed^0x27d4eb2f)
	go c.lapseConsumer(ctx, c.cfg.Seed^0x165667b1)
	c.out.printf("%s", LineRunning)
	if c.cfs != nil && c.cfg.Hook == "" {
		time.Sleep(c.cfg.PowerLossAfter)
		armed.Store(true)
	}
	for {
		time.Sleep(time.Hour) // until the parent's SIGKILL
	}
}

// journal appends entries; a journal that fails ends the child.
func (c *child) journal(entries ...Entry) {
	if err := c.j.Append(entries...); err != nil {
		c.out.printf("%s%v", LineFatal, err)
		os.Exit(1)
	}
}

func now() int64 { return time.Now().UnixNano() }

// published journals the result of a publish that made new messages,
// which its fdatasync made certain; when results are uncertain, it also
// journals those held whose call returned before this publish started at
// t0, since its fdatasync covered what they wrote.
func (c *child) published(t0 int64, e Entry) {
	c.journal(e)
	if !c.uncertain {
		return
	}
	c.pendMu.Lock()
	var certain []Entry
	kept := c.pending[:0]
	for _, p := range c.pending {
		if p.T1 < t0 {
			certain = append(certain, p)
		} else {
			kept = append(kept, p)
		}
	}
	c.pending = kept
	if len(certain) > 0 {
		c.journal(certain...) // under pendMu: in the order they were held
	}
	c.pendMu.Unlock()
}

// result journals the result of a call other than a publish, or, when
// results are uncertain, holds it until a publish makes it certain. One
// not yet certain at a power loss or a kill is never journaled: the call
// counts as in flight across it. An Ack, Nack, Reject or Extend that
// returned nil is then also journaled at once as OpReturned, since its
// effect holds in its own process (see OpReturned).
func (c *child) result(entries ...Entry) {
	if !c.uncertain {
		c.journal(entries...)
		return
	}
	var returned []Entry
	for _, e := range entries {
		switch e.Op {
		case OpAcked, OpNacked, OpRejected, OpExtended:
			e.Op, e.Settle = OpReturned, e.Op
			returned = append(returned, e)
		}
	}
	if len(returned) > 0 {
		// Before the result is held: the certain entry, if it comes,
		// follows this one in the journal.
		c.journal(returned...)
	}
	c.pendMu.Lock()
	c.pending = append(c.pending, entries...)
	c.pendMu.Unlock()
}

// delivered journals deliveries. When results are uncertain, each is
// journaled at once as OpMaybe (its intent may be carried out, its lease
// may be lost) and held as a result.
func (c *child) delivered(entries ...Entry) {
	if c.uncertain {
		maybe := slices.Clone(entries)
		for i := range maybe {
			maybe[i].Op = OpMaybe
		}
		c.journal(maybe...)
	}
	c.result(entries...)
}

// powerLossSettle is how long a child waits after its power failed before
// it reports it: the calls that returned before the failure journal their
// results meanwhile (so that one released too early is caught), and
// nothing the device holds can change.
const powerLossSettle = 20 * time.Millisecond

// powerLossStates are the states that keep a share of the unsynced data
// only, in the order a seed draws them: half the unsynced writes kept
// with the last one torn, half of their 512-byte sectors kept, or none.
var powerLossStates = []vfs.CrashState{
	{Name: "half the unsynced blocks, last write torn", KeepUnsyncedFraction: 0.5, TearLastWrite: true},
	{Name: "half the unsynced 512-byte sectors", KeepUnsyncedFraction: 0.5, BlockSize: 512},
	{Name: "synced only"},
}

// metadataPowerLossStates are the states in which unsynced names and
// sizes survive apart from the data (see vfs.MetadataCrashStates).
var metadataPowerLossStates = vfs.MetadataCrashStates()

// isMetadataPowerLossState reports whether the state a child reported
// with LinePowerLost keeps unsynced names and sizes apart from the data.
func isMetadataPowerLossState(name string) bool {
	for _, s := range metadataPowerLossStates {
		if s.Name == name {
			return true
		}
	}
	return false
}

// losePower fails the power of the store's file system: every later change
// is refused. Then, on a goroutine of its own, it writes the store as the
// device holds it to ChildConfig.PowerLoss for the parent and reports it,
// naming the state: by the seed, one of the powerLossStates, drawn as
// before the metadataPowerLossStates were added, or in half the cycles one
// of those, drawn from a stream of its own (so that a seed that draws none
// of them gives the clone it gave). Runs once.
func (c *child) losePower() {
	c.lossOnce.Do(func() {
		c.powerLost.Store(true)
		c.cfs.Crash()
		go func() {
			time.Sleep(powerLossSettle)
			rng := rand.New(rand.NewPCG(c.cfg.Seed, 0x706f776572))
			state := powerLossStates[rng.IntN(len(powerLossStates))]
			if meta := rand.New(rand.NewPCG(c.cfg.Seed, 0x6d657461)); meta.IntN(2) == 0 {
				state = metadataPowerLossStates[meta.IntN(len(metadataPowerLossStates))]
			}
			if err := c.cfs.CrashClone(c.cfg.PowerLoss, state.Options(c.cfg.Dir, rng)); err != nil {
				c.out.printf("%sclone the store after the power loss (%s): %v", LineFatal, state.Name, err)
				return
			}
			c.out.printf("%s%s", LinePowerLost, state.Name)
		}()
	})
}

// failed journals a call that the workload never expects to fail; the
// goroutine that made it stops (a store that failed refuses everything).
// After a power loss every call may fail: it is left unjournaled, in
// flight, as at a kill.
func (c *child) failed(who, queue, call string, n int64, err error) {
	if c.powerLost.Load() {
		return
	}
	c.journal(Entry{Op: OpFailed, Who: who, Queue: queue, N: n, Err: call + ": " + err.Error()})
}

// backlog reports the messages of q waiting to be received (ready or
// delayed; not those leased), to keep the store small.
func backlog(q *broker.Queue) int {
	st := q.Stats()
	return st.Ready + st.Delayed
}

// maxBacklog bounds the messages a publisher leaves waiting in a queue.
const maxBacklog = 250

// keysPerPublisher bounds the dedup keys each publisher uses, so that keys
// come back while remembered, and after they are forgotten.
const keysPerPublisher = 12

func (c *child) publisher(ctx context.Context, who string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, hashString(who)))
	work, flow, lapse := c.queues[QueueWork], c.queues[QueueFlow], c.queues[QueueLapse]
	var n int64
	for {
		if backlog(work) > maxBacklog || backlog(flow) > maxBacklog {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		n++
		q := work
		switch r := rng.IntN(20); {
		case r < 5:
			q = flow
		case r < 7 && backlog(lapse) < lapseBacklog:
			q = lapse
		}
		ref := Ref{Queue: q.Name(), Cycle: c.cfg.Cycle, Who: who, N: n}
		switch op := rng.IntN(10); {
		case op < 5:
			r := MakeRef(ref)
			t0 := now()
			m, err := q.Publish(ctx, Payload(r))
			t1 := now()
			if err != nil {
				c.failed(who, q.Name(), "Publish", n, err)
				return
			}
			c.published(t0, Entry{Op: OpPublished, Who: who, Queue: q.Name(), N: n, IDs: []string{m.ID}, Refs: []string{r},
				Enq: m.EnqueuedAt.UnixNano(), T0: t0, T1: t1})
		case op < 7:
			ref.Queue = QueueWork
			ref.Key = fmt.Sprintf("%s-k%02d", who, rng.IntN(keysPerPublisher))
			r := MakeRef(ref)
			t0 := now()
			m, err := work.PublishKeyed(ctx, ref.Key, Payload(r))
			t1 := now()
			if err != nil {
				c.failed(who, QueueWork, "PublishKeyed", n, err)
				return
			}
			e := Entry{Who: who, Queue: QueueWork, N: n, Key: ref.Key, Enq: m.EnqueuedAt.UnixNano(), T0: t0, T1: t1}
			if m.Payload == nil {
				// A duplicate: the original's ID and EnqueuedAt, no payload.
				// It waited for no fdatasync (the original did), so it
				// makes nothing certain.
				e.Op, e.ID = OpDuplicate, m.ID
				c.journal(e)
			} else {
				e.Op, e.IDs, e.Refs = OpPublished, []string{m.ID}, []string{r}
				c.published(t0, e)
			}
		default:
			size := 2 + rng.IntN(5)
			refs := make([]string, size)
			payloads := make([][]byte, size)
			ref.Of = size
			for i := range refs {
				ref.Index = i
				refs[i] = MakeRef(ref)
				payloads[i] = Payload(refs[i])
			}
			t0 := now()
			ms, err := q.PublishBatch(ctx, payloads)
			t1 := now()
			if err != nil {
				c.failed(who, q.Name(), "PublishBatch", n, err)
				return
			}
			ids := make([]string, len(ms))
			for i, m := range ms {
				ids[i] = m.ID
			}
			c.published(t0, Entry{Op: OpPublished, Who: who, Queue: q.Name(), N: n, IDs: ids, Refs: refs,
				Enq: ms[0].EnqueuedAt.UnixNano(), T0: t0, T1: t1})
		}
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond)
	}
}

// pickIntent draws a work consumer's intent.
func pickIntent(rng *rand.Rand) Intent {
	switch r := rng.IntN(100); {
	case r < 62:
		return IntentAck
	case r < 74:
		return IntentNack
	case r < 78:
		return IntentReject
	case r < 86:
		return IntentExtendAck
	case r < 90:
		return IntentExtendNack
	}
	return IntentHold
}

func (c *child) consumer(ctx context.Context, who string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, hashString(who)))
	q := c.queues[QueueWork]
	for {
		t0 := now()
		ds, err := q.Receive(ctx, 1+rng.IntN(6))
		t1 := now()
		if err != nil {
			c.failed(who, QueueWork, "Receive", 0, err)
			return
		}
		if len(ds) == 0 {
			time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Microsecond)
			continue
		}
		entries := make([]Entry, len(ds))
		intents := make([]Intent, len(ds))
		for i, d := range ds {
			intents[i] = pickIntent(rng)
			entries[i] = deliveredEntry(who, QueueWork, d, intents[i], t0, t1)
			if intents[i] == IntentExtendAck || intents[i] == IntentExtendNack {
				// Extend measures from now: a short one shortens the lease.
				entries[i].By = int64(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
			}
		}
		c.delivered(entries...)
		for i, d := range ds {
			if c.settle(ctx, who, q, d, intents[i], time.Duration(entries[i].By)) {
				return
			}
		}
	}
}

// deliveredEntry journals a delivery; a payload that is not what its
// reference makes is journaled with the error.
func deliveredEntry(who, queue string, d broker.DeliveryValue, intent Intent, t0, t1 int64) Entry {
	e := Entry{Op: OpDelivered, Who: who, Queue: queue, ID: d.Message.ID, Enq: d.Message.EnqueuedAt.UnixNano(),
		Del: d.Deliveries, Exp: d.Lease.ExpiresAt.UnixNano(), Intent: intent, T0: t0, T1: t1}
	ref, err := CheckPayload(d.Message.Payload)
	e.Ref = ref
	if err != nil {
		e.Err = err.Error()
	}
	return e
}

// settle does what intent says with delivery d and journals each result.
// It reports whether the consumer should stop.
func (c *child) settle(ctx context.Context, who string, q *broker.Queue, d broker.DeliveryValue, intent Intent, by time.Duration) bool {
	id, del, receipt, exp := d.Message.ID, d.Deliveries, d.Lease.Receipt, d.Lease.ExpiresAt.UnixNano()
	refused := func(call string, t0 int64, err error) bool {
		return c.refused(who, q.Name(), id, del, exp, call, t0, err)
	}
	switch intent {
	case IntentHold:
		return false
	case IntentExtendAck, IntentExtendNack:
		t0 := now()
		l, err := q.Extend(ctx, receipt, by)
		if err != nil {
			return refused("Extend", t0, err)
		}
		receipt, exp = l.Receipt, l.ExpiresAt.UnixNano()
		c.result(Entry{Op: OpExtended, Who: who, Queue: q.Name(), ID: id, Del: del, Exp: exp, By: int64(by), T0: t0, T1: now()})
	}
	t0 := now()
	switch intent {
	case IntentAck, IntentExtendAck:
		if err := q.Ack(ctx, receipt); err != nil {
			return refused("Ack", t0, err)
		}
		c.result(Entry{Op: OpAcked, Who: who, Queue: q.Name(), ID: id, Del: del, T0: t0, T1: now()})
	case IntentNack, IntentExtendNack:
		nv, err := q.Nack(ctx, receipt, causeFor(q.Name(), intent))
		if err != nil {
			return refused("Nack", t0, err)
		}
		c.result(Entry{Op: OpNacked, Who: who, Queue: q.Name(), ID: id, Del: nv.Deliveries, Exp: nv.VisibleAt.UnixNano(),
			Dead: nv.DeadLettered, T0: t0, T1: now()})
	case IntentReject:
		if err := q.Reject(ctx, receipt, causeFor(q.Name(), intent)); err != nil {
			return refused("Reject", t0, err)
		}
		c.result(Entry{Op: OpRejected, Who: who, Queue: q.Name(), ID: id, Del: del, T0: t0, T1: now()})
	}
	return false
}

// refused journals a settling call (call, started at t0) refused with err
// for delivery del of message id, whose lease expires at exp as the
// consumer knows it. It reports whether the consumer should stop: a lapsed
// lease is the workload's own slowness; anything else means the store
// stopped. After a power loss a call that failed for any other reason is
// left unjournaled, in flight (see failed).
func (c *child) refused(who, queue, id string, del int, exp int64, call string, t0 int64, err error) bool {
	expired := errors.Is(err, broker.LeaseExpired)
	if c.powerLost.Load() && !expired {
		return true
	}
	c.result(Entry{Op: OpSettleFailed, Who: who, Queue: queue, ID: id, Del: del, Exp: exp, T0: t0, T1: now(),
		Err: call + ": " + err.Error(), Expired: expired})
	return !expired
}

// pickLapseIntent draws the lapse consumer's intent for a delivery, and
// whether it carries it out only once the lease has lapsed (it is then
// refused as LeaseExpired).
func pickLapseIntent(rng *rand.Rand) (Intent, bool) {
	switch r := rng.IntN(100); {
	case r < 25:
		return IntentAck, false
	case r < 50:
		return IntentNack, false
	case r < 55:
		return IntentReject, false
	case r < 75:
		return IntentHold, false
	case r < 85:
		return IntentAck, true
	case r < 95:
		return IntentNack, true
	}
	return IntentReject, true
}

// lapseBacklog bounds the messages publishers leave waiting in the lapse
// queue, whose consumer is slow on purpose.
const lapseBacklog = 48

// lapseConsumer consumes the lapse queue: it acks, nacks (each nack of a
// first delivery waits out LapseRetryDelay, beyond the next kill) and
// rejects at once, lets leases lapse (two lapses make a LEASE_EXPIRED dead
// letter), and carries out some acks, nacks and rejects only after the
// lease lapsed, so that the store refuses them.
func (c *child) lapseConsumer(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, hashString("lapse")))
	q := c.queues[QueueLapse]
	for {
		t0 := now()
		ds, err := q.Receive(ctx, 1+rng.IntN(4))
		t1 := now()
		if err != nil {
			c.failed("lapse", QueueLapse, "Receive", 0, err)
			return
		}
		if len(ds) == 0 {
			time.Sleep(time.Duration(1000+rng.IntN(3000)) * time.Microsecond)
			continue
		}
		entries := make([]Entry, len(ds))
		intents := make([]Intent, len(ds))
		late := make([]bool, len(ds))
		for i, d := range ds {
			intents[i], late[i] = pickLapseIntent(rng)
			entries[i] = deliveredEntry("lapse", QueueLapse, d, intents[i], t0, t1)
		}
		c.delivered(entries...)
		for i, d := range ds {
			if !late[i] {
				if c.settle(ctx, "lapse", q, d, intents[i], 0) {
					return
				}
				continue
			}
			go func() {
				// The broker's clock is the wall clock: once it reads
				// ExpiresAt, the lease has lapsed. (A failure that stops
				// the store stops the loop at its next call.)
				time.Sleep(time.Until(d.Lease.ExpiresAt) + time.Millisecond)
				c.settle(ctx, "lapse", q, d, intents[i], 0)
			}()
		}
	}
}

// janitor replays and deletes dead letters now and then, journaling its
// intent before each call and the result after it.
func (c *child) janitor(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for {
		time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
		for _, name := range []string{QueueWork, QueueFlow, QueueLapse} {
			q := c.queues[name]
			t0 := now()
			dls, err := q.DeadLetters(ctx, 16)
			t1 := now()
			if err != nil {
				c.failed("janitor", name, "DeadLetters", 0, err)
				return
			}
			for _, dl := range dls {
				var intent, done Op
				switch rng.IntN(4) {
				case 0:
					intent, done = OpReplaying, OpReplayed
				case 1:
					intent, done = OpDeleting, OpDeleted
				default:
					continue
				}
				e := Entry{Op: intent, Who: "janitor", Queue: name, ID: dl.Message.ID, Enq: dl.Message.EnqueuedAt.UnixNano(),
					Del: dl.Deliveries, Reason: dl.Reason, Code: dl.Code, Cause: dl.Cause, Failed: dl.FailedAt.UnixNano(), T0: t0, T1: t1}
				ref, perr := CheckPayload(dl.Message.Payload)
				e.Ref = ref
				if perr != nil {
					e.Err = perr.Error()
				}
				c.journal(e)
				start := now()
				if intent == OpReplaying {
					err = q.ReplayDeadLetter(ctx, dl.Message.ID)
				} else {
					err = q.DeleteDeadLetter(ctx, dl.Message.ID)
				}
				if err != nil {
					c.failed("janitor", name, string(intent), 0, err)
					return
				}
				c.result(Entry{Op: done, Who: "janitor", Queue: name, ID: dl.Message.ID, T0: start, T1: now()})
			}
		}
	}
}

// publishPoison publishes one poison message.
func (c *child) publishPoison(ctx context.Context) error {
	r := MakeRef(Ref{Queue: QueuePoison, Cycle: c.cfg.Cycle, Who: "poison", N: 1})
	t0 := now()
	m, err := c.queues[QueuePoison].Publish(ctx, Payload(r))
	t1 := now()
	if err != nil {
		return fmt.Errorf("publish the poison: %w", err)
	}
	c.journal(Entry{Op: OpPublished, Who: "poison", Queue: QueuePoison, N: 1, IDs: []string{m.ID}, Refs: []string{r},
		Enq: m.EnqueuedAt.UnixNano(), T0: t0, T1: t1})
	return nil
}

// poisonConsumer receives poison messages; the first one it gets "crashes"
// it: it journals the delivery, tells the parent, and blocks until the
// parent kills the process.
func (c *child) poisonConsumer(ctx context.Context) {
	q := c.queues[QueuePoison]
	for {
		t0 := now()
		ds, err := q.Receive(ctx, 1)
		t1 := now()
		if err != nil {
			c.failed("poison", QueuePoison, "Receive", 0, err)
			return
		}
		if len(ds) == 1 {
			d := ds[0]
			c.journal(deliveredEntry("poison", QueuePoison, d, IntentCrash, t0, t1))
			c.out.printf("%s%s %d", LinePoison, d.Message.ID, d.Deliveries)
			select {} // the handler "crashed": the parent kills the process
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// flow consumes the flow queue with broker.Consume, through a flowQueue
// that journals what Consume does: each delivery with the handler's
// intent as Receive returns it, and each Ack, Nack, Reject and lease
// extension Consume makes, as the work consumers journal theirs.
//
// One child in three instead hands Consume the queue itself (see
// flowCarried), so that the acks Consume carries on its next Receive,
// which it makes only on the broker's own queue, meet the kills too.
func (c *child) flow(ctx context.Context, seed uint64) {
	if seed%3 == 0 {
		c.flowCarried(ctx, seed)
		return
	}
	fq := &flowQueue{Queue: c.queues[QueueFlow], c: c, rng: rand.New(rand.NewPCG(seed, 2)),
		leases: map[broker.ReceiptValue]flowLease{}, plans: map[broker.ReceiptValue]flowPlan{}}
	handler := func(_ context.Context, d broker.DeliveryValue) error {
		p, ok := fq.plan(d.Lease.Receipt)
		if !ok {
			return errors.New("recovery: flow: a delivery its Receive did not note")
		}
		time.Sleep(p.pause)
		if p.intent == IntentAck {
			return nil
		}
		return causeFor(QueueFlow, p.intent)
	}
	err := broker.Consume(ctx, fq, handler, broker.ConsumeOptions{
		Batch: 8, Concurrency: 6, ExtendEvery: 100 * time.Millisecond, ExtendBy: time.Second,
	})
	c.failed("flow", QueueFlow, "Consume", 0, err)
}

// flowCarried consumes the flow queue with broker.Consume on the queue
// itself, which carries the acks of finished handlers on its next Receive.
// Its acks, nacks and rejects are Consume's, and return nothing to anyone:
// their outcome is not known, only the intent each delivery is journaled
// with.
func (c *child) flowCarried(ctx context.Context, seed uint64) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 2))
	handler := func(_ context.Context, d broker.DeliveryValue) error {
		t1 := now() // Receive returned before the handler ran
		mu.Lock()
		p := pickFlowPlan(rng)
		mu.Unlock()
		intent, pause := p.intent, p.pause
		c.delivered(deliveredEntry("flow", QueueFlow, d, intent, 0, t1))
		time.Sleep(pause)
		if intent == IntentAck {
			return nil
		}
		return causeFor(QueueFlow, intent)
	}
	err := broker.Consume(ctx, c.queues[QueueFlow], handler, broker.ConsumeOptions{
		Batch: 8, Concurrency: 6, ExtendEvery: 100 * time.Millisecond, ExtendBy: time.Second,
	})
	c.failed("flow", QueueFlow, "Consume", 0, err)
}

// pickFlowPlan draws what a flow handler does with a delivery: ack (86%),
// nack with a retry cause (10%) or reject (4%), after a pause of up to 2
// ms, or of 250 ms (6%), long enough for Consume to extend the lease.
func pickFlowPlan(rng *rand.Rand) flowPlan {
	r, pause := rng.IntN(100), time.Duration(rng.IntN(2000))*time.Microsecond
	if rng.IntN(100) < 6 {
		pause = 250 * time.Millisecond
	}
	intent := IntentAck
	switch {
	case r < 10:
		intent = IntentNack
	case r < 14:
		intent = IntentReject
	}
	return flowPlan{intent: intent, pause: pause}
}

// flowQueue is the flow queue as broker.Consume sees it: the queue, whose
// Receive picks and journals each delivery's intent before Consume hands
// it to a handler, and whose Ack, Nack, Reject and Extend journal their
// results (held, as every result, while a power loss may take them). It
// embeds the queue for the rest (Wake, Name, and what Consume learns of
// the store's end). Being of no type of the broker package, it has
// Consume make each Ack through its Ack, never carried on a Receive.
//
// A flowQueue is safe for concurrent use.
type flowQueue struct {
	*broker.Queue
	c *child

	// mu guards rng, leases and plans.
	mu  sync.Mutex
	rng *rand.Rand
	// leases holds, by receipt, each lease Consume holds and the delivery
	// it came with.
	leases map[broker.ReceiptValue]flowLease
	// plans holds, by the receipt Receive returned, what the handler of
	// each delivery not yet started will do.
	plans map[broker.ReceiptValue]flowPlan
}

// flowLease is a lease of the flow queue that Consume holds.
type flowLease struct {
	id  string
	del int
	exp int64 // the lease's ExpiresAt, as Receive or the last Extend returned it
}

// flowPlan is what the handler of a flow delivery does.
type flowPlan struct {
	intent Intent
	pause  time.Duration // how long it works
}

// Receive receives, then picks each delivery's intent and journals the
// deliveries before Consume sees them.
func (f *flowQueue) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	t0 := now()
	ds, err := f.Queue.Receive(ctx, max)
	t1 := now()
	if err != nil || len(ds) == 0 {
		return ds, err
	}
	entries := make([]Entry, len(ds))
	f.mu.Lock()
	for i, d := range ds {
		p := pickFlowPlan(f.rng)
		entries[i] = deliveredEntry("flow", QueueFlow, d, p.intent, t0, t1)
		f.leases[d.Lease.Receipt] = flowLease{id: d.Message.ID, del: d.Deliveries, exp: d.Lease.ExpiresAt.UnixNano()}
		f.plans[d.Lease.Receipt] = p
	}
	f.mu.Unlock()
	f.c.delivered(entries...)
	return ds, nil
}

// plan returns, once, what the handler of the delivery Receive returned
// with receipt does, and false if Receive noted no such delivery.
func (f *flowQueue) plan(receipt broker.ReceiptValue) (flowPlan, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.plans[receipt]
	delete(f.plans, receipt)
	return p, ok
}

// take returns the lease of receipt and forgets it: the call about to be
// made ends it, or replaces its receipt.
func (f *flowQueue) take(receipt broker.ReceiptValue) (flowLease, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.leases[receipt]
	delete(f.leases, receipt)
	return l, ok
}

// Ack acks and journals the result.
func (f *flowQueue) Ack(ctx context.Context, receipt broker.ReceiptValue) error {
	l, ok := f.take(receipt)
	t0 := now()
	err := f.Queue.Ack(ctx, receipt)
	switch {
	case !ok: // no lease of Consume's: nothing to journal it by
	case err != nil:
		f.c.refused("flow", QueueFlow, l.id, l.del, l.exp, "Ack", t0, err)
	default:
		f.c.result(Entry{Op: OpAcked, Who: "flow", Queue: QueueFlow, ID: l.id, Del: l.del, T0: t0, T1: now()})
	}
	return err
}

// Nack nacks and journals the result.
func (f *flowQueue) Nack(ctx context.Context, receipt broker.ReceiptValue, cause error) (broker.NackValue, error) {
	l, ok := f.take(receipt)
	t0 := now()
	nv, err := f.Queue.Nack(ctx, receipt, cause)
	switch {
	case !ok:
	case err != nil:
		f.c.refused("flow", QueueFlow, l.id, l.del, l.exp, "Nack", t0, err)
	default:
		f.c.result(Entry{Op: OpNacked, Who: "flow", Queue: QueueFlow, ID: l.id, Del: nv.Deliveries, Exp: nv.VisibleAt.UnixNano(),
			Dead: nv.DeadLettered, T0: t0, T1: now()})
	}
	return nv, err
}

// Reject rejects and journals the result.
func (f *flowQueue) Reject(ctx context.Context, receipt broker.ReceiptValue, cause error) error {
	l, ok := f.take(receipt)
	t0 := now()
	err := f.Queue.Reject(ctx, receipt, cause)
	switch {
	case !ok:
	case err != nil:
		f.c.refused("flow", QueueFlow, l.id, l.del, l.exp, "Reject", t0, err)
	default:
		f.c.result(Entry{Op: OpRejected, Who: "flow", Queue: QueueFlow, ID: l.id, Del: l.del, T0: t0, T1: now()})
	}
	return err
}

// Extend extends and journals the result; the new receipt names the lease
// from then on.
func (f *flowQueue) Extend(ctx context.Context, receipt broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	l, ok := f.take(receipt)
	t0 := now()
	lv, err := f.Queue.Extend(ctx, receipt, by)
	switch {
	case !ok:
	case err != nil:
		f.c.refused("flow", QueueFlow, l.id, l.del, l.exp, "Extend", t0, err)
		if !errors.Is(err, broker.LeaseExpired) {
			// Consume tries again with the same receipt.
			f.mu.Lock()
			f.leases[receipt] = l
			f.mu.Unlock()
		}
	default:
		l.exp = lv.ExpiresAt.UnixNano()
		f.c.result(Entry{Op: OpExtended, Who: "flow", Queue: QueueFlow, ID: l.id, Del: l.del, Exp: l.exp, By: int64(by), T0: t0, T1: now()})
		f.mu.Lock()
		f.leases[lv.Receipt] = l
		f.mu.Unlock()
	}
	return lv, err
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
