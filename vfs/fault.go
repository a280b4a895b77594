package vfs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/edsrzf/mmap-go"
)

// Op names one kind of file-system operation, for [Rule], [FaultFS.Count]
// and [Event].
type Op int

// The operations a [FaultFS] counts, observes and can fail.
const (
	OpOpen      Op = iota + 1 // FS.OpenFile
	OpRead                    // File.ReadAt
	OpWrite                   // File.WriteAt
	OpSync                    // File.Sync (fdatasync)
	OpTruncate                // File.Truncate
	OpMap                     // File.Map
	OpRemove                  // FS.Remove
	OpRename                  // FS.Rename
	OpSyncDir                 // FS.SyncDir
	OpClose                   // File.Close
	OpSize                    // File.Size
	OpReadDir                 // FS.ReadDir
	OpMkdirAll                // FS.MkdirAll
	OpLock                    // FS.Lock
	OpAllocate                // Allocator.Allocate (fallocate)
	OpWriteBack               // WriteBacker.WriteBack (sync_file_range)
	OpCheckDir                // DirChecker.CheckDir (an lstat of the directory)
	OpUnlock                  // Close of the io.Closer FS.Lock returned
	numOps
)

var opNames = [numOps]string{
	OpOpen: "open", OpRead: "read", OpWrite: "write", OpSync: "fdatasync",
	OpTruncate: "truncate", OpMap: "mmap", OpRemove: "remove",
	OpRename: "rename", OpSyncDir: "syncdir", OpClose: "close",
	OpSize: "size", OpReadDir: "readdir", OpMkdirAll: "mkdirall",
	OpLock: "lock", OpAllocate: "fallocate", OpWriteBack: "sync_file_range",
	OpCheckDir: "checkdir", OpUnlock: "unlock",
}

// String returns the name used as the Op of the *os.PathError of an
// injected failure: "open", "write", "fdatasync", and so on.
func (op Op) String() string {
	if op > 0 && op < numOps {
		return opNames[op]
	}
	return fmt.Sprintf("Op(%d)", int(op))
}

// Rule says which calls of a [FaultFS] fail and how. A call matches a rule
// when its operation is Op and its file or directory name passes both
// NameContains and Match (for OpRename, either name may pass). Among the
// matching calls, the rule fires on those allowed by Nth, After, Times and
// Probability, all of which must agree; the zero value of each allows every
// call, so Rule{Op: OpSync} fails every fdatasync.
//
// A Rule is copied by [FaultFS.Inject]; the Rand and Match it refers to are
// used under the FaultFS's mutex and must not be used elsewhere meanwhile.
type Rule struct {
	// Op is the operation to fail. Required.
	Op Op
	// NameContains, if not empty, restricts the rule to names containing it.
	NameContains string
	// Match, if not nil, restricts the rule to names for which it reports
	// true. It must not call back into the FaultFS.
	Match func(name string) bool

	// Nth, if positive, fires only on the Nth matching call (1-based).
	Nth int64
	// After, if positive, lets the first After matching calls through and
	// fires on the following ones.
	After int64
	// Times, if positive, stops the rule after it has fired Times times.
	Times int64
	// Probability, if positive, fires each otherwise eligible call with
	// this probability, drawn from Rand (required then). A draw is made
	// only for calls that Nth, After and Times allow and that no earlier
	// rule (in the order of Inject) has already failed, so a fixed seed
	// gives a fixed sequence of failures for a fixed sequence of calls and
	// rules.
	Probability float64
	// Rand is the seeded source for Probability.
	Rand *rand.Rand

	// Err is the error returned, wrapped in an *os.PathError (an
	// *os.LinkError for OpRename) naming the operation and the file; it
	// defaults to syscall.EIO. Check it with errors.Is.
	Err error

	// ShortBytes and ShortFraction apply to OpWrite only, and at most one
	// may be set: before failing, the write passes its first ShortBytes
	// bytes (at most all of them), or the first len(p)*ShortFraction bytes
	// rounded down, to the inner file, and returns that count with the
	// error (use io.ErrShortWrite or syscall.ENOSPC as Err for realism).
	// With both zero a failed write writes nothing.
	ShortBytes    int
	ShortFraction float64
}

// Event describes one operation a [FaultFS] completed successfully.
type Event struct {
	Op Op
	// Name is the file or directory name; for OpRename, the old name.
	Name string
	// NewName is the new name of an OpRename.
	NewName string
	// Off is the offset of an OpRead, OpWrite, OpAllocate or OpWriteBack,
	// and the new size of an OpTruncate.
	Off int64
	// Len is the number of bytes an OpRead or OpWrite transferred, the
	// length an OpMap mapped, and the length of an OpAllocate or
	// OpWriteBack range.
	Len int
}

// FaultFS wraps another [FS] and fails chosen calls with chosen errors,
// according to the [Rule]s injected into it. It also counts every call per
// [Op] and reports each successful one to the observers registered with
// [FaultFS.Observe]. A call that no rule fails is passed to the inner FS
// unchanged; a failed call does nothing (except the partial write of a
// short-write rule and the Close of a failed close, which always releases
// the file, as close(2) does).
//
// Over a [CrashFS] (NewFaultFS(crashFS)), a failed fdatasync never reaches
// the CrashFS, which keeps the pages dirty: a later fdatasync that
// succeeds makes them durable, where Linux, which marks them clean after a
// failed writeback, would lose them. That order models a process that
// dies at the failure, or a file it then throws away; to model the device
// failing under a process that goes on, put the CrashFS outside
// (NewCrashFS(faultFS)), which drops the failed writes for good.
//
// A FaultFS and its Files are safe for concurrent use. It retains the inner
// FS and the injected rules.
type FaultFS struct {
	inner FS

	calls     [numOps]atomic.Int64
	injected  [numOps]atomic.Int64
	observers atomic.Pointer[[]func(Event)] // copy on write, under mu

	// mu guards rules, including the per-rule counters in each ruleState,
	// and serializes writers of observers.
	mu    sync.Mutex
	rules []*ruleState
}

// ruleState is an injected rule and its counters, guarded by FaultFS.mu.
type ruleState struct {
	Rule
	seen  int64 // matching calls so far
	fired int64 // calls failed so far
}

// NewFaultFS returns a FaultFS over inner with no rules. It panics if inner
// is nil, or a nil pointer in an FS (see [IsNil]), rather than at the first
// call.
func NewFaultFS(inner FS) *FaultFS {
	if IsNil(inner) {
		panic(errors.New("vfs: NewFaultFS: nil inner FS"))
	}
	return &FaultFS{inner: inner}
}

// Inject adds a rule. Rules apply in the order they were injected: every
// matching rule counts a call, and the first one that fires decides its
// error. Inject panics if the rule is malformed (no valid Op, a negative
// count, a probability outside [0, 1], NaN included, or without Rand, a
// negative ShortBytes or a ShortFraction outside [0, 1], both of them set,
// a short write on an operation other than OpWrite). Safe for concurrent
// use.
func (f *FaultFS) Inject(r Rule) {
	if err := r.validate(); err != nil {
		panic(err)
	}
	if r.Err == nil {
		r.Err = syscall.EIO
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, &ruleState{Rule: r})
}

func (r *Rule) validate() error {
	switch {
	case r.Op <= 0 || r.Op >= numOps:
		return fmt.Errorf("vfs: FaultFS rule has invalid Op %v", r.Op)
	case r.Nth < 0 || r.After < 0 || r.Times < 0:
		return fmt.Errorf("vfs: FaultFS rule for %v has a negative Nth, After or Times", r.Op)
	case !(r.Probability >= 0 && r.Probability <= 1): // NaN too
		return fmt.Errorf("vfs: FaultFS rule for %v has Probability %v outside [0, 1]", r.Op, r.Probability)
	case r.Probability > 0 && r.Rand == nil:
		return fmt.Errorf("vfs: FaultFS rule for %v has a Probability but no Rand", r.Op)
	case r.ShortBytes < 0 || !(r.ShortFraction >= 0 && r.ShortFraction <= 1):
		return fmt.Errorf("vfs: FaultFS rule for %v has a negative ShortBytes or a ShortFraction outside [0, 1]", r.Op)
	case r.ShortBytes > 0 && r.ShortFraction > 0:
		return fmt.Errorf("vfs: FaultFS rule for %v sets both ShortBytes and ShortFraction", r.Op)
	case r.Op != OpWrite && (r.ShortBytes > 0 || r.ShortFraction > 0):
		return fmt.Errorf("vfs: FaultFS rule for %v asks for a short write", r.Op)
	}
	return nil
}

// Clear removes every rule; counters and observers are kept. Safe for
// concurrent use.
func (f *FaultFS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Count reports how many calls of op were made, including those that
// failed. Safe for concurrent use.
func (f *FaultFS) Count(op Op) int64 {
	if op <= 0 || op >= numOps {
		return 0
	}
	return f.calls[op].Load()
}

// Injected reports how many calls of op a rule failed. Safe for concurrent
// use.
func (f *FaultFS) Injected(op Op) int64 {
	if op <= 0 || op >= numOps {
		return 0
	}
	return f.injected[op].Load()
}

// Observe registers fn to be called after every successful operation, in
// the goroutine that made the call, before the call returns. Observers are
// called in the order registered, without any FaultFS lock held; fn must be
// safe for concurrent use if the FaultFS is used concurrently. Observe
// itself is safe for concurrent use. Like [FaultFS.Inject] with a malformed
// rule, it panics if fn is nil, rather than the next operation.
func (f *FaultFS) Observe(fn func(Event)) {
	if fn == nil {
		panic(errors.New("vfs: FaultFS.Observe: nil function"))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var next []func(Event)
	if old := f.observers.Load(); old != nil {
		next = append(next, *old...)
	}
	next = append(next, fn)
	f.observers.Store(&next)
}

// OnSync registers fn to be called with the file's name after every
// successful File.Sync (fdatasync), as [FaultFS.Observe] does. It panics if
// fn is nil.
func (f *FaultFS) OnSync(fn func(name string)) {
	if fn == nil {
		panic(errors.New("vfs: FaultFS.OnSync: nil function"))
	}
	f.Observe(func(e Event) {
		if e.Op == OpSync {
			fn(e.Name)
		}
	})
}

func (f *FaultFS) emit(e Event) {
	if obs := f.observers.Load(); obs != nil {
		for _, fn := range *obs {
			fn(e)
		}
	}
}

// fault is what a firing rule asks for.
type fault struct {
	err           error
	shortBytes    int
	shortFraction float64
}

// shortLen is how many of n bytes a failed write still writes.
func (ft *fault) shortLen(n int) int {
	if ft.shortFraction > 0 {
		return int(float64(n) * ft.shortFraction)
	}
	return min(ft.shortBytes, n)
}

// check counts a call of op on names and returns the fault of the first
// rule that fires, or nil.
func (f *FaultFS) check(op Op, names ...string) *fault {
	f.calls[op].Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	var chosen *fault
	for _, r := range f.rules {
		if r.Op != op || !r.matches(names) {
			continue
		}
		r.seen++
		if chosen != nil || !r.eligible() {
			continue
		}
		if r.Probability > 0 && r.Rand.Float64() >= r.Probability {
			continue
		}
		r.fired++
		chosen = &fault{err: r.Err, shortBytes: r.ShortBytes, shortFraction: r.ShortFraction}
	}
	if chosen != nil {
		f.injected[op].Add(1)
	}
	return chosen
}

// eligible reports whether Nth, After and Times allow the call just
// counted in seen. The caller holds FaultFS.mu.
func (r *ruleState) eligible() bool {
	return (r.Nth == 0 || r.seen == r.Nth) &&
		r.seen > r.After &&
		(r.Times == 0 || r.fired < r.Times)
}

func (r *ruleState) matches(names []string) bool {
	for _, name := range names {
		if (r.NameContains == "" || strings.Contains(name, r.NameContains)) &&
			(r.Match == nil || r.Match(name)) {
			return true
		}
	}
	return false
}

// opError wraps err as package os would for op on name.
func opError(op Op, name, newName string, err error) error {
	if op == OpRename {
		return &os.LinkError{Op: op.String(), Old: name, New: newName, Err: err}
	}
	return &os.PathError{Op: op.String(), Path: name, Err: err}
}

// OpenFile opens a file of the inner FS, unless a rule fails OpOpen.
func (f *FaultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if ft := f.check(OpOpen, name); ft != nil {
		return nil, opError(OpOpen, name, "", ft.err)
	}
	file, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	f.emit(Event{Op: OpOpen, Name: name})
	return &faultFile{fs: f, inner: file, name: name}, nil
}

// Remove removes a file of the inner FS, unless a rule fails OpRemove.
func (f *FaultFS) Remove(name string) error {
	if ft := f.check(OpRemove, name); ft != nil {
		return opError(OpRemove, name, "", ft.err)
	}
	if err := f.inner.Remove(name); err != nil {
		return err
	}
	f.emit(Event{Op: OpRemove, Name: name})
	return nil
}

// Rename renames a file of the inner FS, unless a rule matching either
// name fails OpRename.
func (f *FaultFS) Rename(oldname, newname string) error {
	if ft := f.check(OpRename, oldname, newname); ft != nil {
		return opError(OpRename, oldname, newname, ft.err)
	}
	if err := f.inner.Rename(oldname, newname); err != nil {
		return err
	}
	f.emit(Event{Op: OpRename, Name: oldname, NewName: newname})
	return nil
}

// MkdirAll creates directories in the inner FS, unless a rule fails
// OpMkdirAll.
func (f *FaultFS) MkdirAll(dir string, perm os.FileMode) error {
	if ft := f.check(OpMkdirAll, dir); ft != nil {
		return opError(OpMkdirAll, dir, "", ft.err)
	}
	if err := f.inner.MkdirAll(dir, perm); err != nil {
		return err
	}
	f.emit(Event{Op: OpMkdirAll, Name: dir})
	return nil
}

// CheckDir asks the inner FS (see [DirChecker]), unless a rule fails
// OpCheckDir. An inner FS that cannot tell accepts dir, and the call is
// still counted and may still be failed: the store makes it whatever its
// FS.
func (f *FaultFS) CheckDir(dir string) error {
	if ft := f.check(OpCheckDir, dir); ft != nil {
		return opError(OpCheckDir, dir, "", ft.err)
	}
	if err := CheckDir(f.inner, dir); err != nil {
		return err
	}
	f.emit(Event{Op: OpCheckDir, Name: dir})
	return nil
}

// ReadDir lists a directory of the inner FS, unless a rule fails OpReadDir.
func (f *FaultFS) ReadDir(dir string) ([]string, error) {
	if ft := f.check(OpReadDir, dir); ft != nil {
		return nil, opError(OpReadDir, dir, "", ft.err)
	}
	names, err := f.inner.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	f.emit(Event{Op: OpReadDir, Name: dir})
	return names, nil
}

// SyncDir syncs a directory of the inner FS, unless a rule fails OpSyncDir.
func (f *FaultFS) SyncDir(dir string) error {
	if ft := f.check(OpSyncDir, dir); ft != nil {
		return opError(OpSyncDir, dir, "", ft.err)
	}
	if err := f.inner.SyncDir(dir); err != nil {
		return err
	}
	f.emit(Event{Op: OpSyncDir, Name: dir})
	return nil
}

// Lock takes a lock of the inner FS, unless a rule fails OpLock. Its
// release, the Close of the returned Closer, can be failed by OpUnlock.
func (f *FaultFS) Lock(name string) (io.Closer, error) {
	if ft := f.check(OpLock, name); ft != nil {
		return nil, opError(OpLock, name, "", ft.err)
	}
	c, err := f.inner.Lock(name)
	if err != nil {
		return nil, err
	}
	f.emit(Event{Op: OpLock, Name: name})
	return &faultLock{fs: f, inner: c, name: name}, nil
}

// faultLock is a lock a FaultFS took. Its fields are set once at Lock.
type faultLock struct {
	fs    *FaultFS
	inner io.Closer
	name  string
}

// Close releases the inner lock even when a rule fails OpUnlock, as
// close(2) releases the descriptor, and with it the lock, even when it
// reports an error.
func (fl *faultLock) Close() error {
	ft := fl.fs.check(OpUnlock, fl.name)
	err := fl.inner.Close()
	if ft != nil {
		injected := opError(OpUnlock, fl.name, "", ft.err)
		if err != nil {
			return errors.Join(injected, err)
		}
		return injected
	}
	if err != nil {
		return err
	}
	fl.fs.emit(Event{Op: OpUnlock, Name: fl.name})
	return nil
}

// faultFile is a File of a FaultFS. Its fields are set once at open.
type faultFile struct {
	fs    *FaultFS
	inner File
	name  string
}

func (ff *faultFile) Name() string { return ff.inner.Name() }

func (ff *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if ft := ff.fs.check(OpRead, ff.name); ft != nil {
		return 0, opError(OpRead, ff.name, "", ft.err)
	}
	n, err := ff.inner.ReadAt(p, off)
	// io.EOF with some bytes read is the ReaderAt way to report a read
	// that reached the end; report the bytes that were transferred.
	if err == nil || (errors.Is(err, io.EOF) && n > 0) {
		ff.fs.emit(Event{Op: OpRead, Name: ff.name, Off: off, Len: n})
	}
	return n, err
}

func (ff *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if ft := ff.fs.check(OpWrite, ff.name); ft != nil {
		n := 0
		if k := ft.shortLen(len(p)); k > 0 {
			var err error
			if n, err = ff.inner.WriteAt(p[:k], off); err != nil {
				return n, err
			}
		}
		return n, opError(OpWrite, ff.name, "", ft.err)
	}
	n, err := ff.inner.WriteAt(p, off)
	if err != nil {
		return n, err
	}
	ff.fs.emit(Event{Op: OpWrite, Name: ff.name, Off: off, Len: n})
	return n, nil
}

func (ff *faultFile) Sync() error {
	if ft := ff.fs.check(OpSync, ff.name); ft != nil {
		return opError(OpSync, ff.name, "", ft.err)
	}
	if err := ff.inner.Sync(); err != nil {
		return err
	}
	ff.fs.emit(Event{Op: OpSync, Name: ff.name})
	return nil
}

func (ff *faultFile) Truncate(size int64) error {
	if ft := ff.fs.check(OpTruncate, ff.name); ft != nil {
		return opError(OpTruncate, ff.name, "", ft.err)
	}
	if err := ff.inner.Truncate(size); err != nil {
		return err
	}
	ff.fs.emit(Event{Op: OpTruncate, Name: ff.name, Off: size})
	return nil
}

func (ff *faultFile) Size() (int64, error) {
	if ft := ff.fs.check(OpSize, ff.name); ft != nil {
		return 0, opError(OpSize, ff.name, "", ft.err)
	}
	size, err := ff.inner.Size()
	if err != nil {
		return 0, err
	}
	ff.fs.emit(Event{Op: OpSize, Name: ff.name})
	return size, nil
}

func (ff *faultFile) Map(length int) (mmap.MMap, error) {
	if ft := ff.fs.check(OpMap, ff.name); ft != nil {
		return nil, opError(OpMap, ff.name, "", ft.err)
	}
	m, err := ff.inner.Map(length)
	if err != nil {
		return nil, err
	}
	ff.fs.emit(Event{Op: OpMap, Name: ff.name, Len: len(m)})
	return m, nil
}

// Allocate allocates through the inner file, unless a rule fails
// OpAllocate. Where the inner file is no [Allocator] it fails with
// EOPNOTSUPP, as fallocate(2) does on a file system without it.
func (ff *faultFile) Allocate(off, n int64) error {
	if ft := ff.fs.check(OpAllocate, ff.name); ft != nil {
		return opError(OpAllocate, ff.name, "", ft.err)
	}
	a, ok := ff.inner.(Allocator)
	if !ok {
		return opError(OpAllocate, ff.name, "", syscall.EOPNOTSUPP)
	}
	if err := a.Allocate(off, n); err != nil {
		return err
	}
	ff.fs.emit(Event{Op: OpAllocate, Name: ff.name, Off: off, Len: int(n)})
	return nil
}

// WriteBack writes back through the inner file, unless a rule fails
// OpWriteBack. Where the inner file is no [WriteBacker] it does nothing
// (the next fdatasync writes the range), but refuses, as
// sync_file_range(2) does, a negative offset or length (EINVAL).
func (ff *faultFile) WriteBack(off, n int64) error {
	if ft := ff.fs.check(OpWriteBack, ff.name); ft != nil {
		return opError(OpWriteBack, ff.name, "", ft.err)
	}
	if wb, ok := ff.inner.(WriteBacker); ok {
		if err := wb.WriteBack(off, n); err != nil {
			return err
		}
	} else if off < 0 || n < 0 {
		return opError(OpWriteBack, ff.name, "", syscall.EINVAL)
	}
	ff.fs.emit(Event{Op: OpWriteBack, Name: ff.name, Off: off, Len: int(n)})
	return nil
}

// Close closes the inner file even when a rule fails OpClose, as close(2)
// releases the descriptor even when it reports an error.
func (ff *faultFile) Close() error {
	ft := ff.fs.check(OpClose, ff.name)
	err := ff.inner.Close()
	if ft != nil {
		injected := opError(OpClose, ff.name, "", ft.err)
		if err != nil {
			return errors.Join(injected, err)
		}
		return injected
	}
	if err != nil {
		return err
	}
	ff.fs.emit(Event{Op: OpClose, Name: ff.name})
	return nil
}
