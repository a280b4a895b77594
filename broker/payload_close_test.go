package broker

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// A Receive reads its payloads after its wait for the log, holding
// removeMu shared, so Close cannot close the log under it: Close sets
// closed, then waits for removeMu. A payload that fails to read there is
// damage, whether or not Close has set closed meanwhile. It used to be
// reported as Closed when Close had: the damage went unmarked (no
// SUSPECT), so the next Open trusted the checkpoint that vouches for the
// damaged segment and never looked at it, and the caller (Consume) was
// told the store closed rather than that it must be reopened and
// salvaged. Here the Receive's lease is held in its fdatasync (a FaultFS
// hook) while Close sets closed and waits for removeMu; checkpoints have
// stopped (a failed mark), so Close's own does not wait for the log.
func TestDamageReadAsTheStoreClosesIsReportedAsDamage(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	dir := t.TempDir()
	opts := Options{SegmentBytes: 64 << 10, FS: ffs}
	ManualMaintenance(&opts)
	s, err := Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 4 << 10}
	q, err := s.Queue("jobs", pol)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = q.Publish(ctx, []byte("first:"+strings.Repeat("x", 4<<10-6)))
	require.NoError(t, err)
	for range 39 { // 160 KiB: segment 1 is sealed
		_, err = q.Publish(ctx, bytes.Repeat([]byte("y"), 4<<10))
		require.NoError(t, err)
	}
	require.Greater(t, s.Stats().Segments, 2)
	require.NoError(t, s.maintain(true)) // a checkpoint vouches for segment 1

	// Damage inside the first message's payload, under the open store.
	seg := filepath.Join(dir, "0000000001.seg")
	raw, err := os.ReadFile(seg)
	require.NoError(t, err)
	at := bytes.Index(raw, []byte("first:"))
	require.Positive(t, at)
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("damage"), int64(at+100))
	require.NoError(t, err)
	require.NoError(t, f.Close())

	// Checkpoints stop without marking one under way: the checkpoint in
	// place still vouches for segment 1 at the next Open.
	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: "CHECKPOINTING"})
	require.Error(t, s.maintain(true))
	ffs.Clear()
	require.NotEmpty(t, s.Stats().MaintenanceStopped)

	// The next fdatasync of the log (the Receive's lease) waits for
	// release.
	var (
		armed   = make(chan struct{})
		reached = make(chan struct{})
		release = make(chan struct{})
		once    sync.Once
	)
	ffs.OnSync(func(name string) {
		select {
		case <-armed:
		default:
			return
		}
		if filepath.Dir(name) == dir { // the log's active segment, not an index file
			once.Do(func() { close(reached); <-release })
		}
	})
	close(armed)
	received := make(chan error, 1)
	go func() {
		_, err := q.Receive(ctx, 1)
		received <- err
	}()
	select {
	case <-reached:
	case err := <-received:
		t.Fatalf("the Receive returned before its fdatasync: %v", err)
	}

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	require.Eventually(t, func() bool { return blockedIn("broker.(*Store).close(", "[sync.RWMutex.Lock") }, eventually, tick,
		"Close sets closed, then waits for the Receive to read its payloads")
	require.True(t, s.closed.Load())
	close(release)

	select {
	case err := <-received:
		require.ErrorIs(t, err, Corrupt, "the damage read is reported as damage, not as the close")
		require.NotErrorIs(t, err, Closed)
		require.Contains(t, err.Error(), "0000000001.seg")
	case <-time.After(eventually):
		t.Fatal("the Receive did not return")
	}
	select {
	case err := <-closed:
		require.NoError(t, err, "a store stopped by damage closes without error")
	case <-time.After(eventually):
		t.Fatal("Close did not return")
	}

	// The damage was marked: the next Open scans the whole log.
	_, err = Open(dir, Options{SegmentBytes: 64 << 10})
	require.ErrorIs(t, err, Corrupt)
	require.Contains(t, err.Error(), "0000000001.seg")
}

// blockedIn reports whether a goroutine running fn (as a stack names it)
// is blocked with the wait reason that starts with reason ("[sync.Mutex.Lock",
// "[sync.RWMutex.Lock", "[sync.RWMutex.RLock", ...).
func blockedIn(fn, reason string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, reason) && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}
