package broker_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// Published counts each message once, whether its publish or a
// checkpoint's commit of it (commitInflightLocked) counted it, under
// publishes racing with checkpoints; and Close's frozen figure agrees.
func TestPublishedCountsEachPublishOnceUnderCheckpoints(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncNone, broker.SyncAll} {
		opts := broker.Options{Sync: mode}
		broker.ManualMaintenance(&opts)
		s, err := broker.Open(t.TempDir(), opts)
		if err != nil {
			t.Fatal(err)
		}
		q, err := s.Queue("a", broker.PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Minute, MaxMessageBytes: 64})
		if err != nil {
			t.Fatal(err)
		}
		const workers, each = 4, 150
		var ok atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := s.Maintain(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if _, err := q.Publish(t.Context(), []byte(fmt.Sprintf("%d-%d", w, i))); err == nil {
						ok.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-done
		if got := q.Stats().Published; got != ok.Load() {
			t.Errorf("%v: Published = %d after %d successful publishes racing with checkpoints", mode, got, ok.Load())
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := q.Stats().Published; got != ok.Load() {
			t.Errorf("%v: after Close, Published = %d, want %d", mode, got, ok.Load())
		}
	}
}
