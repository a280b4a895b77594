package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// awkwardHandler is a slog.Handler that is the caller's code at its most
// awkward: Handle notes the record's message, then reads the broker's
// figures (readBack, when set: Stats, Queues, a queue's Stats, which take
// the locks a log call made under them would hold), then panics when
// panics is set.
type awkwardHandler struct {
	panics   bool
	readBack atomic.Pointer[func()]
	mu       sync.Mutex
	msgs     []string
}

func (h *awkwardHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *awkwardHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *awkwardHandler) WithGroup(string) slog.Handler            { return h }

func (h *awkwardHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	if f := h.readBack.Load(); f != nil {
		(*f)()
	}
	if h.panics {
		panic("logger trouble")
	}
	return nil
}

// readsBack makes Handle run f.
func (h *awkwardHandler) readsBack(f func()) { h.readBack.Store(&f) }

// logged reports whether a record whose message contains msg was handed to
// the handler.
func (h *awkwardHandler) logged(msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.msgs, func(m string) bool { return strings.Contains(m, msg) })
}

func (h *awkwardHandler) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.msgs)
}

// loggerModes are the awkward handlers each path is run with.
var loggerModes = []struct {
	name             string
	panics, readBack bool
}{
	{"ReadsBack", false, true},
	{"Panics", true, false},
	{"ReadsBackAndPanics", true, true},
}

// storeReadBack reads what a handler adding the store's figures to a
// record would: the store's Stats and Queues, and each queue's Stats.
func storeReadBack(s *broker.Store, qs ...*broker.Queue) func() {
	return func() {
		s.Stats()
		s.Queues()
		for _, q := range qs {
			q.Stats()
		}
	}
}

// A nack or reject with a cause that carries no reason logs the cause's
// text. Memory logged it with its lock held: a handler that read the
// queue's Stats waited for ever. Neither broker lets a handler that panics
// fail the call: the nack is made, and the queue goes on.
func TestALoggerThatReadsBackOrPanicsOnAnUnclassifiedCause(t *testing.T) {
	for _, mode := range loggerModes {
		t.Run("Store/"+mode.name, func(t *testing.T) {
			h := &awkwardHandler{panics: mode.panics}
			e := newEnv(t, func(o *broker.Options) { o.Logger = slog.New(h) })
			q := e.queue("jobs", twoDeliveries())
			if mode.readBack {
				h.readsBack(storeReadBack(e.s, q))
			}
			exerciseUnclassifiedLogs(t, h, q)
		})
		t.Run("Memory/"+mode.name, func(t *testing.T) {
			h := &awkwardHandler{panics: mode.panics}
			m, err := broker.NewMemory(twoDeliveries(), broker.MemoryOptions{Now: newFakeClock().Now, Logger: slog.New(h)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = m.Close() })
			if mode.readBack {
				h.readsBack(func() { m.Stats() })
			}
			exerciseUnclassifiedLogs(t, h, m)
		})
	}
}

// twoDeliveries is a policy of two deliveries, a nacked message ready again
// at once.
func twoDeliveries() broker.PolicyValue {
	return policy(func(p *broker.PolicyValue) { p.MaxDeliveries, p.RetryDelay = 2, 0 })
}

// exerciseUnclassifiedLogs nacks a message (handed back), nacks it on its
// last delivery (dead-lettered) and rejects another, each with a cause
// that carries no reason, and checks that each call returned what it
// should and logged.
func exerciseUnclassifiedLogs(t *testing.T, h *awkwardHandler, b fullBroker) {
	_, err := b.Publish(ctx(t), []byte("nacked"))
	require.NoError(t, err)
	_, err = b.Publish(ctx(t), []byte("rejected"))
	require.NoError(t, err)
	receive := func(payload string) broker.DeliveryValue {
		var ds []broker.DeliveryValue
		_, _ = callBounded(t, "Receive", func() (err error) { ds, err = b.Receive(ctx(t), 1); return err })
		require.Len(t, ds, 1)
		require.Equal(t, payload, string(ds[0].Message.Payload))
		return ds[0]
	}
	d := receive("nacked")
	panicked, err := callBounded(t, "Nack", func() error {
		nv, err := b.Nack(ctx(t), d.Lease.Receipt, errors.New("private text"))
		if err == nil && nv.DeadLettered {
			err = errors.New("dead-lettered on its first delivery")
		}
		return err
	})
	require.Nil(t, panicked, "the logger's panic reached the caller")
	require.NoError(t, err)
	require.True(t, h.logged("unclassified handler failure"), "logged: %v", h)

	d = receive("nacked") // handed back at once, the oldest
	panicked, err = callBounded(t, "Nack", func() error {
		nv, err := b.Nack(ctx(t), d.Lease.Receipt, errors.New("private text"))
		if err == nil && !nv.DeadLettered {
			err = errors.New("not dead-lettered on its last delivery")
		}
		return err
	})
	require.Nil(t, panicked, "the logger's panic reached the caller")
	require.NoError(t, err)

	d = receive("rejected")
	panicked, err = callBounded(t, "Reject", func() error { return b.Reject(ctx(t), d.Lease.Receipt, errors.New("private text")) })
	require.Nil(t, panicked, "the logger's panic reached the caller")
	require.NoError(t, err)

	st := b.Stats()
	require.Equal(t, int64(2), st.Nacked)
	require.Equal(t, int64(1), st.Rejected)
	require.Equal(t, 2, st.DeadLetters)
}

// A checkpoint whose fdatasync fails stops the store, holding the store's
// lock and every queue's: the failure was logged there, so a handler that
// read a queue's Stats waited for ever, and one that panicked left every
// lock held. It is now reported from the goroutine that stops the store,
// holding none; and a handler that panics there ends nothing but its own
// record.
func TestALoggerThatReadsBackOrPanicsWhenACheckpointFails(t *testing.T) {
	for _, mode := range loggerModes {
		t.Run(mode.name, func(t *testing.T) {
			h := &awkwardHandler{panics: mode.panics}
			ffs := vfs.NewFaultFS(vfs.Default)
			e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) {
				o.Logger, o.FS, o.Sync, o.SyncInterval = slog.New(h), ffs, broker.SyncNone, time.Hour
			})
			q := e.queue("jobs", policy())
			if mode.readBack {
				h.readsBack(storeReadBack(e.s, q))
			}
			mustPublish(t, q, "written, not synced")
			ffs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: ".seg"})
			panicked, err := callBounded(t, "Maintain", e.s.Maintain)
			require.Nil(t, panicked, "the logger's panic reached the caller")
			require.Error(t, err, "the checkpoint's fdatasync failed")

			// The store's locks are free: its figures can be read, and its
			// calls refuse, saying to reopen it.
			_, _ = callBounded(t, "Stats", func() error { storeReadBack(e.s, q)(); return nil })
			_, err = callBounded(t, "Publish", func() error { _, err := q.Publish(ctx(t), nil); return err })
			require.ErrorContains(t, err, "reopen")
			// Close waits for the goroutine that reports the failure.
			_, _ = callBounded(t, "Close", func() error { return e.s.Close() })
			e.s = nil
			require.True(t, h.logged("broker: store failed"), "logged: %v", h)
		})
	}
}

// Open logs what recovery found (here a torn tail) before it returns the
// store: a handler that panics there does not fail the Open, nor leave
// the directory locked.
func TestALoggerThatPanicsWhileOpenRecovers(t *testing.T) {
	cfs := vfs.NewCrashFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS = cfs })
	q := e.queue("jobs", policy())
	kept := mustPublish(t, q, "kept")
	mustPublish(t, q, "torn")
	dir := crashClone(t, e, cfs)
	tearLastFrame(t, dir)

	h := &awkwardHandler{panics: true}
	opts := broker.Options{Now: e.clock.Now, SegmentBytes: testSegmentBytes, Logger: slog.New(h)}
	var s *broker.Store
	panicked, err := callBounded(t, "Open", func() (err error) { s, err = broker.Open(dir, opts); return err })
	require.Nil(t, panicked, "the logger's panic reached the caller")
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.Recovery().TornTail)
	require.True(t, h.logged("torn tail"), "logged: %v", h)
	q, err = s.Queue("jobs", policy())
	require.NoError(t, err)
	d := mustReceiveOne(t, q)
	require.Equal(t, kept.ID, d.Message.ID)
	requireNoneReceivable(t, q, "the torn publish is cut off")
}

// tearLastFrame damages the last frame of dir's last segment, as a write
// cut short by a crash leaves it: no later frame says it was synced.
func tearLastFrame(t *testing.T, dir string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	require.NotEmpty(t, segs)
	slices.Sort(segs)
	last := segs[len(segs)-1]
	b, err := os.ReadFile(last)
	require.NoError(t, err)
	end := len(bytes.TrimRight(b, "\x00"))
	require.Positive(t, end)
	b[end-1] ^= 0xFF
	require.NoError(t, os.WriteFile(last, b, 0o600))
}

// Consume logs from its own goroutines: a handler failure before it nacks,
// a refused settle after. A logger that panicked there ended the process;
// one that read the queue's figures must not stall it either. Here the
// handler fails a message once (a nack, logged first), and settles the
// next delivery itself (so that Consume's own Ack is refused, and
// logged): each is settled once, as documented, and Consume goes on.
func TestConsumeWithALoggerThatReadsBackOrPanics(t *testing.T) {
	for _, mode := range loggerModes {
		t.Run("Store/"+mode.name, func(t *testing.T) {
			h := &awkwardHandler{panics: mode.panics}
			e := newEnv(t, func(o *broker.Options) { o.Logger = slog.New(h) })
			q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 0 }))
			if mode.readBack {
				h.readsBack(storeReadBack(e.s, q))
			}
			consumeAwkwardly(t, h, q)
		})
		t.Run("Memory/"+mode.name, func(t *testing.T) {
			h := &awkwardHandler{panics: mode.panics}
			m, err := broker.NewMemory(policy(func(p *broker.PolicyValue) { p.RetryDelay = 0 }), broker.MemoryOptions{Now: newFakeClock().Now, Logger: slog.New(h)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = m.Close() })
			if mode.readBack {
				h.readsBack(func() { m.Stats() })
			}
			consumeAwkwardly(t, h, m)
		})
	}
}

func consumeAwkwardly(t *testing.T, h *awkwardHandler, b fullBroker) {
	msg, err := b.Publish(ctx(t), []byte("m"))
	require.NoError(t, err)
	var deliveries atomic.Int32
	consumeUntil(t, b, func(ctx context.Context, d broker.DeliveryValue) error {
		if deliveries.Add(1) == 1 {
			return errors.New("private text")
		}
		return b.Ack(ctx, d.Lease.Receipt)
	}, broker.ConsumeOptions{Logger: slog.New(h)},
		func() bool { return h.logged("the lease was no longer held") }, "Consume did not settle the delivery; logged: %v", h)
	require.Equal(t, int32(2), deliveries.Load())
	require.True(t, h.logged("handler failed; nacking"), "logged: %v", h)
	st := b.Stats()
	require.Equal(t, int64(1), st.Nacked)
	require.Equal(t, int64(1), st.Acked, "the handler's own Ack")
	require.Zero(t, st.Ready+st.Leased+st.Delayed+st.DeadLetters, "message %s is gone", msg.ID)
}

// The maintenance goroutine logs a checkpoint that failed in the
// background, and Close one that failed at close: a handler that panics
// there ended the process from the maintenance goroutine, and failed a
// Close whose files were closed. Neither happens now, and a handler that
// reads the store's figures there finds its locks free.
func TestALoggerThatReadsBackOrPanicsWhenMaintenanceOrCloseFails(t *testing.T) {
	for _, mode := range loggerModes {
		t.Run("Maintenance/"+mode.name, func(t *testing.T) {
			h := &awkwardHandler{panics: mode.panics}
			ffs := vfs.NewFaultFS(vfs.Default)
			e := newEnv(t, func(o *broker.Options) {
				o.FS, o.SegmentBytes, o.Logger = ffs, broker.MinSegmentBytes, slog.New(h)
			})
			q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 2 << 10 }))
			if mode.readBack {
				h.readsBack(storeReadBack(e.s, q))
			}
			ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: "checkpoint.tmp", Nth: 1})
			payload := strings.Repeat("x", 2<<10)
			deadline := time.Now().Add(30 * time.Second)
			for !h.logged("its directory now grows") {
				require.True(t, time.Now().Before(deadline), "no background checkpoint failed; logged: %v", h)
				mustPublish(t, q, payload)
			}
			require.NotEmpty(t, e.s.Stats().MaintenanceStopped)
			mustPublish(t, q, "the store goes on")
			panicked, err := callBounded(t, "Close", e.s.Close)
			e.s = nil
			require.Nil(t, panicked)
			require.NoError(t, err)
		})
		t.Run("Close/"+mode.name, func(t *testing.T) {
			h := &awkwardHandler{panics: mode.panics}
			ffs := vfs.NewFaultFS(vfs.Default)
			e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS, o.Logger = ffs, slog.New(h) })
			q := e.queue("jobs", policy())
			if mode.readBack {
				h.readsBack(storeReadBack(e.s, q))
			}
			mustPublish(t, q, "one")
			ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: "checkpoint.tmp", Nth: 1})
			panicked, err := callBounded(t, "Close", e.s.Close)
			e.s = nil
			require.Nil(t, panicked, "the logger's panic reached the caller")
			require.NoError(t, err, "the log closed; only the checkpoint failed, and is logged")
			require.True(t, h.logged("checkpoint at close failed"), "logged: %v", h)
		})
	}
}
