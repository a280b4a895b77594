package recovery_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// TestSyncPublishSettlesReachTheDeviceWithinTheInterval: under SyncPublish
// every event other than a publish "reaches the device with the next
// commit, or within SyncInterval" (broker.SyncPublish). Here no publish
// follows the acks, so only the background fdatasync can take them to the
// device: a few intervals after the last ack returned, a clone of what the
// device holds (synced bytes only) has none of the acked messages. (The
// crash workloads always publish again after a settle, and that publish's
// fdatasync covers it; TestSyncNoneLosesOnlyTheLastInterval checks the
// interval under SyncNone only.)
//
// The background fdatasync runs on the real clock, so the test waits for
// it; a slow machine only makes it look again, up to 2.5 s.
func TestSyncPublishSettlesReachTheDeviceWithinTheInterval(t *testing.T) {
	const interval = 5 * time.Millisecond
	root := fastDir(t)
	dir := filepath.Join(root, "store")
	cfs := vfs.NewCrashFS(vfs.Default)
	c := newClock(t0)
	s, q := openQueue(t, dir, broker.Options{Now: c.Now, Sync: broker.SyncPublish, SyncInterval: interval, SegmentBytes: broker.MinSegmentBytes, FS: cfs}, "orders")
	defer func() { _ = s.Close() }()
	for i := range 20 {
		if _, err := q.Publish(bg(), []byte(payloadOf("orders", i, 0)+strings.Repeat("n", 100))); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := q.Receive(bg(), 20)
	if err != nil || len(ds) != 20 {
		t.Fatalf("Receive: %d deliveries, %v; want 20", len(ds), err)
	}
	acked := map[string]bool{}
	for _, d := range ds {
		if err := q.Ack(bg(), d.Lease.Receipt); err != nil {
			t.Fatal(err)
		}
		acked[d.Message.ID] = true
	}
	back := afterIntervals(t, cfs, root, dir, interval, c.Now().Add(checkDelay), func(obs *observation) (back []string) {
		for _, id := range sortedKeys(obs.msgs) {
			if acked[id] {
				back = append(back, id)
			}
		}
		return back
	})
	if len(back) == 0 {
		return
	}
	t.Errorf("%d of %d messages acked %v and more before the power failed are back after it (SyncPublish, SyncInterval %v): their acks never reached the device: %v",
		len(back), len(acked), 50*10*interval, interval, back)
}
