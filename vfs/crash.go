package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// ErrCrashed is returned, wrapped in an *os.PathError (an *os.LinkError for
// Rename), by every mutating operation of a [CrashFS] once it has crashed
// (see [CrashFS.CrashAfter]). Check with errors.Is.
var ErrCrashed = errors.New("vfs: file system has crashed")

// CrashFS wraps another [FS], normally [Default] over a real directory, and
// records what completed fdatasyncs and directory syncs made durable, so
// that [CrashFS.CrashClone] can write a copy of the directory as a power
// loss would leave it. Reads, Size and Map go straight to the inner file,
// so a mapping sees data written through the CrashFS.
//
// The model:
//   - A file's content and size are durable as of its last successful Sync
//     (through any handle). Each later WriteAt and Truncate is recorded with
//     the bytes and size it replaced, which are read from the file first.
//     A crash may keep any of those blocks, in any order; a file's size
//     grows with the blocks kept, or, as on file systems that commit
//     metadata apart from data (ext4 with data=writeback, xfs), its size
//     changes are kept in order apart from the blocks: a file that grew
//     may come back longer than its surviving data, the rest reading as
//     zeros, or shorter, its surviving blocks past the end lost (see
//     [CrashOptions.KeepUnsyncedSizes]).
//   - A name (a creation, a Rename, a Remove) is durable only after a
//     successful SyncDir of its directory; until then a crash may restore
//     the directory's previous entries, or keep any prefix of the unsynced
//     changes of names, in the order they were made and each Rename whole,
//     as a journalling file system that commits them in order may,
//     whatever it keeps of the data (all of them with every block kept:
//     the tree as the page cache holds it; see
//     [CrashOptions.KeepUnsyncedNames]), or, on request, any subset of
//     them, each rename whole, as a file system with a log per file
//     (btrfs) may ([KeepSubset]). Files are followed by identity
//     across renames, and a removed or replaced file that a crash could
//     bring back is kept open until its removal is durable.
//   - A Sync the inner FS fails (a writeback error) loses the writes it
//     was to make durable for good, as on Linux, where the failed pages are
//     left clean in the page cache: reads still see them (until
//     [CrashFS.EvictFailedWrites] drops them, as the kernel may), no later
//     Sync writes them, and a crash leaves the content durable before them.
//     Only the pages written again after the failure can become durable
//     (whole: writeback is by page). The pages the failed writeback wrote
//     before its error, if any (none unless [CrashFS.SetFailedWriteback]
//     says otherwise), are durable as the page cache held them.
//   - Directories are names too. One that MkdirAll creates, and the
//     renaming or removal of a directory, are durable only after a SyncDir
//     of its parent; until then a crash takes the new directory away with
//     everything in it, or puts the renamed or removed one back, with the
//     files a crash leaves in it. A directory is renamed only within its
//     parent, and not over another directory (the CrashFS refuses both
//     with an error that says so).
//   - Files and directories that exist when the CrashFS first touches them
//     are taken as durable as they are.
//   - Names are compared after filepath.Clean; use one spelling per file.
//
// Mutating operations (OpenFile that creates or truncates, WriteAt, Sync,
// Truncate, each write of Allocate, Remove, Rename, SyncDir, MkdirAll) are
// counted by [CrashFS.Ops]; after a crash each of them fails with
// [ErrCrashed] and does nothing. Lock is not counted, but it writes (the
// inner Lock may create its file, and Default writes the holder's pid into
// it), so it is recorded as those writes would be: a file it creates is a
// new name, durable after SyncDir of its directory, and what it writes is
// an unsynced write; after a crash it fails with [ErrCrashed] too, and
// takes no lock. A file that OpenFile or Lock finds at a name the CrashFS
// saw go (one made again by other means) is recorded as such a creation
// too, so that every File of a tracked name is one of the CrashFS. WriteAt,
// Sync, Truncate and Allocate of a closed File fail with [os.ErrClosed],
// uncounted, and change nothing: a Sync through a closed handle is no
// writeback failure.
//
// A CrashFS and its Files are safe for concurrent use; mutating operations
// are serialized by one mutex. It retains, until the file's next Sync, a
// copy of every unsynced write and of the bytes it replaced, and it needs
// read permission on every file it writes (write-only opens are made
// read-write underneath).
type CrashFS struct {
	inner FS

	// mu guards every field below and every crashNode reachable from dirs
	// or from a crashFile. It is held across the inner call of a mutating
	// operation, so bookkeeping and disk change together, and across
	// CrashClone, which therefore sees a single instant.
	mu         sync.Mutex
	ops        int64                // mutating operations performed
	crashAfter int64                // ops allowed before the crash; -1 for never
	dirs       map[string]*crashDir // by cleaned directory path
	// used holds every directory named in a call, refused or not: the
	// directory of a file, or one given to MkdirAll, ReadDir or SyncDir.
	// CrashClone looks in it for the root of the tree.
	used map[string]bool
	// names are the changes of names not yet made durable by a SyncDir of
	// their directory, oldest first: a crash may keep any prefix of them
	// (journalling file systems commit them in order), or, with
	// KeepSubset, any subset, a rename whole.
	names []nameOp
	group int64 // the group of the last nameOp
	// reached is the probability with which each page a failed fdatasync
	// was to write had reached the device before the error, drawn from
	// reachedRand (see SetFailedWriteback).
	reached     float64
	reachedRand *rand.Rand
}

// nameOp is one change of a name: base in dir now names node (nil: none).
// The two changes of a Rename share a group.
type nameOp struct {
	dir   *crashDir
	base  string
	node  *crashNode
	group int64
}

// crashDir holds the tracked entries of one directory. A base name is a key
// of cur exactly when it is a key of dur; names that are keys of neither
// are untracked, and their disk state is also their durable state. A
// crashDir is found by its current path in CrashFS.dirs, and, if the
// directory is tracked in its parent, through its crashNode.
type crashDir struct {
	cur map[string]*crashNode // the file now at each name; nil if none
	dur map[string]*crashNode // the file a crash would leave; nil if none
}

// crashNode is one file or directory (an inode), guarded by CrashFS.mu.
type crashNode struct {
	path string // current name; "" once unlinked
	// contents, for a directory, holds its entries; nil for a file. A
	// directory has no held handle and no log: what a crash leaves of it is
	// its durable name and, through contents, the durable names in it.
	contents *crashDir
	fs       *CrashFS // a directory's, to forget its contents; nil once done
	durRefs  int      // number of crashDir.dur entries naming this node
	logRefs  int      // number of CrashFS.names entries naming this node
	// held is a read-only handle kept while the node is unlinked but a
	// crash could bring it back: a durable entry names it (durRefs > 0),
	// or an unsynced change of names a crash may keep does (logRefs > 0);
	// nil otherwise.
	held File
	// syncedSize is the size as of the last successful Sync, and log the
	// mutations since then, oldest first.
	syncedSize int64
	log        []crashRecord
	// base, when hasBase, is the file's durable content, which then is not
	// the current content with the log undone: an fdatasync failed, and
	// the writes it was to make durable stay in the page cache (reads see
	// them) but are never written back, as on Linux, where a failed
	// writeback leaves its pages clean. Only a later write of the same
	// bytes, and an fdatasync after it, makes them durable.
	base    []byte
	hasBase bool
	// unknown is set when an fdatasync failed and the content it left
	// durable could not be read to record it: what a crash would leave of
	// the file is then unknown, and every later Sync and clone of it
	// fails with this error rather than guess.
	unknown error
}

// crashRecord is one unsynced mutation of a node: a write of data at off,
// or, if truncate, a truncation to size off. prev holds the bytes the
// mutation replaced within the old size prevSize: those of the written
// range, or those a shrinking truncate cut off.
type crashRecord struct {
	truncate bool
	off      int64
	data     []byte
	prev     []byte
	prevSize int64
}

// endSize is the file's size after the record's mutation.
func (r *crashRecord) endSize() int64 {
	if r.truncate {
		return r.off
	}
	return max(r.prevSize, r.off+int64(len(r.data)))
}

// NewCrashFS returns a CrashFS over inner that has not crashed and tracks no
// file yet. It panics if inner is nil, or a nil pointer in an FS (see
// [IsNil]), rather than at the first call.
func NewCrashFS(inner FS) *CrashFS {
	if IsNil(inner) {
		panic(errors.New("vfs: NewCrashFS: nil inner FS"))
	}
	return &CrashFS{inner: inner, crashAfter: -1, dirs: make(map[string]*crashDir), used: make(map[string]bool)}
}

// Ops reports how many mutating operations have been performed (attempted
// on the inner FS, whether or not they succeeded); operations refused after
// the crash are not counted. Safe for concurrent use.
func (c *CrashFS) Ops() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops
}

// CrashAfter makes the CrashFS crash once k mutating operations, counted
// from its creation as [CrashFS.Ops] counts them, have been performed:
// operation k+1 and every later one fail with [ErrCrashed]. If k operations
// have already been performed it crashes at once; a negative k counts as 0.
// Safe for concurrent use.
func (c *CrashFS) CrashAfter(k int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashAfter = max(k, 0)
}

// Crash crashes the CrashFS now: it is CrashAfter(Ops()). Safe for
// concurrent use.
func (c *CrashFS) Crash() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashAfter = c.ops
}

// SetFailedWriteback says how much of the writeback of an fdatasync that
// the inner FS fails had reached the device before the error (each page's
// I/O fails or succeeds on its own): from then on, each page such an
// fdatasync was to write, within the file's durable size, is taken to
// have reached the device with probability fraction, drawn from rng, and
// is durable as the page cache held it; the others keep what the device
// held before, as before (fraction 0, the default). The file's durable
// size stays as it was: the failed fdatasync committed no metadata. The
// choice is made once, at the failure, so that every clone and
// [CrashFS.EvictFailedWrites] after it agree on what the device holds.
//
// It refuses a fraction outside [0, 1] (NaN too), and a nil rng with a
// fraction strictly between 0 and 1. Safe for concurrent use; the CrashFS
// uses rng under its mutex from then on, and it must not be used
// elsewhere meanwhile.
func (c *CrashFS) SetFailedWriteback(fraction float64, rng *rand.Rand) error {
	if !(fraction >= 0 && fraction <= 1) {
		return fmt.Errorf("vfs: CrashFS: SetFailedWriteback: fraction %v outside [0, 1]", fraction)
	}
	if rng == nil && fraction > 0 && fraction < 1 {
		return errors.New("vfs: CrashFS: SetFailedWriteback: a fraction strictly between 0 and 1 needs a Rand")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reached, c.reachedRand = fraction, rng
	return nil
}

// reachedLocked copies into durable, the content n's device held before
// an fdatasync that failed, the pages of cur (the page cache) that this
// fdatasync was to write and that reached the device before the error
// (see SetFailedWriteback), within durable's size.
func (c *CrashFS) reachedLocked(n *crashNode, durable, cur []byte) {
	if c.reached <= 0 {
		return
	}
	for _, p := range dirtyPages(n) {
		from, to := p*crashBlockSize, min((p+1)*crashBlockSize, int64(len(durable)), int64(len(cur)))
		if from >= to {
			continue
		}
		if c.reached >= 1 || c.reachedRand.Float64() < c.reached {
			copy(durable[from:to], cur[from:to])
		}
	}
}

// Restart models a process that crashed and started again on a machine
// that kept running: every byte written stays (the page cache), still
// unsynced until an fdatasync covers it, and operations are allowed again
// and counted on from where they stopped. Safe for concurrent use.
func (c *CrashFS) Restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashAfter = -1
}

// Crashed reports whether the CrashFS has crashed. Safe for concurrent use.
func (c *CrashFS) Crashed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashedLocked()
}

func (c *CrashFS) crashedLocked() bool { return c.crashAfter >= 0 && c.ops >= c.crashAfter }

// beginLocked counts one mutating operation, or refuses it with ErrCrashed.
func (c *CrashFS) beginLocked() error {
	if c.crashedLocked() {
		return ErrCrashed
	}
	c.ops++
	return nil
}

// useLocked notes the directory of each path in used.
func (c *CrashFS) useLocked(paths ...string) {
	for _, p := range paths {
		c.used[filepath.Dir(p)] = true
	}
}

func (c *CrashFS) dirLocked(dir string) *crashDir {
	d := c.dirs[dir]
	if d == nil {
		d = &crashDir{cur: make(map[string]*crashNode), dur: make(map[string]*crashNode)}
		c.dirs[dir] = d
	}
	return d
}

// lookupLocked returns the node now at path, or nil if there is no file
// there (or only a directory). A file on disk that is not tracked yet
// becomes tracked, durable as it is.
func (c *CrashFS) lookupLocked(path string) (*crashNode, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	if d := c.dirs[dir]; d != nil {
		if n, tracked := d.cur[base]; tracked {
			if n != nil && n.contents != nil {
				return nil, nil // a directory
			}
			return n, nil
		}
	}
	if _, err := c.inner.ReadDir(path); err == nil {
		return nil, nil // a directory
	}
	f, err := c.inner.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("vfs: CrashFS tracking %s: %w", path, err)
	}
	size, err := f.Size()
	if err = errors.Join(err, f.Close()); err != nil {
		return nil, fmt.Errorf("vfs: CrashFS tracking %s: %w", path, err)
	}
	n := &crashNode{path: path, syncedSize: size}
	d := c.dirLocked(dir)
	d.cur[base] = n
	setDurLocked(d, base, n)
	return n, nil
}

// bindLocked makes n (possibly nil) the file now at path, keeping the
// durable entry of a name that was untracked as "no file".
func (c *CrashFS) bindLocked(path string, n *crashNode) {
	d := c.dirLocked(filepath.Dir(path))
	base := filepath.Base(path)
	if _, tracked := d.dur[base]; !tracked {
		d.dur[base] = nil
	}
	d.cur[base] = n
	if n != nil {
		n.path = path
		n.logRefs++
	}
	c.names = append(c.names, nameOp{dir: d, base: base, node: n, group: c.group})
}

// setDurLocked makes n (possibly nil) the file a crash leaves at base.
func setDurLocked(d *crashDir, base string, n *crashNode) {
	old, tracked := d.dur[base]
	if tracked && old == n {
		return
	}
	d.dur[base] = n
	if n != nil {
		n.durRefs++
	}
	if old != nil {
		old.durRefs--
		old.releaseLocked()
	}
}

// holdLocked opens a handle to n, now at path, before it is unlinked, if a
// crash could bring it back. It reports whether it opened one.
func (c *CrashFS) holdLocked(n *crashNode, path string) (bool, error) {
	if n == nil || n.durRefs == 0 && n.logRefs == 0 || n.held != nil {
		return false, nil
	}
	f, err := c.inner.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return false, fmt.Errorf("vfs: CrashFS keeping %s: %w", path, err)
	}
	n.held = f
	return true, nil
}

// unlinkLocked records that n no longer has a name.
func (n *crashNode) unlinkLocked() {
	n.path = ""
	n.releaseLocked()
}

// releaseLocked closes the held handle of a node no crash can bring back;
// for a directory, it forgets what the directory holds.
func (n *crashNode) releaseLocked() {
	if n.contents != nil {
		if n.path == "" && n.durRefs == 0 && n.logRefs == 0 && n.fs != nil {
			fs := n.fs
			n.fs = nil // once
			fs.forgetLocked(n.contents)
		}
		return
	}
	if n.path == "" && n.durRefs == 0 && n.logRefs == 0 && n.held != nil {
		_ = n.held.Close() // read-only: nothing to lose
		n.held = nil
	}
}

const accessModes = os.O_RDONLY | os.O_WRONLY | os.O_RDWR

// OpenFile opens a file of the inner FS. Creating a file, and truncating an
// existing one with O_TRUNC (read-only too, as Linux does), are mutating
// operations; a created file's name is durable after SyncDir of its
// directory. A file found at a name the CrashFS saw go is recorded as a
// creation, not durable either (see [CrashFS]).
func (c *CrashFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	path := filepath.Clean(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.useLocked(path)
	n, err := c.lookupLocked(path)
	if err != nil {
		return nil, err
	}
	if n != nil && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0 {
		// The records say a file is there: the inner FS would say so
		// too, unless it was removed by other means, and then it would
		// create one, unrecorded.
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EEXIST}
	}
	if n == nil && flag&os.O_CREATE == 0 {
		// Let the inner FS report ENOENT, or open a directory (without
		// O_TRUNC first: a file found here must not be truncated
		// unrecorded).
		f, err := c.inner.OpenFile(name, flag&^os.O_TRUNC, perm)
		if err != nil {
			return nil, err
		}
		if _, err := c.inner.ReadDir(path); err == nil {
			if flag&os.O_TRUNC == 0 {
				return f, nil
			}
			if err := f.Close(); err != nil {
				return nil, err
			}
			return c.inner.OpenFile(name, flag, perm)
		}
		// A file at a name the records say is free: made again by other
		// means. Its File must be one of the CrashFS, so that its writes
		// are recorded and, after a crash, refused.
		if err := f.Close(); err != nil {
			return nil, err
		}
		if n, err = c.adoptLocked(path); err != nil {
			return nil, err
		}
		if n == nil { // gone again
			return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOENT}
		}
	}
	creating := n == nil
	access := flag & accessModes
	// Linux truncates on O_TRUNC whatever the access mode, read-only too.
	truncating := n != nil && flag&os.O_TRUNC != 0
	if creating || truncating {
		if err := c.beginLocked(); err != nil {
			return nil, &os.PathError{Op: "open", Path: name, Err: err}
		}
	}
	// Writes read what they overwrite, so write-only becomes read-write;
	// O_TRUNC is done below as a recorded Truncate.
	innerFlag := flag &^ os.O_TRUNC
	if access == os.O_WRONLY {
		innerFlag = innerFlag&^accessModes | os.O_RDWR
	}
	f, err := c.inner.OpenFile(name, innerFlag, perm)
	if err != nil {
		return nil, err
	}
	if creating {
		n = &crashNode{}
		c.group++
		c.bindLocked(path, n)
	}
	cf := &crashFile{fs: c, node: n, inner: f, readable: access != os.O_WRONLY, writable: access != os.O_RDONLY}
	if truncating {
		if err := c.truncateOpenLocked(cf, name, innerFlag); err != nil {
			return nil, errors.Join(err, f.Close())
		}
	}
	return cf, nil
}

// truncateOpenLocked does the O_TRUNC of an open of cf, counted already,
// as a recorded Truncate to 0. A read-only cf cannot truncate: a handle
// opened read-write for it does, needing the write permission that
// O_TRUNC needs.
func (c *CrashFS) truncateOpenLocked(cf *crashFile, name string, innerFlag int) error {
	if cf.writable {
		return cf.truncateLocked(0)
	}
	w, err := c.inner.OpenFile(name, innerFlag&^(accessModes|os.O_CREATE|os.O_EXCL)|os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = (&crashFile{fs: c, node: cf.node, inner: w, readable: true, writable: true}).truncateLocked(0)
	return errors.Join(err, w.Close())
}

// adoptLocked records the file now at path, a name the records say is
// free (the file was made by other means, or by the inner Lock), as a
// creation no SyncDir has made durable, with its content an unsynced
// write. It returns nil if there is no file at path; the caller has made
// sure that no directory is there.
func (c *CrashFS) adoptLocked(path string) (*crashNode, error) {
	r, err := c.inner.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("vfs: CrashFS tracking %s: %w", path, err)
	}
	size, err := r.Size()
	var data []byte
	if err == nil {
		data, err = readRange(r, 0, size)
	}
	if err = errors.Join(err, r.Close()); err != nil {
		return nil, fmt.Errorf("vfs: CrashFS tracking %s: %w", path, err)
	}
	n := &crashNode{}
	c.group++
	c.bindLocked(path, n)
	if len(data) > 0 {
		n.log = append(n.log, crashRecord{off: 0, data: data, prevSize: 0})
	}
	return n, nil
}

// Remove removes a file of the inner FS; a crash undoes it until SyncDir
// of its directory.
func (c *CrashFS) Remove(name string) error {
	path := filepath.Clean(name)
	if !ownParent(path) {
		return &os.PathError{Op: "remove", Path: name, Err: errNoEntry}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.useLocked(path)
	if err := c.beginLocked(); err != nil {
		return &os.PathError{Op: "remove", Path: name, Err: err}
	}
	if isDir, err := c.isDirLocked(path); err != nil {
		return err
	} else if isDir {
		return c.removeDirLocked(name, path)
	}
	n, err := c.lookupLocked(path)
	if err != nil {
		return err
	}
	held, err := c.holdLocked(n, path)
	if err != nil {
		return err
	}
	if err := c.inner.Remove(name); err != nil {
		if held {
			_ = n.held.Close()
			n.held = nil
		}
		return err
	}
	if n != nil {
		c.group++
		c.bindLocked(path, nil)
		n.unlinkLocked()
	}
	return nil
}

// isDirLocked reports whether path names a directory: as the bookkeeping
// says where the name is tracked, else as the disk says. A look at the
// disk that fails for another reason than the name being missing or no
// directory is an error.
func (c *CrashFS) isDirLocked(path string) (bool, error) {
	if d := c.dirs[filepath.Dir(path)]; d != nil {
		if n, tracked := d.cur[filepath.Base(path)]; tracked {
			return n != nil && n.contents != nil, nil
		}
	}
	_, err := c.inner.ReadDir(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return false, nil
	}
	return false, fmt.Errorf("vfs: CrashFS: is %s a directory: %w", path, err)
}

// errNoEntry refuses a Remove or Rename of a path that names no entry of
// a directory.
var errNoEntry = errors.New("vfs: CrashFS: the path names no entry of a directory (the root, \".\" or \"..\"), which a crash model cannot follow")

// ownParent reports whether the clean path names an entry of a directory
// other than itself: not the root, ".", nor a path ending in "..". A
// directory recorded as an entry of itself would make a clone recurse
// without end.
func ownParent(path string) bool {
	base := filepath.Base(path)
	return filepath.Dir(path) != path && base != "." && base != ".."
}

// removeDirLocked removes the directory at path (named name), which must
// be empty; a crash puts it back, with what a crash leaves in it, until
// SyncDir of its parent.
func (c *CrashFS) removeDirLocked(name, path string) error {
	n := c.dirNodeLocked(path)
	if err := c.inner.Remove(name); err != nil {
		return err
	}
	c.group++
	c.bindLocked(path, nil)
	n.unlinkLocked()
	for p := range c.dirs {
		if within(path, p) {
			delete(c.dirs, p) // n.contents keeps what a crash may bring back
		}
	}
	return nil
}

// dropNamesLocked removes from the log of unsynced changes of names those
// of d, and returns the nodes they named, for the caller to release once
// d's durable entries are what they will be.
func (c *CrashFS) dropNamesLocked(d *crashDir) []*crashNode {
	kept := c.names[:0]
	var dropped []*crashNode
	for _, op := range c.names {
		if op.dir != d {
			kept = append(kept, op)
		} else if op.node != nil {
			op.node.logRefs--
			dropped = append(dropped, op.node)
		}
	}
	clear(c.names[len(kept):])
	c.names = kept
	return dropped
}

// forgetLocked forgets the entries of d, a directory no crash can bring
// back: its unsynced changes of names and its durable entries, releasing
// the nodes they named.
func (c *CrashFS) forgetLocked(d *crashDir) {
	dropped := c.dropNamesLocked(d)
	for base := range d.dur {
		setDurLocked(d, base, nil)
	}
	clear(d.cur)
	clear(d.dur)
	for _, n := range dropped {
		n.releaseLocked()
	}
}

// dirNodeLocked returns the node of the directory now at path, tracking it,
// durable as it is, if it was not tracked yet.
func (c *CrashFS) dirNodeLocked(path string) *crashNode {
	// (Remove and Rename refuse a path with no parent of its own: see
	// ownParent.)
	parent := c.dirLocked(filepath.Dir(path))
	base := filepath.Base(path)
	if n := parent.cur[base]; n != nil && n.contents != nil {
		return n
	}
	n := &crashNode{path: path, contents: c.dirLocked(path), fs: c}
	parent.cur[base] = n
	setDurLocked(parent, base, n)
	return n
}

// renameDirLocked renames the directory at oldPath to newPath in the same
// parent, where nothing may be; a crash undoes it until SyncDir of the
// parent. Files and directories in it keep being followed at their new
// names.
func (c *CrashFS) renameDirLocked(oldname, newname, oldPath, newPath string) error {
	refuse := func(why string) error {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: errors.New("vfs: CrashFS: " + why)}
	}
	if filepath.Dir(oldPath) != filepath.Dir(newPath) {
		return refuse("a directory is renamed only within its parent here")
	}
	if _, err := c.inner.ReadDir(newPath); err == nil {
		return refuse("renaming a directory over another is not modelled")
	}
	if target, err := c.lookupLocked(newPath); err != nil {
		return err
	} else if target != nil {
		return refuse("renaming a directory over a file is not modelled")
	}
	n := c.dirNodeLocked(oldPath)
	if err := c.inner.Rename(oldname, newname); err != nil {
		return err
	}
	moved := make(map[string]*crashDir)
	for p, d := range c.dirs {
		if within(oldPath, p) {
			moved[newPath+strings.TrimPrefix(p, oldPath)] = d
			delete(c.dirs, p)
		}
	}
	for p, d := range moved {
		c.dirs[p] = d
		for base, child := range d.cur {
			if child != nil {
				child.path = filepath.Join(p, base)
			}
		}
	}
	c.used[newPath] = true
	c.group++
	c.bindLocked(oldPath, nil)
	c.bindLocked(newPath, n)
	return nil
}

// Rename renames a file of the inner FS, replacing newname; a crash undoes
// it until SyncDir of the directories involved (the new name needs its
// directory synced to survive, the old name's directory to disappear). A
// directory is renamed within its parent only, and not over anything.
func (c *CrashFS) Rename(oldname, newname string) error {
	oldPath, newPath := filepath.Clean(oldname), filepath.Clean(newname)
	if !ownParent(oldPath) || !ownParent(newPath) {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: errNoEntry}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.useLocked(oldPath, newPath)
	if err := c.beginLocked(); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	if isDir, err := c.isDirLocked(oldPath); err != nil {
		return err
	} else if isDir && oldPath != newPath {
		return c.renameDirLocked(oldname, newname, oldPath, newPath)
	}
	n, err := c.lookupLocked(oldPath)
	if err != nil {
		return err
	}
	if n == nil || oldPath == newPath {
		// Missing or a no-op: nothing to track.
		return c.inner.Rename(oldname, newname)
	}
	target, err := c.lookupLocked(newPath)
	if err != nil {
		return err
	}
	held, err := c.holdLocked(target, newPath)
	if err != nil {
		return err
	}
	if err := c.inner.Rename(oldname, newname); err != nil {
		if held {
			_ = target.held.Close()
			target.held = nil
		}
		return err
	}
	c.group++
	c.bindLocked(oldPath, nil)
	c.bindLocked(newPath, n)
	if target != nil {
		target.unlinkLocked()
	}
	return nil
}

// MkdirAll creates directories in the inner FS. It is a mutating operation;
// each directory it creates is durable after SyncDir of its parent.
func (c *CrashFS) MkdirAll(dir string, perm os.FileMode) error {
	path := filepath.Clean(dir)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used[path] = true
	if err := c.beginLocked(); err != nil {
		return &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	var missing []string // path first, then the parents it may make
	for p := path; filepath.Dir(p) != p; p = filepath.Dir(p) {
		if _, err := c.inner.ReadDir(p); err == nil {
			break
		}
		missing = append(missing, p)
	}
	err := c.inner.MkdirAll(dir, perm)
	// Track each directory it made, even if it failed further down.
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		if _, statErr := c.inner.ReadDir(p); statErr != nil {
			break
		}
		d := &crashDir{cur: make(map[string]*crashNode), dur: make(map[string]*crashNode)}
		c.dirs[p] = d
		c.used[filepath.Dir(p)] = true // a crash may take p away: clone from above it
		c.group++
		c.bindLocked(p, &crashNode{contents: d, fs: c})
	}
	return err
}

// CheckDir asks the inner FS (see [DirChecker]).
func (c *CrashFS) CheckDir(dir string) error { return CheckDir(c.inner, dir) }

// ReadDir lists a directory of the inner FS as it is now.
func (c *CrashFS) ReadDir(dir string) ([]string, error) {
	c.mu.Lock()
	c.used[filepath.Clean(dir)] = true
	c.mu.Unlock()
	return c.inner.ReadDir(dir)
}

// SyncDir syncs a directory of the inner FS and makes its current entries
// durable.
func (c *CrashFS) SyncDir(dir string) error {
	path := filepath.Clean(dir)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used[path] = true
	if err := c.beginLocked(); err != nil {
		return &os.PathError{Op: "syncdir", Path: dir, Err: err}
	}
	if err := c.inner.SyncDir(dir); err != nil {
		return err
	}
	d := c.dirLocked(path)
	dropped := c.dropNamesLocked(d)
	for base, n := range d.cur {
		setDurLocked(d, base, n)
		if n == nil {
			delete(d.cur, base) // durably gone: untracked again
			delete(d.dur, base)
		}
	}
	for _, n := range dropped {
		n.releaseLocked()
	}
	return nil
}

// Lock takes a lock of the inner FS. It is not a mutating operation, but
// the inner Lock may create the file and may write into it (Default writes
// its holder's pid there), and those changes are recorded as if made
// through OpenFile and a File: a file it creates is a new name, durable
// after SyncDir of its directory, with what the lock wrote in it unsynced;
// in a file that was there, the rewrite is a truncation and a write,
// unsynced, so that a crash leaves the content of its last Sync and a
// clone finds the size it recorded. After a crash it fails with
// [ErrCrashed], taking no lock and writing nothing.
func (c *CrashFS) Lock(name string) (io.Closer, error) {
	path := filepath.Clean(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.useLocked(path)
	if c.crashedLocked() {
		return nil, &os.PathError{Op: "lock", Path: name, Err: ErrCrashed}
	}
	if isDir, err := c.isDirLocked(path); err != nil {
		return nil, err
	} else if isDir {
		return c.inner.Lock(name) // let the inner FS refuse it
	}
	n, err := c.lookupLocked(path)
	if err != nil {
		return nil, err
	}
	if n == nil {
		// The inner Lock creates the file, even when it then fails.
		l, err := c.inner.Lock(name)
		if _, aerr := c.adoptLocked(path); aerr != nil {
			if l != nil {
				aerr = errors.Join(aerr, l.Close())
			}
			return nil, errors.Join(err, aerr)
		}
		return l, err
	}
	r, err := c.inner.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	read := func() (int64, []byte, error) {
		size, err := r.Size()
		if err != nil {
			return 0, nil, err
		}
		data, err := readRange(r, 0, size)
		return size, data, err
	}
	prevSize, prev, err := read()
	if err != nil {
		return nil, err
	}
	l, err := c.inner.Lock(name)
	if err != nil {
		return nil, err
	}
	size, data, err := read()
	if err != nil {
		return nil, errors.Join(err, l.Close())
	}
	if size != prevSize || !bytes.Equal(data, prev) {
		n.log = append(n.log, crashRecord{truncate: true, off: 0, prev: prev, prevSize: prevSize})
		if len(data) > 0 { // the holder's write may have failed after the truncation
			n.log = append(n.log, crashRecord{off: 0, data: data, prevSize: 0})
		}
	}
	return l, nil
}
