package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// cloneTree crash-clones c into a fresh directory and returns its files,
// by relative name.
func cloneTree(t *testing.T, c *CrashFS, opts CrashOptions) map[string]string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, c.CrashClone(dst, opts))
	return readTree(t, dst)
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	files := make(map[string]string)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		rel, _ := filepath.Rel(root, path)
		files[rel] = string(data)
		return err
	})
	require.NoError(t, err)
	return files
}

func writeAt(t *testing.T, f File, s string, off int64) {
	t.Helper()
	n, err := f.WriteAt([]byte(s), off)
	require.NoError(t, err)
	require.Equal(t, len(s), n)
}

// durableFile creates name through c with content, synced, its name
// synced too, and returns it open.
func durableFile(t *testing.T, c *CrashFS, name, content string) File {
	t.Helper()
	f := openRW(t, c, name)
	writeAt(t, f, content, 0)
	require.NoError(t, f.Sync())
	require.NoError(t, c.SyncDir(filepath.Dir(name)))
	return f
}

var (
	keepNone = CrashOptions{}
	keepAll  = CrashOptions{KeepUnsyncedFraction: 1}
)

func TestCrashFSSyncedDataSurvivesUnsyncedDoesNot(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), "synced")
	writeAt(t, f, "SY", 0)       // overwrites synced bytes
	writeAt(t, f, "+tail", 6)    // extends the file
	writeAt(t, f, "-more-", 100) // leaves a hole

	require.Equal(t, map[string]string{"seg": "synced"}, cloneTree(t, c, keepNone))
	current, err := os.ReadFile(filepath.Join(dir, "seg"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"seg": string(current)}, cloneTree(t, c, keepAll))

	require.NoError(t, f.Sync())
	require.Equal(t, map[string]string{"seg": string(current)}, cloneTree(t, c, keepNone))
}

// TestCrashFSAllocateIsAnUnsyncedZeroWrite: an allocated range past the
// end reads as zeros at once (bytes before the end stay), is lost by a
// crash before the fdatasync that covers it, and kept by one after.
func TestCrashFSAllocateIsAnUnsyncedZeroWrite(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), "synced")
	a, ok := f.(Allocator)
	require.True(t, ok, "a CrashFS file is no Allocator")
	require.NoError(t, a.Allocate(4, 3<<20))
	want := "synced" + strings.Repeat("\x00", 3<<20-2)
	size, err := f.Size()
	require.NoError(t, err)
	require.Equal(t, int64(len(want)), size)

	require.Equal(t, map[string]string{"seg": "synced"}, cloneTree(t, c, keepNone))
	require.Equal(t, map[string]string{"seg": want}, cloneTree(t, c, keepAll))
	require.NoError(t, f.Sync())
	require.Equal(t, map[string]string{"seg": want}, cloneTree(t, c, keepNone))
}

func TestCrashFSHolesAtBlockGranularity(t *testing.T) {
	const seed = 42
	dir := t.TempDir()
	c := NewCrashFS(Default)
	base := strings.Repeat("a", 6000)
	f := durableFile(t, c, filepath.Join(dir, "seg"), base)
	// One unaligned write over synced bytes and past the end: its pieces
	// are [1000,4096) [4096,8192) [8192,12000) ... [28672,30000).
	const off, end = 1000, 30000
	data := bytes.Repeat([]byte("b"), end-off)
	_, err := f.WriteAt(data, off)
	require.NoError(t, err)

	clone := func() string {
		return cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, Rand: newRand(seed)})["seg"]
	}
	got := clone()
	require.Equal(t, got, clone(), "a fixed seed gives a fixed clone")

	var kept, dropped int
	for start := int64(off); start < end; {
		stop := min((start/4096+1)*4096, end)
		if start >= int64(len(got)) {
			dropped++ // past the end: dropped, and so are the rest
			start = stop
			continue
		}
		piece := got[start:min(stop, int64(len(got)))]
		switch {
		case piece == strings.Repeat("b", len(piece)) && int64(len(got)) >= stop:
			kept++
		case start < 6000 && piece == base[start:min(stop, 6000)]:
			dropped++ // the synced content shows through
		case start >= 6000 && piece == strings.Repeat("\x00", len(piece)):
			dropped++ // a hole in the extension
		default:
			t.Fatalf("block at %d is neither all written nor all previous: %q", start, piece)
		}
		start = stop
	}
	require.Positive(t, kept)
	require.Positive(t, dropped)
	require.Equal(t, base[:off], got[:off], "bytes before the write are untouched")
	require.True(t, len(got) == 6000 || len(got) == end || len(got)%4096 == 0,
		"the file ends at its synced size, a block boundary or where the write ended: %d", len(got))
}

func TestCrashFSUnsyncedWritesComeBackReordered(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), "0000")
	writeAt(t, f, "1111", 0)
	writeAt(t, f, "2222", 0)
	seen := make(map[string]bool)
	for seed := range uint64(64) {
		seen[cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, Rand: newRand(seed)})["seg"]] = true
	}
	require.Equal(t, map[string]bool{"0000": true, "1111": true, "2222": true}, seen,
		"the older write alone can survive the newer one")
}

func TestCrashFSTearLastWrite(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), "head:")
	writeAt(t, f, "first;", 5)
	last := strings.Repeat("L", 100)
	writeAt(t, f, last, 11)
	lengths := make(map[int]bool)
	for seed := range uint64(20) {
		got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 1, TearLastWrite: true, Rand: newRand(seed)})["seg"]
		require.True(t, strings.HasPrefix(got, "head:first;"), got)
		tail := got[len("head:first;"):]
		require.Equal(t, strings.Repeat("L", len(tail)), tail)
		require.Less(t, len(tail), len(last), "a torn write never lands whole")
		lengths[len(tail)] = true
	}
	require.Greater(t, len(lengths), 5, "the tear point is random")
}

// TestCrashFSTearLastWriteTearsAWriteATruncateFollowed: the last write is
// torn even when an unsynced Truncate came after it.
func TestCrashFSTearLastWriteTearsAWriteATruncateFollowed(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), "head:")
	last := strings.Repeat("L", 100)
	writeAt(t, f, last, 5)
	require.NoError(t, f.Truncate(200))
	for seed := range uint64(20) {
		got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 1, TearLastWrite: true, Rand: newRand(seed)})["seg"]
		require.Len(t, got, 200, "seed %d", seed)
		kept := strings.TrimRight(got[len("head:"):], "\x00")
		require.Equal(t, strings.Repeat("L", len(kept)), kept, "seed %d", seed)
		require.Less(t, len(kept), len(last), "seed %d: a torn write never lands whole", seed)
	}
}

// TestCrashFSTearLastWriteNeedsNoRandWhenNothingUnsyncedIsKept: keeping no
// unsynced byte leaves nothing to tear, so no Rand is drawn from.
func TestCrashFSTearLastWriteNeedsNoRandWhenNothingUnsyncedIsKept(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), "head:")
	writeAt(t, f, "unsynced", 5)
	require.Equal(t, map[string]string{"seg": "head:"}, cloneTree(t, c, CrashOptions{TearLastWrite: true}))
}

// TestCrashFSAShortWriteIsUnsyncedLikeAnyOther: the bytes a failed write
// did put in the file are lost to a power loss before the next fdatasync,
// as a whole write's would be, and kept by one after it.
func TestCrashFSAShortWriteIsUnsyncedLikeAnyOther(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	c := NewCrashFS(ffs)
	f := durableFile(t, c, filepath.Join(dir, "seg"), "durable")
	ffs.Inject(Rule{Op: OpWrite, ShortBytes: 3, Err: syscall.ENOSPC})
	n, err := f.WriteAt([]byte("XXXXX"), 0)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.Equal(t, 3, n)
	n, err = f.WriteAt([]byte("+tail"), 7)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.Equal(t, 3, n)
	ffs.Clear()

	require.Equal(t, map[string]string{"seg": "durable"}, cloneTree(t, c, keepNone))
	require.Equal(t, map[string]string{"seg": "XXXable+ta"}, cloneTree(t, c, keepAll))
	require.NoError(t, f.Sync())
	require.Equal(t, map[string]string{"seg": "XXXable+ta"}, cloneTree(t, c, keepNone))
}

func TestCrashFSCreatedFileNeedsSyncDir(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := openRW(t, c, filepath.Join(dir, "new"))
	writeAt(t, f, "data", 0)
	require.NoError(t, f.Sync())
	require.Empty(t, cloneTree(t, c, keepAll), "an fdatasync does not make the name durable")
	require.NoError(t, c.SyncDir(dir))
	require.Equal(t, map[string]string{"new": "data"}, cloneTree(t, c, keepNone))
}

func TestCrashFSRename(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	tmp, final := filepath.Join(dir, "CURRENT.tmp"), filepath.Join(dir, "CURRENT")
	durableFile(t, c, final, "old")
	durableFile(t, c, tmp, "new")
	require.NoError(t, c.Rename(tmp, final))
	require.Equal(t, map[string]string{"CURRENT": "old", "CURRENT.tmp": "new"}, cloneTree(t, c, keepAll),
		"without SyncDir the rename, and the replacement of CURRENT, are undone")
	require.NoError(t, c.SyncDir(dir))
	require.Equal(t, map[string]string{"CURRENT": "new"}, cloneTree(t, c, keepNone))
}

func TestCrashFSRenameFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	c := NewCrashFS(Default)
	require.NoError(t, c.MkdirAll(sub, 0o700))
	f := durableFile(t, c, filepath.Join(dir, "x"), "v1")
	require.NoError(t, c.Rename(filepath.Join(dir, "x"), filepath.Join(sub, "x")))
	writeAt(t, f, "v2", 0)
	require.NoError(t, f.Sync(), "syncs the file under its new name")
	require.Equal(t, map[string]string{"x": "v2"}, cloneTree(t, c, keepNone))
	require.NoError(t, c.SyncDir(sub))
	require.Equal(t, map[string]string{"x": "v2", filepath.Join("sub", "x"): "v2"}, cloneTree(t, c, keepNone),
		"only the new directory is synced: the file has both names")
	require.NoError(t, c.SyncDir(dir))
	require.Equal(t, map[string]string{filepath.Join("sub", "x"): "v2"}, cloneTree(t, c, keepNone))
}

func TestCrashFSRemove(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	name := filepath.Join(dir, "seg")
	f := durableFile(t, c, name, "durable")
	writeAt(t, f, "DURABLE", 0)
	require.NoError(t, f.Close())
	require.NoError(t, c.Remove(name))
	require.NoFileExists(t, name)
	require.Equal(t, map[string]string{"seg": "durable"}, cloneTree(t, c, keepNone), "the removal is undone")
	require.Equal(t, map[string]string{"seg": "DURABLE"}, cloneTree(t, c, keepAll))

	// A new file under the old name stays invisible too.
	g := openRW(t, c, name)
	writeAt(t, g, "replacement", 0)
	require.NoError(t, g.Sync())
	require.Equal(t, map[string]string{"seg": "durable"}, cloneTree(t, c, keepNone))
	require.NoError(t, c.SyncDir(dir))
	require.Equal(t, map[string]string{"seg": "replacement"}, cloneTree(t, c, keepNone))
	require.NoError(t, c.Remove(name))
	require.NoError(t, c.SyncDir(dir))
	require.Empty(t, cloneTree(t, c, keepAll))
}

func TestCrashFSTruncate(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	content := strings.Repeat("0123456789", 1000)
	f := durableFile(t, c, filepath.Join(dir, "seg"), content)

	require.NoError(t, f.Truncate(3000))
	require.Equal(t, content, cloneTree(t, c, keepNone)["seg"])
	require.Equal(t, content[:3000], cloneTree(t, c, keepAll)["seg"])

	require.NoError(t, f.Truncate(20000)) // extend: zeros
	writeAt(t, f, "end", 19997)
	require.Equal(t, content, cloneTree(t, c, keepNone)["seg"])
	want := content[:3000] + strings.Repeat("\x00", 16997) + "end"
	require.Equal(t, want, cloneTree(t, c, keepAll)["seg"])
	require.NoError(t, f.Sync())
	require.Equal(t, want, cloneTree(t, c, keepNone)["seg"])

	// O_TRUNC is a recorded truncation too.
	g, err := c.OpenFile(filepath.Join(dir, "seg"), os.O_RDWR|os.O_TRUNC, 0)
	require.NoError(t, err)
	defer g.Close()
	size, err := g.Size()
	require.NoError(t, err)
	require.Zero(t, size)
	require.Equal(t, want, cloneTree(t, c, keepNone)["seg"])
	require.Empty(t, cloneTree(t, c, keepAll)["seg"])
}

func TestCrashFSCrashAfterStopsEveryMutation(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	name := filepath.Join(dir, "seg")
	f := openRW(t, c, name) // 1: create
	writeAt(t, f, "abc", 0) // 2
	require.EqualValues(t, 2, c.Ops())
	c.CrashAfter(3)
	require.False(t, c.Crashed())
	require.NoError(t, f.Sync()) // 3
	require.True(t, c.Crashed())

	_, err := f.WriteAt([]byte("x"), 0)
	require.ErrorIs(t, err, ErrCrashed)
	require.ErrorIs(t, f.Sync(), ErrCrashed)
	require.ErrorIs(t, f.Truncate(0), ErrCrashed)
	require.ErrorIs(t, c.Rename(name, name+"2"), ErrCrashed)
	require.ErrorIs(t, c.Remove(name), ErrCrashed)
	require.ErrorIs(t, c.SyncDir(dir), ErrCrashed)
	require.ErrorIs(t, c.MkdirAll(filepath.Join(dir, "sub"), 0o700), ErrCrashed)
	_, err = c.OpenFile(filepath.Join(dir, "other"), os.O_CREATE|os.O_RDWR, 0o600)
	require.ErrorIs(t, err, ErrCrashed)
	_, err = c.OpenFile(name, os.O_RDWR|os.O_TRUNC, 0)
	require.ErrorIs(t, err, ErrCrashed)
	var pathErr *os.PathError
	require.ErrorAs(t, f.Sync(), &pathErr)
	require.Equal(t, name, pathErr.Path)

	require.EqualValues(t, 3, c.Ops(), "refused operations are not counted")
	names, err := c.ReadDir(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"seg"}, names, "nothing was created, renamed or removed")
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	require.Equal(t, "abc", string(data), "nothing was written or truncated")
	buf := make([]byte, 3)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err, "reads still work")
	require.Empty(t, cloneTree(t, c, keepAll), "the directory was never synced")

	c2 := NewCrashFS(Default)
	c2.Crash()
	require.ErrorIs(t, c2.MkdirAll(dir, 0o700), ErrCrashed)
}

// durableReplace is the durable-create protocol: write temp, fsync, rename,
// fsync dir. It returns how many versions it made durable before failing.
func durableReplace(fs FS, dir string, versions int) (int, error) {
	tmp, final := filepath.Join(dir, "CURRENT.tmp"), filepath.Join(dir, "CURRENT")
	for v := 1; v <= versions; v++ {
		f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return v - 1, err
		}
		_, err = f.WriteAt([]byte(versionContent(v)), 0)
		if err == nil {
			err = f.Sync()
		}
		if err = errors.Join(err, f.Close()); err != nil {
			return v - 1, err
		}
		if err := fs.Rename(tmp, final); err != nil {
			return v - 1, err
		}
		if err := fs.SyncDir(dir); err != nil {
			return v - 1, err
		}
	}
	return versions, nil
}

func versionContent(v int) string { return strings.Repeat(fmt.Sprint(v), 5000+v) }

func TestCrashFSCrashAtEveryOperation(t *testing.T) {
	seed := newSeed(t)
	dry := NewCrashFS(Default)
	done, err := durableReplace(dry, t.TempDir(), 3)
	require.NoError(t, err)
	require.Equal(t, 3, done)
	total := dry.Ops()
	require.EqualValues(t, 3*5, total)

	for k := range total + 1 {
		dir := t.TempDir()
		c := NewCrashFS(Default)
		c.CrashAfter(k)
		done, err := durableReplace(c, dir, 3)
		if k < total {
			require.ErrorIs(t, err, ErrCrashed, "k=%d", k)
		}
		for i, opts := range []CrashOptions{keepNone, keepAll, {KeepUnsyncedFraction: 0.5, TearLastWrite: true, Rand: newRand(seed + uint64(k))}} {
			got, ok := cloneTree(t, c, opts)["CURRENT"]
			if i == 2 && (ok || done > 0) && got != versionContent(done) {
				// A rename not yet synced may survive: then CURRENT is
				// the version being installed, whose data was synced.
				require.Equal(t, versionContent(done+1), got, "k=%d opts %d", k, i)
				continue
			}
			if done == 0 {
				require.False(t, ok, "k=%d opts %d: no version was durable", k, i)
				continue
			}
			require.Equal(t, versionContent(done), got, "k=%d opts %d", k, i)
		}
	}
}

// TestCrashFSRandomWorkload checks the bookkeeping against a model: keeping
// nothing unsynced must give the content at the last sync, keeping all the
// current content, and anything in between only bytes that were there or
// were written there.
func TestCrashFSRandomWorkload(t *testing.T) {
	seed := newSeed(t)
	rng := newRand(seed)
	for round := range 20 {
		dir := t.TempDir()
		c := NewCrashFS(Default)
		f := openRW(t, c, filepath.Join(dir, "seg"))
		require.NoError(t, c.SyncDir(dir))
		var current, durable []byte
		written := make(map[int64]map[byte]bool) // offset -> bytes written there since the sync
		for range 40 {
			switch op := rng.IntN(10); {
			case op < 6:
				off, n := rng.Int64N(20000), 1+rng.IntN(9000)
				data := make([]byte, n)
				for i := range data {
					data[i] = byte('a' + rng.IntN(26))
					if written[off+int64(i)] == nil {
						written[off+int64(i)] = make(map[byte]bool)
					}
					written[off+int64(i)][data[i]] = true
				}
				writeAt(t, f, string(data), off)
				current = resize(current, max(int64(len(current)), off+int64(n)))
				copy(current[off:], data)
			case op < 8:
				size := rng.Int64N(25000)
				require.NoError(t, f.Truncate(size))
				current = resize(current, size)
			default:
				require.NoError(t, f.Sync())
				durable = bytes.Clone(current)
				clear(written)
			}
		}
		require.Equal(t, string(durable), cloneTree(t, c, keepNone)["seg"], "round %d", round)
		require.Equal(t, string(current), cloneTree(t, c, keepAll)["seg"], "round %d", round)
		got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, TearLastWrite: true, Rand: rng})["seg"]
		for i := range int64(len(got)) {
			b := got[i]
			if b == 0 || i < int64(len(durable)) && durable[i] == b || written[i][b] {
				continue
			}
			t.Fatalf("round %d: byte %d is %q: never there nor written there", round, i, b)
		}
	}
}

func TestCrashFSMapSeesWrites(t *testing.T) {
	c := NewCrashFS(Default)
	f := openRW(t, c, filepath.Join(t.TempDir(), "seg"))
	writeAt(t, f, "hello, world", 0)
	m, err := f.Map(12)
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Unmap()) }()
	require.Equal(t, "hello, world", string(m))
	writeAt(t, f, "HELLO", 0)
	require.Equal(t, "HELLO, world", string(m), "the mapping is shared")
}

func TestCrashFSWriteOnlyFiles(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	durableFile(t, c, filepath.Join(dir, "seg"), "synced")
	f, err := c.OpenFile(filepath.Join(dir, "seg"), os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.ReadAt(make([]byte, 1), 0)
	require.ErrorIs(t, err, syscall.EBADF)
	_, err = f.Map(1)
	require.ErrorIs(t, err, syscall.EACCES)
	writeAt(t, f, "SYNCED", 0)
	require.Equal(t, "synced", cloneTree(t, c, keepNone)["seg"])

	r, err := c.OpenFile(filepath.Join(dir, "seg"), os.O_RDONLY, 0)
	require.NoError(t, err)
	defer r.Close()
	_, err = r.WriteAt([]byte("x"), 0)
	require.Error(t, err, "a read-only file refuses writes")
	require.EqualValues(t, 5, c.Ops(), "create, write, sync, syncdir, write; not the refused one")
}

func TestCrashFSUntrackedFilesAreDurable(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "old"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "old", "a"), []byte("before"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b"), []byte("before too"), 0o600))
	c := NewCrashFS(Default)
	f, err := c.OpenFile(filepath.Join(dir, "b"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	writeAt(t, f, "after", 0)
	require.Equal(t, map[string]string{
		filepath.Join("old", "a"): "before",
		"b":                       "before too",
	}, cloneTree(t, c, keepNone))
}

// A Lock of a file the CrashFS tracks writes the holder into it (Default
// does) as an unsynced change: a crash leaves the content of the file's
// last Sync, or the holder when the unsynced writes survive, and the clone
// is made (it used to fail, finding a size other than the one recorded).
// A Backup locks the mark of its partial copy, a file it made through the
// CrashFS.
func TestCrashFSLockOfATrackedFileIsAnUnsyncedWrite(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	name := filepath.Join(dir, "mark.tmp")
	f, err := c.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	writeAt(t, f, "synced", 0)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, c.SyncDir(dir))
	lock, err := c.Lock(name)
	require.NoError(t, err)
	defer lock.Close()
	holder, err := os.ReadFile(name)
	require.NoError(t, err)
	require.Contains(t, string(holder), "pid ", "the lock names its holder")
	require.Equal(t, map[string]string{"mark.tmp": "synced"}, cloneTree(t, c, keepNone))
	require.Equal(t, map[string]string{"mark.tmp": string(holder)}, cloneTree(t, c, keepAll))
}

func TestCrashFSConcurrentUse(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			f, err := c.OpenFile(filepath.Join(dir, fmt.Sprint(w)), os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			for i := range 50 {
				if _, err := f.WriteAt([]byte{byte('a' + w)}, int64(i)); err != nil {
					t.Error(err)
				}
				if i%10 == 0 {
					if err := f.Sync(); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if err := c.SyncDir(dir); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	require.NoError(t, c.SyncDir(dir))
	got := cloneTree(t, c, keepAll)
	require.Len(t, got, 8)
	for w := range 8 {
		require.Equal(t, strings.Repeat(string(rune('a'+w)), 50), got[fmt.Sprint(w)])
	}
	require.EqualValues(t, 8*(1+50+5)+21, c.Ops())
}

func TestCrashCloneOptionsAndRoot(t *testing.T) {
	dir1, dir2 := t.TempDir(), t.TempDir()
	c := NewCrashFS(Default)
	durableFile(t, c, filepath.Join(dir1, "a"), "1")
	durableFile(t, c, filepath.Join(dir2, "b"), "2")

	dst := filepath.Join(t.TempDir(), "clone")
	require.ErrorContains(t, c.CrashClone(dst, keepNone), "contains the others")
	require.Equal(t, map[string]string{"a": "1"}, cloneTree(t, c, CrashOptions{Root: dir1}))

	require.ErrorContains(t, c.CrashClone(filepath.Join(dir1, "clone"), CrashOptions{Root: dir1}), "inside")
	require.NoError(t, os.MkdirAll(dst, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dst, "junk"), nil, 0o600))
	require.ErrorContains(t, c.CrashClone(dst, CrashOptions{Root: dir1}), "not empty")
	require.Error(t, c.CrashClone(t.TempDir(), CrashOptions{Root: dir1, KeepUnsyncedFraction: 1.5}))
	require.ErrorContains(t, c.CrashClone(t.TempDir(), CrashOptions{Root: dir1, KeepUnsyncedFraction: 0.5}), "Rand")
	require.ErrorContains(t, c.CrashClone(t.TempDir(), CrashOptions{Root: dir1, KeepUnsyncedFraction: 1, TearLastWrite: true}), "Rand")
	require.NoError(t, c.CrashClone(t.TempDir(), CrashOptions{Root: dir1, TearLastWrite: true}), "nothing kept: nothing to tear")

	require.ErrorContains(t, NewCrashFS(Default).CrashClone(t.TempDir(), keepNone), "contains the others", "nothing used, no Root")

	synced := NewCrashFS(Default)
	require.NoError(t, MkdirAllDurable(synced, filepath.Join(t.TempDir(), "d"), 0o700))
	require.ErrorContains(t, synced.CrashClone(t.TempDir(), keepNone), "name the Root",
		"MkdirAllDurable synced the file system's root: a clone of it all is never meant")
}

// TestCrashCloneFindsTheRootOfRelativeNames: names relative to the working
// directory are used as spelt, and "." contains every other such name.
func TestCrashCloneFindsTheRootOfRelativeNames(t *testing.T) {
	t.Chdir(t.TempDir())
	c := NewCrashFS(Default)
	require.NoError(t, MkdirAllDurable(c, "sub", 0o700))
	durableFile(t, c, "seg", "1").Close()
	durableFile(t, c, filepath.Join("sub", "f"), "2").Close()
	require.Equal(t, map[string]string{"seg": "1", filepath.Join("sub", "f"): "2"}, cloneTree(t, c, keepNone))
}

func TestCrashFSFailedOperationsChangeNothing(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	name := filepath.Join(dir, "seg")
	durableFile(t, c, name, "durable")
	missing := filepath.Join(dir, "missing")

	require.ErrorIs(t, c.Remove(missing), os.ErrNotExist)
	require.ErrorIs(t, c.Rename(missing, name), os.ErrNotExist)
	_, err := c.OpenFile(missing, os.O_RDWR, 0)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = c.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	require.ErrorIs(t, err, os.ErrExist)
	require.Error(t, c.Rename(name, filepath.Join(dir, "no-such-dir", "seg")))
	require.NoError(t, c.Rename(name, name), "renaming onto itself does nothing")
	require.Equal(t, map[string]string{"seg": "durable"}, cloneTree(t, c, keepAll))

	// A directory is not a tracked file: removing it is passed through.
	require.NoError(t, c.MkdirAll(filepath.Join(dir, "empty"), 0o700))
	require.NoError(t, c.Remove(filepath.Join(dir, "empty")))
	require.NoDirExists(t, filepath.Join(dir, "empty"))
}

func TestCrashFSDetectsChangesBehindItsBack(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), "durable")
	defer f.Close()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "seg"), []byte("longer than it was"), 0o600))
	require.ErrorContains(t, c.CrashClone(t.TempDir(), keepNone), "changed by other means")

	// So is one changed after an unsynced write through the CrashFS.
	c = NewCrashFS(Default)
	g := durableFile(t, c, filepath.Join(dir, "other"), "durable")
	defer g.Close()
	writeAt(t, g, "+more", 7)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other"), []byte("longer than it was"), 0o600))
	require.ErrorContains(t, c.CrashClone(t.TempDir(), CrashOptions{Root: dir}), "changed by other means")
}
