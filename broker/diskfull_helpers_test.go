package broker_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/brokertest"
	"github.com/walbroker/walbroker/vfs"
)

// diskFullPolicy is the queue of the full-disk tests: five deliveries, so that
// no lease lapse dead-letters a message while the tests move the clock.
var diskFullPolicy = broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5, RetryDelay: time.Second, MaxMessageBytes: 2048}

// diskFullOptions are the options of a store on ffs, with small segments so
// that a few kilobytes of traffic rotate.
func diskFullOptions(ffs vfs.FS, clock *brokertest.Clock) broker.Options {
	return broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, FS: ffs}
}

// diskFullOpen opens the store in dir with opts and returns it with its
// queue "jobs", declared with diskFullPolicy (the store is closed if the
// queue is refused).
func diskFullOpen(t *testing.T, dir string, opts broker.Options) (*broker.Store, *broker.Queue) {
	t.Helper()
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("jobs", diskFullPolicy)
	if err != nil {
		_ = s.Close()
	}
	require.NoError(t, err)
	return s, q
}

// diskFullFill makes the disk under ffs full: every write, allocation and
// truncation fails with ENOSPC, writing nothing.
func diskFullFill(ffs *vfs.FaultFS) {
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpAllocate, vfs.OpTruncate} {
		ffs.Inject(vfs.Rule{Op: op, Err: syscall.ENOSPC})
	}
}

// diskFullRequireFull checks that err is what a call on a full disk returns:
// it wraps ENOSPC, says to free space, and is the error the store now
// reports.
func diskFullRequireFull(t *testing.T, s *broker.Store, err error, call string) {
	t.Helper()
	require.Error(t, err, "%s on a full disk", call)
	require.ErrorIs(t, err, syscall.ENOSPC, "%s on a full disk: %v", call, err)
	require.Contains(t, err.Error(), "free space", "%s on a full disk", call)
	require.Error(t, s.Err(), "%s on a full disk stopped the store", call)
	require.ErrorIs(t, s.Err(), syscall.ENOSPC)
}

// diskFullMessage is what a reopened store holds of one message.
type diskFullMessage struct {
	State      string // ready, dead
	Deliveries int
	Payload    string
}

// diskFullContents returns every message the store's queue holds, by ID: the
// dead letters, then, with the clock moved past every lease and retry
// delay, every message Receive hands out. It consumes the store (its
// leases), so it ends a test's use of it.
func diskFullContents(t *testing.T, clock *brokertest.Clock, q *broker.Queue) map[string]diskFullMessage {
	t.Helper()
	ctx := context.Background()
	out := map[string]diskFullMessage{}
	dls, err := q.DeadLetters(ctx, 1000)
	require.NoError(t, err)
	for _, d := range dls {
		out[d.Message.ID] = diskFullMessage{State: "dead", Deliveries: d.Deliveries, Payload: string(d.Message.Payload)}
	}
	clock.Advance(time.Hour)
	ds, err := q.Receive(ctx, 1000)
	require.NoError(t, err)
	for _, d := range ds {
		_, dup := out[d.Message.ID]
		require.False(t, dup, "message %s handed out twice", d.Message.ID)
		// Deliveries counts this Receive: the count before it is one less.
		out[d.Message.ID] = diskFullMessage{State: "ready", Deliveries: d.Deliveries - 1, Payload: string(d.Message.Payload)}
	}
	return out
}

// diskFullDescribe renders contents for a failure message.
func diskFullDescribe(m map[string]diskFullMessage) string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s=%+v ", id, m[id])
	}
	return b.String()
}
