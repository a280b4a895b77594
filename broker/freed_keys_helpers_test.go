package broker_test

import (
	"bytes"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// watchedKey returns dedup key number i: 256 bytes of its own allocation,
// whose collection adds one to freed.
func watchedKey(i int, freed *atomic.Int64) string {
	key := string(append(bytes.Repeat([]byte{'k'}, 240), fmt.Sprintf("%016d", i)...))
	runtime.SetFinalizer(unsafe.StringData(key), func(*byte) { freed.Add(1) })
	return key
}

// requireKeysFreed collects garbage until all but one of the n watched
// keys were freed, and fails the test if they are not: the queue that
// evicted them still holds them.
func requireKeysFreed(t *testing.T, freed *atomic.Int64, n int) {
	t.Helper()
	for range 20 {
		runtime.GC()
		if freed.Load() >= int64(n-1) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("after the keyed publish that evicted all %d keys (their messages acked), %d of them were freed; want at least %d: the evicted keys are still held", n, freed.Load(), n-1)
}
