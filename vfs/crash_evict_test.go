package vfs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// After a failed fdatasync the failed pages are clean, and the kernel may
// evict them: EvictFailedWrites makes every page of the file not written
// again since the failure read as the device holds it (its durable bytes,
// zeros past the durable end), keeps the page written again as the page
// cache holds it, and changes nothing a crash leaves. Without it, every
// read for the rest of the boot saw the failed writes.
func TestEvictFailedWritesShowsTheDevicesBytesInEveryCleanPage(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	c := NewCrashFS(ffs)
	name := filepath.Join(dir, "seg")
	f := durableFile(t, c, name, strings.Repeat("o", 2*crashBlockSize))
	defer f.Close()
	other := durableFile(t, c, filepath.Join(dir, "other"), "synced")
	defer other.Close()
	writeAt(t, other, "unsynced", 0) // no fdatasync of it failed: not evictable
	writeAt(t, f, strings.Repeat("x", 4*crashBlockSize), 0)
	ffs.Inject(Rule{Op: OpSync, Times: 1})
	require.Error(t, f.Sync())
	writeAt(t, f, "y", crashBlockSize+10) // the second page is dirty again
	before := map[string]map[string]string{"none": cloneTree(t, c, keepNone), "all": cloneTree(t, c, keepAll)}

	require.NoError(t, c.EvictFailedWrites())
	got := make([]byte, 4*crashBlockSize)
	_, err := f.ReadAt(got, 0)
	require.NoError(t, err)
	want := strings.Repeat("o", crashBlockSize) + // evicted: durable
		strings.Repeat("x", 10) + "y" + strings.Repeat("x", crashBlockSize-11) + // dirty: as written
		strings.Repeat("\x00", 2*crashBlockSize) // evicted, past the durable end
	require.Equal(t, want, string(got))
	got = make([]byte, 8)
	_, err = other.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, "unsynced", string(got), "a file whose fdatasync never failed keeps its pages")
	require.Equal(t, before, map[string]map[string]string{"none": cloneTree(t, c, keepNone), "all": cloneTree(t, c, keepAll)},
		"an eviction changes nothing a power loss leaves")

	// A page written after the eviction is read from the device first:
	// what it holds then goes to the device with the next fdatasync.
	writeAt(t, f, "z", 5)
	require.NoError(t, f.Sync())
	require.Equal(t, "ooooozoo", cloneTree(t, c, keepNone)["seg"][:8])
	require.Equal(t, want[crashBlockSize:2*crashBlockSize], cloneTree(t, c, keepNone)["seg"][crashBlockSize:2*crashBlockSize])
}
