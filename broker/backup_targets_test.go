package broker_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// Backup's doc: "ctx is checked between files", the index's as well as
// the log's segments. A Backup canceled once the first index file (the
// checkpoint) is copied opens no other (a table file is 2 MiB, one per
// 65,536 messages) and fails with ctx's error; index.CopyCheckpoint used
// to copy every table file before Backup noticed.
func TestABackupCanceledWhileItCopiesTheIndexCopiesNoMoreFiles(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS = ffs })
	mustPublish(t, e.queue("jobs", keyedJobs), "one")
	dst := filepath.Join(t.TempDir(), "b")
	idx := filepath.Join(dst+".partial", "index")
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	var canceled atomic.Bool
	var after []string
	ffs.Observe(func(ev vfs.Event) {
		if filepath.Dir(ev.Name) != idx {
			return
		}
		if canceled.Load() && ev.Op == vfs.OpOpen {
			after = append(after, filepath.Base(ev.Name))
		}
		if ev.Op == vfs.OpSync && canceled.CompareAndSwap(false, true) {
			cancel() // the first index file is copied
		}
	})
	err := e.s.Backup(c, dst)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, after, "index files copied after ctx was canceled")
}
