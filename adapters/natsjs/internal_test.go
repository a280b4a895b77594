package natsjs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/broker"
)

// Seed is seed, for the package's external tests.
var Seed = seed

// seed returns the seed of a randomised test: WALBROKER_NATS_SEED when
// set, else a fresh one; it is logged so that a failure can be replayed.
func seed(t *testing.T) uint64 {
	t.Helper()
	s := rand.Uint64()
	if v := os.Getenv("WALBROKER_NATS_SEED"); v != "" {
		var err error
		if s, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("WALBROKER_NATS_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (replay with WALBROKER_NATS_SEED=%d)", s, s)
	return s
}

// TestNamesAreOneToOne maps many random queue names and requires distinct
// names to give distinct streams and subjects, each made only of what
// stream names and subject tokens allow.
func TestNamesAreOneToOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 1))
	const alphabet = "ab_.-Z9"
	streams := map[string]string{}
	fixed := []string{"a.b", "a_b", "a__b", "a_db", "a_d.b", "a._b", "_", "__", "_d", "-", "a..b", "a_.b"}
	for i := 0; i < 20000; i++ {
		var name string
		if i < len(fixed) {
			name = fixed[i]
		} else {
			b := make([]byte, 1+rng.IntN(6))
			for j := range b {
				b[j] = alphabet[rng.IntN(len(alphabet))]
			}
			if b[0] == '.' {
				b[0] = 'a'
			}
			name = string(b)
		}
		if err := checkName(name); err != nil {
			t.Fatalf("checkName(%q): %v", name, err)
		}
		n := newNames("P", name)
		if prev, ok := streams[n.work]; ok && prev != name {
			t.Fatalf("queues %q and %q share the stream %s", prev, name, n.work)
		}
		streams[n.work] = name
		for _, s := range []string{n.work, n.dead, n.keys, n.deaths} {
			for _, c := range []byte(s) {
				if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
					t.Fatalf("queue %q: stream name %q holds %q", name, s, c)
				}
			}
		}
		for _, s := range []string{n.workSubject, n.wakeSubject, n.deadSubject, n.keySubject, n.deathNotice} {
			if got := len(splitTokens(s)); got != 3 {
				t.Fatalf("queue %q: subject %q has %d tokens, want 3", name, s, got)
			}
		}
	}
}

func splitTokens(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// TestCheckNameRefuses requires the file-backed store's name rule.
func TestCheckNameRefuses(t *testing.T) {
	long := make([]byte, 64)
	for i := range long {
		long[i] = 'x'
	}
	for _, name := range []string{"", ".", "..", ".hidden", "a/b", "a b", "a*", "a>", string(make([]byte, 65)), string(long) + "x"} {
		if checkName(name) == nil {
			t.Errorf("checkName(%q) accepted it", name)
		}
	}
	for _, name := range []string{"a", "a.b", "a_b-c", "A9", string(long)} {
		if err := checkName(name); err != nil {
			t.Errorf("checkName(%q): %v", name, err)
		}
	}
}

// TestReceiptTampering flips every bit of a receipt and requires each
// forgery, and the receipt under another Store's key or another queue's
// name, to be refused as UnknownReceipt.
func TestReceiptTampering(t *testing.T) {
	s := &Store{key: []byte("0123456789abcdef0123456789abcdef")}
	q := &Queue{s: s, name: "a", n: newNames("P", "a")}
	r := q.receipt(42, 7)
	seq, nonce, err := q.parseReceipt(r)
	if err != nil || seq != 42 || nonce != 7 {
		t.Fatalf("parseReceipt(own) = %d, %d, %v", seq, nonce, err)
	}
	raw := []byte(r)
	for i := range raw {
		for bit := 0; bit < 8; bit++ {
			b := append([]byte(nil), raw...)
			b[i] ^= 1 << bit
			if _, _, err := q.parseReceipt(broker.ReceiptValue(b)); err == nil {
				t.Fatalf("receipt with byte %d bit %d flipped was accepted", i, bit)
			}
		}
	}
	other := &Queue{s: s, name: "b", n: newNames("P", "b")}
	if _, _, err := other.parseReceipt(r); err == nil {
		t.Fatalf("another queue accepted the receipt")
	}
	stranger := &Queue{s: &Store{key: []byte("another key, another store......")}, name: "a", n: newNames("P", "a")}
	if _, _, err := stranger.parseReceipt(r); err == nil {
		t.Fatalf("another Store accepted the receipt")
	}
}

// TestAKeyIsHeldAtTheEndOfItsWindow: a dedup key is evicted only when
// strictly older than the window, so at enqueued+window exactly it is
// still held, and a nanosecond later it is not.
func TestAKeyIsHeldAtTheEndOfItsWindow(t *testing.T) {
	enqueued := time.Unix(1_700_000_000, 0)
	window := time.Minute
	for _, c := range []struct {
		at   time.Duration
		held bool
	}{{0, true}, {window - 1, true}, {window, true}, {window + 1, false}} {
		if got := withinWindow(enqueued.Add(c.at), enqueued, window); got != c.held {
			t.Errorf("held %v after enqueue, window %v: %v, want %v", c.at, window, got, c.held)
		}
	}
}

// TestALeaseIsRefusedAtItsExpiresAt: a receipt is live until its lease's
// ExpiresAt and refused, LeaseExpired, at that instant exactly, as the
// file-backed store refuses it.
func TestALeaseIsRefusedAtItsExpiresAt(t *testing.T) {
	expires := time.Unix(1_700_000_000, 0)
	q := &Queue{s: &Store{key: []byte("0123456789abcdef0123456789abcdef")}, name: "a", n: newNames("P", "a"),
		leases: map[uint64]*lease{42: {nonce: 7, expiresAt: expires}}}
	r := q.receipt(42, 7)
	if _, _, err := q.liveLocked(r, expires.Add(-time.Nanosecond)); err != nil {
		t.Fatalf("a nanosecond before ExpiresAt: %v, want the lease", err)
	}
	if _, _, err := q.liveLocked(r, expires); !errors.Is(err, broker.LeaseExpired) {
		t.Fatalf("at ExpiresAt: %v, want LeaseExpired", err)
	}
}

// TestTrimmingDropsOnlyTheLongLapsedLeases: once a Queue holds many
// leases and retry instants, Receive drops those that ended more than
// leaseMemory ago, and keeps a lease that lapsed less long ago (it dates
// a death the server may notice late) and the live ones.
func TestTrimmingDropsOnlyTheLongLapsedLeases(t *testing.T) {
	now := time.Now()
	long, recent, live := now.Add(-leaseMemory-time.Minute), now.Add(-time.Minute), now.Add(time.Hour)
	q := &Queue{leases: map[uint64]*lease{}, retries: map[uint64]retry{}, sweepAt: minSweep}
	for seq := range uint64(minSweep) {
		q.leases[seq+10] = &lease{expiresAt: long}
	}
	q.leases[1], q.leases[2] = &lease{expiresAt: recent}, &lease{expiresAt: live}
	q.retries[3], q.retries[4], q.retries[5] = retry{at: long}, retry{at: recent}, retry{at: live}
	q.trimLeases()
	if len(q.leases) != 2 || q.leases[1] == nil || q.leases[2] == nil {
		t.Errorf("%d leases kept, want the 2 that lapsed a minute ago or are live", len(q.leases))
	}
	if _, passed := q.retries[3]; len(q.retries) != 2 || passed {
		t.Errorf("retries kept %v, want the 2 that ended a minute ago or are due", q.retries)
	}
}

// injectAdvisories stores advisories in q's deaths stream as the server
// would, each naming a stream sequence of seqs.
func injectAdvisories(t *testing.T, q *Queue, seqs ...uint64) {
	t.Helper()
	for _, seq := range seqs {
		body := fmt.Sprintf(`{"timestamp":%q,"stream_seq":%d,"deliveries":1}`, time.Now().Format(time.RFC3339Nano), seq)
		if _, err := q.s.js.Publish(context.Background(), q.n.deathSubject, []byte(body)); err != nil {
			t.Fatalf("advisory: %v", err)
		}
	}
}

// TestTwoStoresSweepingOneDeathsStreamBothSucceed: two Stores sweeping the
// same advisories at once both delete each of them; the second delete
// finds it gone, which is no failure, and both sweeps succeed.
func TestTwoStoresSweepingOneDeathsStreamBothSucceed(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "sweeps", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1})
	nc, err := nats.Connect(q.s.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s2, err := Open(nc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	q2, err := s2.Queue("sweeps", q.currentPolicy())
	if err != nil {
		t.Fatal(err)
	}
	// Advisories of messages already gone: each sweep only deletes them.
	seqs := make([]uint64, 200)
	for i := range seqs {
		seqs[i] = uint64(1_000_000 + i)
	}
	injectAdvisories(t, q, seqs...)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, x := range []*Queue{q, q2} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = x.SweepNow(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("sweep %d: %v", i+1, err)
		}
	}
	if info, err := q.deaths.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("deaths stream after both sweeps: %v, %v; want it empty", info, err)
	}
}

// TestAnAdvisoryNamingNoMessageIsDropped: an advisory that names stream
// sequence 0 (readable JSON, but not of a message) is dropped by the
// sweep, which succeeds: kept, it would fail every later call that looks.
func TestAnAdvisoryNamingNoMessageIsDropped(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "zero", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1})
	injectAdvisories(t, q, 0)
	if err := q.SweepNow(ctx); err != nil {
		t.Fatalf("sweep of an advisory naming sequence 0: %v", err)
	}
	if info, err := q.deaths.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("deaths stream after the sweep: %v, %v; want it empty", info, err)
	}
}

// TestASweepSuspectsNoMessageAfterTheDeliveredOnes: a sweep looks for
// given-up messages only up to the last the consumer delivered. A message
// stored past it, which the stream returns as the next one because the
// last delivered was acknowledged and is gone, was never delivered and is
// no suspect: only the given-up message becomes a dead letter.
func TestASweepSuspectsNoMessageAfterTheDeliveredOnes(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "gap", broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 1})
	given, _ := publishOne(t, q)
	acked, _ := publishOne(t, q)
	ds, err := q.Receive(ctx, 2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Receive: %d deliveries, %v", len(ds), err)
	}
	for _, d := range ds {
		if d.Message.ID == acked.ID {
			if err := q.Ack(ctx, d.Lease.Receipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The other lease lapses on its last delivery; its advisory is lost.
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := q.deaths.Info(ctx)
		if err == nil && info.State.Msgs > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no advisory of the lapse of the last allowed lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := q.deaths.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	fresh, _ := publishOne(t, q) // never delivered, after the acknowledged one's gap
	if err := q.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	for seq := range q.suspects { // found given up long enough ago
		q.suspects[seq] = time.Now().Add(-2 * abandonGrace)
	}
	if err := q.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 1 || dls[0].Message.ID != given.ID {
		t.Fatalf("dead letters %+v, %v; want only the given-up %s", dls, err, given.ID)
	}
	if ds, err := q.Receive(ctx, 10); err != nil || len(ds) != 1 || ds[0].Message.ID != fresh.ID {
		t.Fatalf("Receive after the sweeps: %d deliveries, %v; want the undelivered %s", len(ds), err, fresh.ID)
	}
}

// TestAGivenUpMessageWhoseLeaseIsStillLiveHereDiesAtTheSweep: a server
// restarted over its store can give a message up before the ExpiresAt
// this Store promised (its instants are kept in whole seconds). Buried
// as abandoned, its FailedAt is then the sweep's instant, never that
// later ExpiresAt: a dead letter does not fail in the future.
func TestAGivenUpMessageWhoseLeaseIsStillLiveHereDiesAtTheSweep(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "early", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	m, seq := publishOne(t, q)
	raw, err := q.work.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	q.mu.Lock()
	q.leases[seq] = &lease{nonce: 1, deliveries: 3, expiresAt: now.Add(time.Second), id: m.ID, enqueued: m.EnqueuedAt}
	q.mu.Unlock()
	if err := q.buryAbandoned(ctx, raw, 3, now); err != nil {
		t.Fatal(err)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 1 || !dls[0].FailedAt.Equal(now) {
		t.Fatalf("dead letters %+v, %v; want %s failed at the sweep, %v", dls, err, m.ID, now)
	}
}

// TestAGivenUpMessageIsDatedOnlyByALeaseThatWasItsLast: buryAbandoned
// dates and counts a death by the lapsed lease this Queue holds only when
// that lease was on a delivery the policy allowed no more of, when it was
// handed out (MaxDeliveries raised since) or now (lowered since); a lease
// on an earlier delivery, which another Store followed with the last,
// leaves the sweep's instant and the policy's MaxDeliveries.
func TestAGivenUpMessageIsDatedOnlyByALeaseThatWasItsLast(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "last", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 2})
	now := time.Now()
	lapsed := now.Add(-time.Second)
	for _, c := range []struct {
		name           string
		deliveries     int
		last           bool
		wantDeliveries int
		wantFailedAt   time.Time
	}{
		{"an earlier delivery", 1, false, 2, now},
		{"the last, MaxDeliveries raised since", 1, true, 1, lapsed},
		{"the last, MaxDeliveries lowered since", 3, false, 3, lapsed},
	} {
		m, seq := publishOne(t, q)
		raw, err := q.work.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		q.mu.Lock()
		q.leases[seq] = &lease{nonce: 1, deliveries: c.deliveries, last: c.last, expiresAt: lapsed, id: m.ID, enqueued: m.EnqueuedAt}
		q.mu.Unlock()
		if err := q.buryAbandoned(ctx, raw, 2, now); err != nil {
			t.Fatal(err)
		}
		raw, err = q.deadRecord(ctx, m.ID)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		dl, err := decodeDead(raw)
		if err != nil || dl.Deliveries != c.wantDeliveries || !dl.FailedAt.Equal(c.wantFailedAt) {
			t.Errorf("%s: dead letter %+v, %v; want %d deliveries, failed at %v", c.name, dl, err, c.wantDeliveries, c.wantFailedAt)
		}
	}
}

// TestParseDelivery reads both forms of JetStream ack subjects.
func TestParseDelivery(t *testing.T) {
	ts := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano()
	for _, reply := range []string{
		"$JS.ACK.P_Q_a.walbroker.3.17.99." + strconv.FormatInt(ts, 10) + ".5",
		"$JS.ACK._.HASH.P_Q_a.walbroker.3.17.99." + strconv.FormatInt(ts, 10) + ".5.tok",
		"$JS.ACK.dom.HASH.P_Q_a.walbroker.3.17.99." + strconv.FormatInt(ts, 10) + ".5",
	} {
		d, err := parseDelivery(&nats.Msg{Reply: reply})
		if err != nil {
			t.Fatalf("%s: %v", reply, err)
		}
		if d.seq != 17 || d.delivered != 3 || d.stored.UnixNano() != ts || d.pending != 5 {
			t.Fatalf("%s: got seq %d delivered %d stored %v pending %d", reply, d.seq, d.delivered, d.stored, d.pending)
		}
	}
	for _, reply := range []string{"", "_INBOX.x", "$JS.ACK.a.b.c", "$JS.ACK.P.c.x.17.99.1.5", "$JS.ACK.P.c.0.17.99.1.5", "$JS.ACK.P.c.1.0.99.1.5", "$JS.ACK.P.c.1.17.99.1.x"} {
		if _, err := parseDelivery(&nats.Msg{Reply: reply}); err == nil {
			t.Errorf("parseDelivery(%q) accepted it", reply)
		}
	}
}

// openQueue opens queue name with policy p on a Store of its own, on an
// embedded server of its own; all three are closed at cleanup.
func openQueue(t *testing.T, name string, p broker.PolicyValue) *Queue {
	t.Helper()
	q, err := openStoreOn(t, embeddedServer(t), Options{}).Queue(name, p)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// embeddedServer starts a JetStream server of the test's own, shut down at
// cleanup.
func embeddedServer(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	return srv
}

// openStoreOn opens a Store with o on srv, through a connection of its own
// made with opts; both are closed at cleanup.
func openStoreOn(t *testing.T, srv *server.Server, o Options, opts ...nats.Option) *Store {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := Open(nc, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// publishOne publishes "x" on q and returns the message and its sequence
// in the work stream, which its ID renders in hex.
func publishOne(t *testing.T, q *Queue) (broker.MessageValue, uint64) {
	t.Helper()
	m, err := q.Publish(context.Background(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	seq, err := strconv.ParseUint(m.ID, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return m, seq
}

// TestAMessageTheConsumerHasNotCountedIsUndelivered: the server tells its
// consumer of a stored message after it acknowledged the publish, so the
// consumer may report nothing pending and nothing delivered past a
// message whose Publish returned. undelivered must still find that
// message, and find nothing once it is gone.
func TestAMessageTheConsumerHasNotCountedIsUndelivered(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "lag", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	m, seq := publishOne(t, q)
	// The consumer's state before it heard of the message.
	unaware := &jetstream.ConsumerInfo{}
	if got, err := q.undelivered(ctx, unaware); err != nil || !got {
		t.Fatalf("undelivered with %s stored and the consumer unaware of it: %v, %v; want true", m.ID, got, err)
	}
	// Deleted before any delivery (as by an operator's purge), the message
	// no longer awaits one, whatever the consumer's state says.
	if err := q.work.DeleteMsg(ctx, seq); err != nil {
		t.Fatal(err)
	}
	if got, err := q.undelivered(ctx, unaware); err != nil || got {
		t.Fatalf("undelivered after %s was deleted: %v, %v; want false", m.ID, got, err)
	}
}

// TestADeathWhoseNoticeWasLostIsBuriedWithinAMinute: a Store that did not
// hear a death's notice (its connection was down when the deaths stream
// republished it) still buries the death at its first call that looks a
// minute or more after its last sweep.
func TestADeathWhoseNoticeWasLostIsBuriedWithinAMinute(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "lost", broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 1})
	m, _ := publishOne(t, q)
	if ds, err := q.Receive(ctx, 1); err != nil || len(ds) != 1 {
		t.Fatalf("Receive: %d deliveries, %v", len(ds), err)
	}
	// The Receive swept; wait for the death's notice, then lose it.
	deadline := time.Now().Add(20 * time.Second)
	for !q.unburied.Load() {
		if time.Now().After(deadline) {
			t.Fatal("no notice of the death of the only lease, on its last delivery")
		}
		time.Sleep(10 * time.Millisecond)
	}
	q.unburied.Store(false)
	q.lastSweep.Store(time.Now().Add(-sweepEvery - time.Second).UnixNano())
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Message.ID != m.ID || dls[0].Reason != broker.ReasonLeaseExpired {
		t.Fatalf("dead letters %+v a minute after the last sweep, want %s as LEASE_EXPIRED", dls, m.ID)
	}
}

// TestADeleteOfAMessageAlreadyGoneIsNotFound: two Stores burying one
// death, or two deletes of one dead letter, delete the same message twice;
// the server's refusal of the second must read as "not found" (which the
// callers treat as done), whatever shape the client library gives it.
func TestADeleteOfAMessageAlreadyGoneIsNotFound(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "twice", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	m, seq := publishOne(t, q)
	if err := q.work.DeleteMsg(ctx, seq); err != nil {
		t.Fatalf("first delete: %v", err)
	}
	if err := q.work.DeleteMsg(ctx, seq); !notFound(err) {
		t.Fatalf("second delete of %s: %v, which notFound does not recognise", m.ID, err)
	}
}

// TestTwoStoresBuryingOneDeathBothSucceed: two Stores that read one death
// before either buried it both write its record and both delete the
// message; the second delete finds it gone, which is no failure.
func TestTwoStoresBuryingOneDeathBothSucceed(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "twice", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1})
	m, seq := publishOne(t, q)
	c := corpse{seq: seq, id: m.ID, enqueued: m.EnqueuedAt, payload: []byte("x"), deliveries: 1, failedAt: time.Now()}
	for i := range 2 {
		if err := q.bury(ctx, c, broker.ReasonLeaseExpired, 0, ""); err != nil {
			t.Fatalf("bury %d of one death: %v", i+1, err)
		}
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Message.ID != m.ID {
		t.Fatalf("dead letters %+v, want the one of %s", dls, m.ID)
	}
}

// TestAnAdvisoryKeepsTheDeathARejectRecorded: a Reject (or a Nack on the
// last delivery) stores its dead letter, then terminates the delivery;
// when its acknowledgement reaches the server after the lease's
// deadline, the server's MAX_DELIVERIES advisory of that lapse can be
// swept between the two. The sweep keeps the record, with the cause the
// consumer reported, and only removes the message from the work stream.
func TestAnAdvisoryKeepsTheDeathARejectRecorded(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, "late", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1})
	m, seq := publishOne(t, q)
	// The record the Reject stored before its +TERM.
	rec := nats.NewMsg(q.n.deadSubject + "." + m.ID)
	rec.Data = []byte("x")
	rec.Header.Set(hdrID, m.ID)
	rec.Header.Set(hdrEnqueued, strconv.FormatInt(m.EnqueuedAt.UnixNano(), 10))
	rec.Header.Set(hdrFailed, strconv.FormatInt(time.Now().UnixNano(), 10))
	rec.Header.Set(hdrReason, strconv.Quote("PARSE_FAILED"))
	rec.Header.Set(hdrCode, broker.FormatCode(0x2A00000B))
	rec.Header.Set(hdrCause, strconv.Quote("unparsable order"))
	rec.Header.Set(hdrDeliveries, "1")
	if _, err := q.s.js.PublishMsg(ctx, rec); err != nil {
		t.Fatal(err)
	}
	injectAdvisories(t, q, seq)
	if err := q.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Message.ID != m.ID || dls[0].Reason != "PARSE_FAILED" || dls[0].Cause != "unparsable order" {
		t.Fatalf("dead letters %+v, want %s with the Reject's PARSE_FAILED", dls, m.ID)
	}
	if _, err := q.work.GetMsg(ctx, seq); !notFound(err) {
		t.Fatalf("the work stream still holds %s after the sweep: %v", m.ID, err)
	}
}

// TestALeaseLookedAtAfterCloseIsClosed: a call that passed begin before
// Close and looks at its lease after it (Ack, Nack, Reject, Extend) is
// told Closed, not LeaseExpired: Close forgot the leases, but the lease
// is held on the server until it lapses. And a pull that Close overtook
// records no lease.
func TestALeaseLookedAtAfterCloseIsClosed(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	q := &Queue{s: &Store{key: []byte("0123456789abcdef0123456789abcdef")}, name: "a", n: newNames("P", "a"),
		leases: map[uint64]*lease{42: {nonce: 7, expiresAt: now.Add(time.Hour)}}, retries: map[uint64]retry{}}
	r := q.receipt(42, 7)
	if _, _, err := q.liveLocked(r, now); err != nil {
		t.Fatalf("before Close: %v, want the lease", err)
	}
	q.closed, q.leases = true, map[uint64]*lease{} // as Queue.close leaves it
	if _, _, err := q.liveLocked(r, now); !errors.Is(err, broker.Closed) || errors.Is(err, broker.LeaseExpired) {
		t.Fatalf("after Close: %v, want Closed", err)
	}
	if _, ok := q.deliver(delivery{msg: nats.NewMsg("x"), seq: 43, delivered: 1}, now.Add(time.Hour), false); ok || q.leases[43] != nil {
		t.Fatal("a delivery recorded after Close")
	}
}

// Wake's In adds its slack to the time until a message is receivable,
// counts a moment past as zero, and stays the longest Duration for a
// moment further ahead than a Duration holds: a wrap would say "now".
func TestWakeInNeverWrapsToNow(t *testing.T) {
	now := time.Date(1750, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want time.Duration
	}{
		{now.Add(5 * time.Second), 5*time.Second + wakeSlack},
		{now.Add(-time.Hour), wakeSlack},
		{now.AddDate(500, 0, 0), math.MaxInt64},
	} {
		if got := wakeIn(c.at, now); got != c.want {
			t.Errorf("wakeIn(%v, %v) = %v, want %v", c.at, now, got, c.want)
		}
	}
}

// TestWakeNamesNoRetryOfAMessageWithNoDeliveryLeft: a message this Queue
// nacked whose count a declaration has since made the last the policy
// allows is not delivered again (the server's MaxDeliver stops it, and a
// sweep buries it): Wake names the end of its retry delay no more, only
// that of a message with deliveries left.
func TestWakeNamesNoRetryOfAMessageWithNoDeliveryLeft(t *testing.T) {
	now := time.Now()
	q := &Queue{s: &Store{}, policy: broker.PolicyValue{MaxDeliveries: 2}, leases: map[uint64]*lease{}, signal: make(chan struct{}),
		subscribeAfter: now.Add(time.Hour), // no wake subscription: this Queue has no connection
		retries: map[uint64]retry{
			1: {at: now.Add(30 * time.Second), l: &lease{deliveries: 2}},
			2: {at: now.Add(time.Hour), l: &lease{deliveries: 1}},
		}}
	w := q.Wake()
	if !w.Scheduled || w.In < 50*time.Minute {
		t.Fatalf("Wake %+v, want In an hour: the retry of the message with a delivery left, not the one at 30 s of the message with none", w)
	}
	delete(q.retries, 2)
	if w := q.Wake(); w.Scheduled {
		t.Fatalf("Wake %+v with only the retry of a message with no delivery left, want nothing scheduled", w)
	}
}
