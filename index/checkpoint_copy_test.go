package index

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// CopyCheckpoint checks ctx before each file it copies: canceled after the
// first, it copies no other (a table file is 2 MiB, one per 65,536
// messages, and a Backup canceled while it copies the index used to copy
// them all before it noticed). A nil ctx is refused, naming both
// directories, and an uncanceled one copies every file.
func TestCopyCheckpointChecksItsContextBeforeEachFile(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	defer x.Table.Close()
	require.NoError(t, x.Apply(0, &Event{Kind: KindMeta, Secret: make([]byte, SecretSize)}))
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 2}}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 32), &Event{Kind: KindPublish, Queue: 1, Seq: 1, Time: 1}))
	checkpointAt(t, x, dir, wal.MakePosition(1, 64))
	ffs := vfs.NewFaultFS(vfs.Default)

	dst := t.TempDir()
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	var opened []string
	ffs.Observe(func(ev vfs.Event) {
		if filepath.Dir(ev.Name) != dst || ev.Op != vfs.OpOpen {
			return
		}
		opened = append(opened, filepath.Base(ev.Name))
		cancel() // the first file is being copied
	})
	err = CopyCheckpoint(c, ffs, dir, dst)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, opened, 1, "files copied after ctx was canceled: %v", opened)

	var nilCtx context.Context // what is refused
	err = CopyCheckpoint(nilCtx, ffs, dir, dst)
	require.ErrorIs(t, err, os.ErrInvalid)
	require.ErrorContains(t, err, "nil context")
	require.ErrorContains(t, err, dir)

	whole := t.TempDir()
	require.NoError(t, CopyCheckpoint(context.Background(), vfs.Default, dir, whole))
	names, err := vfs.Default.ReadDir(whole)
	require.NoError(t, err)
	src, err := vfs.Default.ReadDir(dir)
	require.NoError(t, err)
	require.Contains(t, names, checkpointName)
	require.Greater(t, len(names), 1, "the table files are copied too: %v of %v", names, src)
}
