package broker_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// API.md §2, SyncNone: "nothing waits for the device; a background commit
// every SyncInterval (default 100 ms) bounds what a power loss can take."
// The other SyncNone tests name their interval; this one leaves Options at
// its zero value, publishes once and then makes no call at all, and
// requires the message to reach the device by itself. The deadline is
// thirty default intervals, not one: a busy machine may be slow to run the
// background fdatasync, and what this guards is that the zero Options has
// a background commit at all, on the order of the default.
func TestUnderSyncNoneTheDefaultBackgroundCommitPutsAReturnedPublishOnTheDevice(t *testing.T) {
	cfs := vfs.NewCrashFS(vfs.Default)
	e := newEnv(t, func(o *broker.Options) { o.FS = cfs; o.Sync = broker.SyncNone; o.SyncInterval = 0 })
	m := mustPublish(t, e.queue("jobs", policy()), "a")
	published := time.Now()

	const bound = 3 * time.Second
	for try := 0; ; try++ {
		time.Sleep(50 * time.Millisecond)
		clone := filepath.Join(t.TempDir(), fmt.Sprint("clone-", try))
		require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: e.dir})) // every unsynced byte is lost
		c := openEnvAt(t, clone)
		ds := mustReceive(t, c.queue("jobs", policy()), 10)
		c.close()
		if len(ds) == 1 {
			require.Equal(t, m.ID, ds[0].Message.ID)
			return
		}
		if waited := time.Since(published); waited > bound {
			t.Fatalf("the publish was not on the device %v after it returned, with no call since: no background commit within the default SyncInterval", waited)
		}
	}
}
