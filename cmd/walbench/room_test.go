package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/walbroker/walbroker/broker"
)

// TestStoreBytesCoversTheStore fills stores as a drain's prefill does,
// then drains them, and compares what each takes on disk, as
// broker.StoreStats says to plan for it (DiskBytes + IndexBytes + 3
// segments), after the fill and after the drain, with storeBytes, by
// which the free space of -dir is checked: it must not be less. Small
// segments hold few batches of the fill, and waste a share of each; the
// index table grows by whole chunks; the drain's leases and acks take
// room until the segments they settle are removed.
func TestStoreBytesCoversTheStore(t *testing.T) {
	for _, tc := range []struct {
		messages, size int
		seg            int64
	}{
		{2000, 1024, 16 << 10},
		{5000, 1, 16 << 10},
		{5000, 100, 64 << 10},
		{5000, 1024, 1 << 20},
		{300, 16 << 10, 1 << 20},
	} {
		est, ok := storeBytes(tc.messages, tc.size, tc.seg)
		if !ok {
			t.Fatalf("storeBytes(%d, %d, %d): overflow", tc.messages, tc.size, tc.seg)
		}
		s, err := broker.Open(benchDir(t), broker.Options{Sync: broker.SyncAll, SegmentBytes: tc.seg})
		if err != nil {
			t.Fatal(err)
		}
		q, err := s.Queue(benchQueue, queuePolicy(storeOptions{sync: broker.SyncAll, segmentBytes: tc.seg, size: tc.size}))
		if err != nil {
			t.Fatal(err)
		}
		plan := func(when string) {
			st := s.Stats()
			if n := st.DiskBytes + st.IndexBytes + 3*tc.seg; n > est {
				t.Errorf("%d messages of %d B in %d-byte segments, %s: the store takes %d bytes (DiskBytes %d, IndexBytes %d, 3 segments), storeBytes says %d",
					tc.messages, tc.size, tc.seg, when, n, st.DiskBytes, st.IndexBytes, est)
			}
		}
		if err := fillQueue(context.Background(), q, tc.messages, tc.size, nil); err != nil {
			t.Fatal(err)
		}
		plan("after the fill")
		var handled atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		err = broker.Consume(ctx, q, func(context.Context, broker.DeliveryValue) error {
			if handled.Add(1) == int64(tc.messages) {
				cancel()
			}
			return nil
		}, broker.ConsumeOptions{Batch: 64, Concurrency: 8})
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		plan("after the drain")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
