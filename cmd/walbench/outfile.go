package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"

	"github.com/walbroker/walbroker/vfs"
)

// The files walbench writes for the operator (-json, BENCH.md) are
// replaced whole or not at all: the new content goes to a temporary file
// beside the old one, which is renamed over it once complete and synced.
// A run that fails, is interrupted before it measured anything, or meets
// a full disk leaves the file that was there as it was, and walbench
// never removes a file it did not make.

// pendingFile is the replacement of one regular file, made before the
// content is known so that a name that cannot be written fails at once.
// Until commit renames the temporary file over the target, the target
// (if there is one) is not touched; discard removes the temporary file
// and nothing else. Not safe for concurrent use.
type pendingFile struct {
	fs       vfs.FS
	target   string      // the name given, its symbolic links resolved: what commit replaces
	tmp      string      // the temporary file, in target's directory
	f        vfs.File    // tmp, open for writing; nil once closed
	existed  bool        // target was there when the pendingFile was made
	perm     os.FileMode // target's permission bits, which the replacement keeps
	done     bool        // committed or discarded
	replaced bool        // the rename was made: target holds the new content
}

// newPendingFile prepares the replacement of the file name (or its
// creation): it refuses a name that is not a regular file or a new one,
// and makes the temporary file beside it, which proves that its directory
// can be written. A symbolic link is followed: the file it points to is
// replaced, and the link stays. The caller calls discard unless commit
// succeeds.
func newPendingFile(fsys vfs.FS, name string) (*pendingFile, error) {
	p := &pendingFile{fs: fsys, target: name, perm: 0o644}
	fi, err := os.Stat(name)
	switch {
	case err == nil && fi.IsDir():
		return nil, errors.New("is a directory, not a file")
	case err == nil && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("is %s, not a regular file: walbench writes a file it can replace whole (write one, then copy it where it should go)", fileKind(fi.Mode()))
	case err == nil:
		p.existed, p.perm = true, fi.Mode().Perm()
		if p.target, err = filepath.EvalSymlinks(name); err != nil {
			return nil, err
		}
	case errors.Is(err, fs.ErrNotExist):
		if li, lerr := os.Lstat(name); lerr == nil && li.Mode()&fs.ModeSymlink != 0 {
			dest, _ := os.Readlink(name)
			return nil, fmt.Errorf("is a symbolic link to %s, which does not exist", dest)
		}
	default:
		return nil, unwrapPath(err)
	}
	dir, base := filepath.Dir(p.target), filepath.Base(p.target)
	for range 100 {
		p.tmp = filepath.Join(dir, fmt.Sprintf(".%s.walbench-%d.tmp", base, rand.Uint32()))
		p.f, err = fsys.OpenFile(p.tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, p.perm)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cannot make a file in %s: %w", dir, unwrapPath(err))
	}
	return p, nil
}

// commit writes data to the temporary file, syncs it, and renames it over
// the target. After a failure the target is as it was and the temporary
// file is removed, unless the failure is the sync of the directory after
// the rename: the target is then replaced, but perhaps not durably.
func (p *pendingFile) commit(data []byte) (err error) {
	if p.done {
		return errors.New("already written or discarded")
	}
	defer func() {
		if err != nil && !p.done {
			err = errors.Join(err, p.discard())
		}
	}()
	if _, err := p.f.WriteAt(data, 0); err != nil {
		return unwrapPath(err)
	}
	if err := p.f.Sync(); err != nil {
		return unwrapPath(err)
	}
	f := p.f
	p.f = nil
	if err := f.Close(); err != nil {
		return unwrapPath(err)
	}
	if p.existed {
		// Created under the umask: give it the bits of the file it replaces.
		if err := os.Chmod(p.tmp, p.perm); err != nil {
			return unwrapPath(err)
		}
	}
	if err := p.fs.Rename(p.tmp, p.target); err != nil {
		return unwrapPath(err)
	}
	p.done, p.replaced = true, true
	if err := p.fs.SyncDir(filepath.Dir(p.target)); err != nil {
		return fmt.Errorf("written, but the sync of its directory failed, so it may not survive a crash: %w", unwrapPath(err))
	}
	return nil
}

// discard removes the temporary file; the target is left as it was. It
// does nothing after commit or an earlier discard.
func (p *pendingFile) discard() error {
	if p.done {
		return nil
	}
	p.done = true
	var err error
	if p.f != nil {
		err = p.f.Close()
		p.f = nil
	}
	if rerr := p.fs.Remove(p.tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// untouched says, after a failed commit or a discard, what became of the
// file that was there: "" when there was none.
func (p *pendingFile) untouched() string {
	if p.existed && !p.replaced {
		return "; the file that was there is left as it was"
	}
	return ""
}

// replaceFile replaces the file name with data, whole or not at all.
func replaceFile(fsys vfs.FS, name string, data []byte) error {
	p, err := newPendingFile(fsys, name)
	if err != nil {
		return err
	}
	return p.commit(data)
}

// fileKind says what a file that is not a regular one is.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file (" + m.Type().String() + ")"
}

// unwrapPath is the error of an *fs.PathError or *os.LinkError, whose
// paths the caller names already (or that name the temporary file); any
// other error as it is.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// prepareJSON makes -json's temporary file now, so that a name that cannot
// be written fails before the measuring, not after it; the file named is
// not touched until the report is whole (see pendingFile). finish, which
// the caller defers, says on stderr when no report was written and
// removes the temporary file; it reports false when that removal failed.
func prepareJSON(fsys vfs.FS, name string, stderr io.Writer, made func(path string) (keep func())) (out *pendingFile, finish func() bool, err error) {
	out, err = newPendingFile(fsys, name)
	if err != nil {
		return nil, nil, err
	}
	keep := made(out.tmp)
	if out.existed {
		fmt.Fprintf(stderr, "walbench: -json %s exists: this run's report will replace it when the run ends\n", name)
	}
	return out, func() bool {
		defer keep()
		if !out.done {
			fmt.Fprintf(stderr, "walbench: -json %s: not written%s\n", name, out.untouched())
		}
		if err := out.discard(); err != nil {
			fmt.Fprintf(stderr, "walbench: -json %s: remove the temporary file %s: %v\n", name, out.tmp, err)
			return false
		}
		return true
	}, nil
}

// startCPUProfile starts -cpuprofile's profile of the run, kept in memory
// (a few hundred KiB): like the report, it replaces the file named only
// once whole, and only after a run whose measuring did not fail (an
// interrupted one included: a failure to write the report or print the
// tables leaves the profile of the measuring as good). stop, which the
// caller defers, ends the profile and writes it, or, when the measuring
// failed, says on stderr that the file was left as it was; it reports
// false when the profile could not be written.
func startCPUProfile(fsys vfs.FS, name string, stderr io.Writer, made func(path string) (keep func())) (stop func(measuringFailed bool) bool, err error) {
	out, err := newPendingFile(fsys, name)
	if err != nil {
		return nil, err
	}
	keep := made(out.tmp)
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		err = errors.Join(err, out.discard())
		keep()
		return nil, err
	}
	return func(measuringFailed bool) bool {
		defer keep()
		pprof.StopCPUProfile()
		if measuringFailed {
			if err := out.discard(); err != nil {
				fmt.Fprintf(stderr, "walbench: -cpuprofile %s: remove the temporary file %s: %v\n", name, out.tmp, err)
			}
			fmt.Fprintf(stderr, "walbench: -cpuprofile %s: not written, the run failed%s\n", name, out.untouched())
			return true
		}
		if err := out.commit(prof.Bytes()); err != nil {
			fmt.Fprintf(stderr, "walbench: -cpuprofile %s: %v%s\n", name, err, out.untouched())
			return false
		}
		return true
	}, nil
}
