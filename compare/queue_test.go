package compare_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/compare"
	"github.com/walbroker/walbroker/compare/boltq"
	"github.com/walbroker/walbroker/compare/pebbleq"
)

// clock is an injected clock that moves only when a test moves it.
type clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func newClock() *clock { return &clock{now: time.Unix(1_800_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const testLease = 30 * time.Second

// opener opens the queue stored in dir on clock c.
type opener func(t testing.TB, dir string, c *clock) compare.Queue

var queues = []struct {
	name string
	open opener
}{
	{"pebble", func(t testing.TB, dir string, c *clock) compare.Queue {
		q, err := pebbleq.Open(dir, pebbleq.Options{Now: c.Now, Lease: testLease})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}},
	{"bolt", func(t testing.TB, dir string, c *clock) compare.Queue {
		// No batching delay: the tests' producers are few, and waiting
		// 10 ms for more of them would only make the tests slow. The
		// benchmark keeps bbolt's default.
		q, err := boltq.Open(dir, boltq.Options{Now: c.Now, Lease: testLease, MaxBatchDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}},
}

// TestExactlyOnce publishes from several goroutines, single messages and
// batches, while consumers drain the queue, and checks that every message
// is received once, under the ID its publish returned, with its payload.
func TestExactlyOnce(t *testing.T) {
	const producers, perProducer, consumers = 8, 60, 6
	for _, qt := range queues {
		t.Run(qt.name, func(t *testing.T) {
			ctx := context.Background()
			q := qt.open(t, t.TempDir(), newClock())
			defer q.Close()

			var mu sync.Mutex // guards published and received
			published := make(map[uint64]string)
			received := make(map[uint64]string)
			record := func(m map[uint64]string, id uint64, payload string) error {
				mu.Lock()
				defer mu.Unlock()
				if old, ok := m[id]; ok {
					return fmt.Errorf("ID %d twice: %q and %q", id, old, payload)
				}
				m[id] = payload
				return nil
			}

			var producing, consuming sync.WaitGroup
			errs := make(chan error, producers+consumers)
			for p := range producers {
				producing.Go(func() {
					for i := 0; i < perProducer; {
						if i%3 == 0 {
							// Every third round publishes a batch of two.
							payloads := [][]byte{[]byte(fmt.Sprintf("p%d-%d", p, i)), []byte(fmt.Sprintf("p%d-%d", p, i+1))}
							ids, err := q.PublishBatch(ctx, payloads)
							if err == nil && len(ids) != 2 {
								err = fmt.Errorf("PublishBatch of 2 returned %d IDs", len(ids))
							}
							for j := 0; err == nil && j < 2; j++ {
								err = record(published, ids[j], string(payloads[j]))
							}
							if err != nil {
								errs <- err
								return
							}
							i += 2
							continue
						}
						payload := fmt.Sprintf("p%d-%d", p, i)
						id, err := q.Publish(ctx, []byte(payload))
						if err == nil {
							err = record(published, id, payload)
						}
						if err != nil {
							errs <- err
							return
						}
						i++
					}
				})
			}
			done := make(chan struct{})
			for range consumers {
				consuming.Go(func() {
					for {
						// Read before the Receive: when publishing had
						// ended before it began and it finds nothing,
						// nothing is left to claim.
						var finished bool
						select {
						case <-done:
							finished = true
						default:
						}
						msgs, err := q.Receive(ctx, 16)
						if err != nil {
							errs <- err
							return
						}
						if len(msgs) == 0 {
							if finished {
								return
							}
							runtime.Gosched()
							continue
						}
						ids := make([]uint64, len(msgs))
						for i, m := range msgs {
							ids[i] = m.ID
							if err := record(received, m.ID, string(m.Payload)); err != nil {
								errs <- err
								return
							}
						}
						if err := q.Ack(ctx, ids); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			producing.Wait()
			close(done)
			consuming.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if len(published) != producers*perProducer {
				t.Fatalf("published %d messages, want %d", len(published), producers*perProducer)
			}
			if len(received) != len(published) {
				t.Errorf("received %d messages, published %d", len(received), len(published))
			}
			for id, payload := range published {
				if got, ok := received[id]; !ok {
					t.Errorf("message %d (%q) never received", id, payload)
				} else if got != payload {
					t.Errorf("message %d: received %q, published %q", id, got, payload)
				}
			}
			if msgs, err := q.Receive(ctx, 1); err != nil || len(msgs) != 0 {
				t.Errorf("Receive on the drained queue = %v, %v; want nothing", msgs, err)
			}
		})
	}
}

// TestLeaseAcrossReopen checks what a reopen keeps: an acknowledged
// message never comes back, a leased one stays hidden until its lease
// lapses and is then received again, with its payload, oldest first.
func TestLeaseAcrossReopen(t *testing.T) {
	for _, qt := range queues {
		t.Run(qt.name, func(t *testing.T) {
			ctx := context.Background()
			dir, c := t.TempDir(), newClock()
			q := qt.open(t, dir, c)
			ids := make([]uint64, 4)
			for i := range ids {
				id, err := q.Publish(ctx, []byte("m"+strconv.Itoa(i)))
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = id
			}
			msgs := mustReceive(t, q, 2, ids[0], ids[1])
			if err := q.Ack(ctx, []uint64{msgs[0].ID}); err != nil {
				t.Fatal(err)
			}
			mustClose(t, q)

			// Reopened within the lease: m1 is still leased, m0 is gone.
			c.Advance(testLease - time.Second)
			q = qt.open(t, dir, c)
			mustReceive(t, q, 1, ids[2])
			mustClose(t, q)

			// Reopened after m1's lease lapsed (and before m2's): m1
			// comes back first, then m3; m0 never does.
			c.Advance(2 * time.Second)
			q = qt.open(t, dir, c)
			got := mustReceive(t, q, 10, ids[1], ids[3])
			if string(got[0].Payload) != "m1" || string(got[1].Payload) != "m3" {
				t.Errorf("payloads %q, %q; want m1, m3", got[0].Payload, got[1].Payload)
			}
			if err := q.Ack(ctx, []uint64{ids[1], ids[3]}); err != nil {
				t.Fatal(err)
			}
			mustClose(t, q)

			// Only m2 is left, and its lease lapses without a reopen too.
			q = qt.open(t, dir, c)
			defer q.Close()
			mustReceive(t, q, 10)
			c.Advance(testLease)
			mustReceive(t, q, 10, ids[2])
			if err := q.Ack(ctx, []uint64{ids[2]}); err != nil {
				t.Fatal(err)
			}
			mustReceive(t, q, 10)
		})
	}
}

// TestAckRefusals checks that an Ack naming a message that is not leased
// now is refused whole and removes nothing.
func TestAckRefusals(t *testing.T) {
	for _, qt := range queues {
		t.Run(qt.name, func(t *testing.T) {
			ctx := context.Background()
			dir, c := t.TempDir(), newClock()
			q := qt.open(t, dir, c)
			ids, err := q.PublishBatch(ctx, [][]byte{[]byte("a"), []byte("b"), []byte("c")})
			if err != nil {
				t.Fatal(err)
			}
			mustReceive(t, q, 2, ids[0], ids[1])
			for _, bad := range [][]uint64{
				{ids[0], ids[2]},         // ids[2] was never received
				{ids[0], ids[0]},         // the same message twice
				{ids[1], ids[2] + 1_000}, // never published
			} {
				if err := q.Ack(ctx, bad); !errors.Is(err, compare.ErrNotLeased) {
					t.Errorf("Ack(%v) = %v, want ErrNotLeased", bad, err)
				}
			}
			c.Advance(testLease)
			if err := q.Ack(ctx, ids[:1]); !errors.Is(err, compare.ErrNotLeased) {
				t.Errorf("Ack after the lease lapsed = %v, want ErrNotLeased", err)
			}
			// Nothing was removed: all three come back.
			mustReceive(t, q, 10, ids...)
			if _, err := q.Receive(ctx, 0); !errors.Is(err, compare.ErrInvalidMax) {
				t.Errorf("Receive(0) = %v, want ErrInvalidMax", err)
			}
			mustClose(t, q)
			if _, err := q.Publish(ctx, []byte("d")); !errors.Is(err, compare.ErrClosed) {
				t.Errorf("Publish after Close = %v, want ErrClosed", err)
			}
			if _, err := q.Receive(ctx, 1); !errors.Is(err, compare.ErrClosed) {
				t.Errorf("Receive after Close = %v, want ErrClosed", err)
			}
		})
	}
}

// TestOpenCreatesDirectory checks that Open creates a missing directory,
// its parents with it, and that the queue stored there opens again.
func TestOpenCreatesDirectory(t *testing.T) {
	for _, qt := range queues {
		t.Run(qt.name, func(t *testing.T) {
			dir, c := filepath.Join(t.TempDir(), "a", "b"), newClock()
			q := qt.open(t, dir, c)
			id, err := q.Publish(context.Background(), []byte("m"))
			if err != nil {
				t.Fatal(err)
			}
			mustClose(t, q)
			q = qt.open(t, dir, c)
			defer q.Close()
			mustReceive(t, q, 10, id)
		})
	}
}

// TestNilContextRefused checks that every call refuses a nil context with
// an error naming it, rather than panicking, and stores nothing.
func TestNilContextRefused(t *testing.T) {
	for _, qt := range queues {
		t.Run(qt.name, func(t *testing.T) {
			q := qt.open(t, t.TempDir(), newClock())
			defer q.Close()
			var nilCtx context.Context // a variable, not a literal nil, which vet tools flag
			calls := map[string]func() error{
				"Publish": func() error { _, err := q.Publish(nilCtx, []byte("a")); return err },
				"PublishBatch": func() error {
					_, err := q.PublishBatch(nilCtx, [][]byte{[]byte("a")})
					return err
				},
				"Receive": func() error { _, err := q.Receive(nilCtx, 1); return err },
				"Ack":     func() error { return q.Ack(nilCtx, []uint64{1}) },
			}
			for name, call := range calls {
				if err := call(); err == nil || !strings.Contains(err.Error(), "nil context") {
					t.Errorf("%s(nil context) = %v; want an error naming the nil context", name, err)
				}
			}
			mustReceive(t, q, 10)
		})
	}
}

// mustReceive receives up to max messages and fails the test unless their
// IDs are want, in that order.
func mustReceive(t *testing.T, q compare.Queue, max int, want ...uint64) []compare.Message {
	t.Helper()
	msgs, err := q.Receive(context.Background(), max)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]uint64, len(msgs))
	for i, m := range msgs {
		got[i] = m.ID
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Receive(%d) returned IDs %v, want %v", max, got, want)
	}
	return msgs
}

func mustClose(t *testing.T, q compare.Queue) {
	t.Helper()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}
