package broker_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// A call whose ctx has ended when it begins returns ctx's error itself,
// not wrapped: every call of a Queue, of Memory, Store.Backup, and
// Consume (API.md §3: it "returns ctx.Err()"). A context's error is not
// one of the broker's sentinels, which a returned error wraps with
// context; the caller compares it with errors.Is, or with ==, and it
// means that nothing was done. The one error the broker wraps is a ctx
// that ends part way through a Backup (see DESIGN.md "Backups").
func TestACallWhoseContextHasEndedReturnsItsErrorAsItIs(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", policy())
	mem := e.memory()
	canceled, cancel := context.WithCancel(ctx(t))
	cancel()
	expired, cancelExpired := context.WithDeadline(ctx(t), time.Unix(0, 0))
	defer cancelExpired()
	for _, ended := range []context.Context{canceled, expired} {
		want := ended.Err()
		dst := filepath.Join(t.TempDir(), "backup")
		for name, call := range map[string]func() error{
			"Queue.Publish":  func() error { _, err := q.Publish(ended, []byte("x")); return err },
			"Memory.Publish": func() error { _, err := mem.Publish(ended, []byte("x")); return err },
			"Store.Backup":   func() error { return e.s.Backup(ended, dst) },
			"Consume": func() error {
				return broker.Consume(ended, q, func(context.Context, broker.DeliveryValue) error { return nil }, broker.ConsumeOptions{})
			},
		} {
			require.True(t, call() == want, "%s with %v", name, want)
		}
		require.NoDirExists(t, dst)
	}
}
