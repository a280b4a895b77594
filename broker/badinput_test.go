package broker_test

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/broker"
)

// TestANilContextIsRefusedByEveryCall: a nil context is a bad argument like
// any other: QueueMisconfigured, naming it, with nothing done — not a
// panic.
func TestANilContextIsRefusedByEveryCall(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mem := e.memory()
	for _, b := range []broker.Broker{q, mem} {
		mustPublishTo(t, b, "x")
	}
	ds := mustReceive(t, q, 1)
	var nilCtx context.Context
	for _, b := range []fullBroker{q, mem} {
		before := b.Stats()
		calls := map[string]func() error{
			"Publish":          func() error { _, err := b.Publish(nilCtx, []byte("y")); return err },
			"PublishKeyed":     func() error { _, err := b.PublishKeyed(nilCtx, "k", []byte("y")); return err },
			"PublishBatch":     func() error { _, err := b.PublishBatch(nilCtx, [][]byte{[]byte("y")}); return err },
			"Receive":          func() error { _, err := b.Receive(nilCtx, 1); return err },
			"Ack":              func() error { return b.Ack(nilCtx, ds[0].Lease.Receipt) },
			"Nack":             func() error { _, err := b.Nack(nilCtx, ds[0].Lease.Receipt, nil); return err },
			"Reject":           func() error { return b.Reject(nilCtx, ds[0].Lease.Receipt, nil) },
			"Extend":           func() error { _, err := b.Extend(nilCtx, ds[0].Lease.Receipt, time.Second); return err },
			"DeadLetters":      func() error { _, err := b.DeadLetters(nilCtx, 1); return err },
			"ReplayDeadLetter": func() error { return b.ReplayDeadLetter(nilCtx, ds[0].Message.ID) },
			"DeleteDeadLetter": func() error { return b.DeleteDeadLetter(nilCtx, ds[0].Message.ID) },
		}
		for name, call := range calls {
			err := call()
			require.ErrorIs(t, err, broker.QueueMisconfigured, "%T.%s", b, name)
			require.ErrorContains(t, err, "nil context", "%T.%s", b, name)
		}
		require.Equal(t, before, b.Stats(), "%T: nothing changed", b)
	}
	require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt), "the lease is still held")

	dst := filepath.Join(t.TempDir(), "backup")
	err := e.s.Backup(nilCtx, dst)
	require.ErrorIs(t, err, broker.QueueMisconfigured)
	require.ErrorContains(t, err, "nil context")
	require.NoDirExists(t, dst)
}

func mustPublishTo(t *testing.T, b broker.Broker, payload string) {
	t.Helper()
	_, err := b.Publish(ctx(t), []byte(payload))
	require.NoError(t, err)
}

// A backup into the store's directory is refused when it is named through
// a symbolic link too, and nothing is written there.
func TestBackupRefusesTheStoreThroughALink(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(e.dir, link))
	err := e.s.Backup(ctx(t), filepath.Join(link, "backup"))
	require.ErrorContains(t, err, "inside the store's own directory")
	require.NoDirExists(t, filepath.Join(e.dir, "backup"))
	require.NoDirExists(t, filepath.Join(e.dir, "backup.partial"))
}

// A dead letter ID that names nothing is quoted in the error, clipped: a
// caller's 64 KiB of junk does not become 64 KiB of error text.
func TestAnUnknownDeadLetterIDIsClippedInTheError(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mem := e.memory()
	id := strings.Repeat("z", 64<<10)
	for _, b := range []interface {
		ReplayDeadLetter(context.Context, string) error
	}{q, mem} {
		err := b.ReplayDeadLetter(ctx(t), id)
		require.ErrorIs(t, err, broker.DeadLetterNotFound)
		require.Contains(t, err.Error(), strings.Repeat("z", 64))
		require.Less(t, len(err.Error()), 200, "%T", b)
	}
}

// A queue name far too long is quoted in the error clipped, as a dead
// letter ID is: a caller's megabyte of junk, control bytes included (each
// quoted as four characters), does not become megabytes of error text.
func TestATooLongQueueNameIsClippedInTheError(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{strings.Repeat("q", 1<<20), strings.Repeat("\x00", 1<<20)} {
		q, err := e.s.Queue(name, policy())
		require.Nil(t, q)
		require.ErrorIs(t, err, broker.QueueMisconfigured)
		require.Contains(t, err.Error(), "has 1048576 bytes, want 1 to 64")
		require.Less(t, len(err.Error()), 400)
	}
	require.Empty(t, e.s.Queues())
}

// A nil *Error is usable: Wrap gives an error that carries the cause
// alone, and an Error with no parts still says what it is.
func TestANilErrorWraps(t *testing.T) {
	var e *broker.Error
	cause := errors.New("disk on fire")
	w := e.Wrap(cause)
	require.ErrorIs(t, w, cause)
	require.Equal(t, "disk on fire", w.Error())
	require.Empty(t, w.Reason())
	require.Equal(t, "broker.Error(empty)", broker.NewError("", 0, "", "").Error())
}

// TestACallWhoseContextHasEndedChangesNothing: an ended ctx refuses every
// call of a Queue with ctx's error, and the store is as it was.
func TestACallWhoseContextHasEndedChangesNothing(t *testing.T) {
	e := newEnv(t)
	q := e.queue("q", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	mustPublish(t, q, "ready")
	mustPublish(t, q, "leased")
	leased := mustReceiveOne(t, q)
	mustPublish(t, q, "dead")
	dead := mustReceiveOne(t, q)
	require.NoError(t, q.Reject(ctx(t), dead.Lease.Receipt, nil))
	before := broker.Dump(e.s)

	ended, cancel := context.WithCancel(ctx(t))
	cancel()
	calls := map[string]func() error{
		"Publish":      func() error { _, err := q.Publish(ended, []byte("x")); return err },
		"PublishKeyed": func() error { _, err := q.PublishKeyed(ended, "k", []byte("x")); return err },
		"PublishBatch": func() error { _, err := q.PublishBatch(ended, [][]byte{[]byte("x")}); return err },
		"Receive":      func() error { _, err := q.Receive(ended, 10); return err },
		"Ack":          func() error { return q.Ack(ended, leased.Lease.Receipt) },
		"Nack":         func() error { _, err := q.Nack(ended, leased.Lease.Receipt, nil); return err },
		"Reject":       func() error { return q.Reject(ended, leased.Lease.Receipt, nil) },
		"Extend":       func() error { _, err := q.Extend(ended, leased.Lease.Receipt, time.Minute); return err },
		"DeadLetters":  func() error { _, err := q.DeadLetters(ended, 10); return err },
		"Replay":       func() error { return q.ReplayDeadLetter(ended, dead.Message.ID) },
		"Delete":       func() error { return q.DeleteDeadLetter(ended, dead.Message.ID) },
	}
	for name, call := range calls {
		require.ErrorIs(t, call(), context.Canceled, name)
		require.Equal(t, before, broker.Dump(e.s), "%s changed the store", name)
	}
}

// A dead letter is named only by the ID it was handed out with: the same
// number spelled another way (a leading zero more, or the leading zeros
// dropped) names nothing, and neither a replay nor a delete moves it.
func TestADeadLetterIsNamedOnlyByTheIDItWasHandedOutWith(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mem := e.memory()
	for _, b := range []fullBroker{q, mem} {
		mustPublishTo(t, b, "x")
		ds, err := b.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		id := ds[0].Message.ID
		require.NoError(t, b.Reject(ctx(t), ds[0].Lease.Receipt, nil))
		for _, other := range []string{"0" + id, strings.TrimLeft(id, "0")} {
			require.ErrorIs(t, b.ReplayDeadLetter(ctx(t), other), broker.DeadLetterNotFound, "%T: %q for %q", b, other, id)
			require.ErrorIs(t, b.DeleteDeadLetter(ctx(t), other), broker.DeadLetterNotFound, "%T: %q for %q", b, other, id)
		}
		dead, err := b.DeadLetters(ctx(t), 10)
		require.NoError(t, err)
		require.Len(t, dead, 1, "%T: the dead letter stays", b)
		require.Equal(t, id, dead[0].Message.ID)
	}
}

// TestEveryRefusedCallLeavesTheBrokerAsItWas: each bad argument the port
// can be given is refused with its documented sentinel and an error that
// names it, and nothing moves: the file store's queues dump as before and
// its log took no record; the in-memory broker's stats are as before; the
// lease the refused calls named is still held and acks.
func TestEveryRefusedCallLeavesTheBrokerAsItWas(t *testing.T) {
	e := newEnv(t)
	small := func(p *broker.PolicyValue) { p.MaxMessageBytes = 100; p.Capacity = 4; p.MaxDeliveries = 1 }
	q := e.queue("jobs", policy(small))
	other := e.queue("other", policy())
	mustPublish(t, other, "o")
	otherQueue := mustReceiveOne(t, other).Lease.Receipt
	e2 := newEnv(t)
	q2 := e2.queue("jobs", policy(small))
	mustPublish(t, q2, "s")
	otherStore := mustReceiveOne(t, q2).Lease.Receipt
	mem, err := broker.NewMemory(policy(small), broker.MemoryOptions{Now: e.clock.Now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = mem.Close() })

	for _, b := range []fullBroker{q, mem} {
		name := fmt.Sprintf("%T", b)
		// One dead letter, one leased message and three ready: the queue
		// is full (dead letters do not count), and a shed publish counted.
		mustPublishTo(t, b, "dead")
		ds, err := b.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.NoError(t, b.Reject(ctx(t), ds[0].Lease.Receipt, nil))
		mustPublishTo(t, b, "leased")
		ds, err = b.Receive(ctx(t), 1)
		require.NoError(t, err)
		held := ds[0].Lease.Receipt
		mustPublishTo(t, b, "ready")
		mustPublishTo(t, b, "ready")
		mustPublishTo(t, b, "ready")
		_, err = b.PublishKeyed(ctx(t), "seen", []byte("keyed"))
		require.ErrorIs(t, err, broker.QueueFull, "%s: the queue is full now", name)
		stats, dump, records := b.Stats(), broker.Dump(e.s), e.s.Stats().Records

		big := make([]byte, 101)
		forged := held[:len(held)-1]
		refused := []struct {
			what     string
			call     func() error
			sentinel error
			mentions []string
		}{
			{"oversized publish", func() error { _, err := b.Publish(ctx(t), big); return err }, broker.MessageTooLarge, []string{"payload is 101 bytes", "100"}},
			{"oversized keyed publish", func() error { _, err := b.PublishKeyed(ctx(t), "k", big); return err }, broker.MessageTooLarge, []string{"payload is 101 bytes"}},
			{"empty key", func() error { _, err := b.PublishKeyed(ctx(t), "", nil); return err }, broker.InvalidDedupKey, []string{"0 bytes", "1 to 256"}},
			{"long key", func() error { _, err := b.PublishKeyed(ctx(t), strings.Repeat("k", 257), nil); return err }, broker.InvalidDedupKey, []string{"257 bytes"}},
			{"nil batch", func() error { _, err := b.PublishBatch(ctx(t), nil); return err }, broker.InvalidBatchSize, []string{"empty batch"}},
			{"empty batch", func() error { _, err := b.PublishBatch(ctx(t), [][]byte{}); return err }, broker.InvalidBatchSize, []string{"empty batch"}},
			{"batch with one oversized", func() error { _, err := b.PublishBatch(ctx(t), [][]byte{nil, big}); return err }, broker.MessageTooLarge, []string{"payload 1 of the batch of 2 is 101 bytes"}},
			{"Receive 0", func() error { _, err := b.Receive(ctx(t), 0); return err }, broker.InvalidBatchSize, []string{"max 0"}},
			{"Receive -1", func() error { _, err := b.Receive(ctx(t), -1); return err }, broker.InvalidBatchSize, []string{"max -1"}},
			{"Receive MinInt", func() error { _, err := b.Receive(ctx(t), math.MinInt); return err }, broker.InvalidBatchSize, []string{"must be positive"}},
			{"DeadLetters 0", func() error { _, err := b.DeadLetters(ctx(t), 0); return err }, broker.InvalidBatchSize, []string{"max 0"}},
			{"DeadLetters -1", func() error { _, err := b.DeadLetters(ctx(t), -1); return err }, broker.InvalidBatchSize, []string{"max -1"}},
			{"Extend 0", func() error { _, err := b.Extend(ctx(t), held, 0); return err }, broker.QueueMisconfigured, []string{"by 0s", "positive"}},
			{"Extend negative", func() error { _, err := b.Extend(ctx(t), held, -time.Second); return err }, broker.QueueMisconfigured, []string{"by -1s"}},
			{"Extend past 2262", func() error { _, err := b.Extend(ctx(t), held, math.MaxInt64); return err }, broker.QueueMisconfigured, []string{"2262", "unchanged"}},
			{"Ack truncated", func() error { return b.Ack(ctx(t), forged) }, broker.UnknownReceipt, []string{"receipt"}},
			{"Nack empty", func() error { _, err := b.Nack(ctx(t), "", nil); return err }, broker.UnknownReceipt, []string{"receipt"}},
			{"Reject other queue's", func() error { return b.Reject(ctx(t), otherQueue, nil) }, broker.UnknownReceipt, nil},
			{"Extend other store's", func() error { _, err := b.Extend(ctx(t), otherStore, time.Second); return err }, broker.UnknownReceipt, nil},
			{"Ack other store's", func() error { return b.Ack(ctx(t), otherStore) }, broker.UnknownReceipt, nil},
			{"Replay unknown", func() error { return b.ReplayDeadLetter(ctx(t), "nope") }, broker.DeadLetterNotFound, []string{`"nope"`}},
			{"Delete empty", func() error { return b.DeleteDeadLetter(ctx(t), "") }, broker.DeadLetterNotFound, []string{`""`}},
		}
		for _, r := range refused {
			err := r.call()
			requireErrorIs(t, err, r.sentinel, r.mentions...)
			require.Equal(t, stats, b.Stats(), "%s: %s changed the stats", name, r.what)
			require.Equal(t, dump, broker.Dump(e.s), "%s: %s changed the store", name, r.what)
			require.Equal(t, records, e.s.Stats().Records, "%s: %s wrote to the log", name, r.what)
		}
		require.NoError(t, b.Ack(ctx(t), held), "%s: the lease the refused calls named is still held", name)
		dead, err := b.DeadLetters(ctx(t), 10)
		require.NoError(t, err)
		require.Len(t, dead, 1, name)
		require.Equal(t, "dead", string(dead[0].Message.Payload), name)
	}
}

// TestOpenOfAFileOrBelowOneNamesItAndChangesNothing: a store directory that
// is a regular file, or lies below one, is refused naming the path, and the
// file is as it was.
func TestOpenOfAFileOrBelowOneNamesItAndChangesNothing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, []byte("keep"), 0o600))
	for _, dir := range []string{file, filepath.Join(file, "store")} {
		s, err := broker.Open(dir, broker.Options{})
		require.Nil(t, s)
		require.ErrorContains(t, err, dir)
		require.ErrorContains(t, err, "not a directory")
		got, rerr := os.ReadFile(file)
		require.NoError(t, rerr)
		require.Equal(t, "keep", string(got))
	}
}

// TestTheMethodsOfANilPointerRefuseInsteadOfPanicking: a nil *Store,
// *Queue or *Memory is what a caller holds that went on past the error of
// Open, Store.Queue or NewMemory. Every method used to panic on one; each
// that returns an error now returns QueueMisconfigured saying the pointer
// is nil, and the others answer as for a store that holds nothing, Wake
// saying to look now.
func TestTheMethodsOfANilPointerRefuseInsteadOfPanicking(t *testing.T) {
	var s *broker.Store
	var q *broker.Queue
	var mem *broker.Memory
	dst := filepath.Join(t.TempDir(), "backup")
	calls := map[string]func() error{
		"Store.Queue":  func() error { _, err := s.Queue("jobs", policy()); return err },
		"Store.Backup": func() error { return s.Backup(ctx(t), dst) },
		"Store.Close":  func() error { return s.Close() },
		"Store.Err":    func() error { return s.Err() },
		"Memory.Close": func() error { return mem.Close() },
	}
	for typ, b := range map[string]fullBroker{"Queue": q, "Memory": mem} {
		for name, call := range map[string]func() error{
			"Publish":          func() error { _, err := b.Publish(ctx(t), []byte("x")); return err },
			"PublishKeyed":     func() error { _, err := b.PublishKeyed(ctx(t), "k", []byte("x")); return err },
			"PublishBatch":     func() error { _, err := b.PublishBatch(ctx(t), [][]byte{[]byte("x")}); return err },
			"Receive":          func() error { _, err := b.Receive(ctx(t), 1); return err },
			"Ack":              func() error { return b.Ack(ctx(t), "r") },
			"Nack":             func() error { _, err := b.Nack(ctx(t), "r", nil); return err },
			"Reject":           func() error { return b.Reject(ctx(t), "r", nil) },
			"Extend":           func() error { _, err := b.Extend(ctx(t), "r", time.Second); return err },
			"DeadLetters":      func() error { _, err := b.DeadLetters(ctx(t), 1); return err },
			"ReplayDeadLetter": func() error { return b.ReplayDeadLetter(ctx(t), "1") },
			"DeleteDeadLetter": func() error { return b.DeleteDeadLetter(ctx(t), "1") },
		} {
			calls[typ+"."+name] = call
		}
		require.Equal(t, broker.QueueStats{}, b.Stats(), typ)
		w := b.Wake()
		require.NotNil(t, w.Signal, typ)
		select {
		case <-w.Signal:
		default:
			t.Fatalf("%s.Wake: the signal of a nil pointer is not closed: a consumer would wait for ever", typ)
		}
	}
	for name, call := range calls {
		err := call()
		require.ErrorIs(t, err, broker.QueueMisconfigured, name)
		typ, _, _ := strings.Cut(name, ".")
		require.ErrorContains(t, err, "nil *broker."+typ, name)
	}
	require.Empty(t, q.Name())
	require.Nil(t, s.Queues())
	require.Equal(t, broker.StoreStats{}, s.Stats())
	require.Equal(t, broker.RecoveryReport{}, s.Recovery())
	require.NoDirExists(t, dst)
}

// TestCauseTextOfNoCauseIsEmpty: a nil cause has no text. CauseText used
// to call its Error method, recover the nil dereference and return a line
// saying that the cause's Error method had panicked, of a cause there
// was not.
func TestCauseTextOfNoCauseIsEmpty(t *testing.T) {
	require.Empty(t, broker.CauseText(nil))
	var typedNil *broker.Error
	require.Equal(t, "broker.Error(nil)", broker.CauseText(typedNil), "a nil *Error says what it is")
}

// TestBackupRefusesAFileOrADanglingLinkAsExisting: a regular file where the
// backup directory would go was refused as "cannot be made: not a
// directory", matching no sentinel; a symbolic link to nothing passed the
// check, the whole store was copied, and the copy then could not take its
// name. Both are refused up front as existing (fs.ErrExist), and are left
// as they were, with nothing written beside them.
func TestBackupRefusesAFileOrADanglingLinkAsExisting(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	mustPublish(t, e.queue("jobs", policy()), "one")
	root := t.TempDir()
	file := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(file, []byte("keep"), 0o600))
	link := filepath.Join(root, "link")
	require.NoError(t, os.Symlink(filepath.Join(root, "nowhere"), link))
	for _, tc := range []struct{ dst, want string }{
		{file, "already exists, and is not a directory"},
		{link, "already exists, as a symbolic link to nothing"},
	} {
		err := e.s.Backup(ctx(t), tc.dst)
		require.ErrorIs(t, err, iofs.ErrExist, tc.dst)
		require.ErrorContains(t, err, tc.dst)
		require.ErrorContains(t, err, tc.want)
		names, rerr := os.ReadDir(root)
		require.NoError(t, rerr)
		require.Len(t, names, 2, "nothing written beside %s", tc.dst)
	}
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, "keep", string(got))
	target, err := os.Readlink(link)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "nowhere"), target)
	require.NoError(t, e.s.Err(), "the store goes on")
}

// TestARefusedPolicyChangeKeepsThePolicyInForce: Store.Queue with a policy
// it refuses (invalid, or a MaxMessageBytes no segment holds) for a queue
// already declared names the field, writes nothing to the log, and the
// policy in force stays.
func TestARefusedPolicyChangeKeepsThePolicyInForce(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 10 }))
	records := e.s.Stats().Records
	for field, p := range map[string]broker.PolicyValue{
		"MaxDeliveries 0":         policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 0; p.MaxMessageBytes = 100 }),
		"MaxMessageBytes 2097152": policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = testSegmentBytes }),
	} {
		got, err := e.s.Queue("jobs", p)
		requireErrorIs(t, err, broker.QueueMisconfigured, `"jobs"`, field)
		require.Nil(t, got, field)
		require.Equal(t, records, e.s.Stats().Records, "%s: a refused declaration wrote to the log", field)
		_, err = q.Publish(ctx(t), make([]byte, 11))
		requireErrorIs(t, err, broker.MessageTooLarge, "MaxMessageBytes is 10")
	}
}
