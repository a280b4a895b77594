package vfs

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
)

// copyChunk is how much CopyFile reads and writes at a time.
const copyChunk = 1 << 20

// CopyFile copies the file src to dst, which must not exist, and makes the
// copy's data durable (fdatasync). It does not sync dst's directory: the
// caller does, once for all the files it copies there. If the copy fails
// once dst is made, it removes dst, so that the copy may be tried again.
// A nil fs (see [IsNil]) is refused with an error wrapping io/fs.ErrInvalid.
func CopyFile(fs FS, src, dst string) error {
	if IsNil(fs) {
		return fmt.Errorf("vfs: copy %s to %s: %w", src, dst, errNilFS)
	}
	in, err := fs.OpenFile(src, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	size, err := in.Size()
	if err != nil {
		return err
	}
	out, err := fs.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, min(size, copyChunk))
	for off := int64(0); off < size && err == nil; off += int64(len(buf)) {
		n := min(int64(len(buf)), size-off)
		var got int
		if got, err = in.ReadAt(buf[:n], off); err == nil || int64(got) == n {
			_, err = out.WriteAt(buf[:n], off)
		} else {
			err = fmt.Errorf("copy %s: read %d of %d bytes at offset %d: %w", src, got, n, off, err)
		}
	}
	if err == nil {
		err = out.Sync()
	}
	if err = errors.Join(err, out.Close()); err != nil {
		return errors.Join(err, fs.Remove(dst))
	}
	return nil
}

// WriteFile creates the file path, which must not exist (0600), holding
// data, and makes its data durable (fdatasync). It does not sync path's
// directory. On failure it removes the file it made. A nil fs (see [IsNil]) is refused
// with an error wrapping io/fs.ErrInvalid.
func WriteFile(fs FS, path string, data []byte) error {
	if IsNil(fs) {
		return fmt.Errorf("vfs: write %s: %w", path, errNilFS)
	}
	f, err := fs.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := writeSynced(f, data); err != nil {
		return errors.Join(err, fs.Remove(path))
	}
	return nil
}

// writeSynced writes data at the start of f, fdatasyncs it and closes it.
func writeSynced(f File, data []byte) error {
	var err error
	if len(data) > 0 {
		_, err = f.WriteAt(data, 0)
	}
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// CreateEmpty creates the file path, empty, and fails if anything is
// there. It syncs neither the file nor its directory. A nil fs (see [IsNil]) is refused
// with an error wrapping io/fs.ErrInvalid.
func CreateEmpty(fs FS, path string) error {
	if IsNil(fs) {
		return fmt.Errorf("vfs: create %s: %w", path, errNilFS)
	}
	f, err := fs.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// ReplaceFile makes path hold data, durably: it writes data to path+".tmp"
// (created 0600, or truncated), fdatasyncs it, renames it over path and
// syncs path's directory. A crash before it returns leaves path as it
// was, or holding data, whole either way (and perhaps the .tmp file,
// which the next call truncates). One that fails before the rename
// removes the .tmp file. A nil fs (see [IsNil]) is refused with an error
// wrapping io/fs.ErrInvalid, and so is the empty path, which names no
// file (its temporary file would be ".tmp" in the working directory).
func ReplaceFile(fs FS, path string, data []byte) error {
	if IsNil(fs) {
		return fmt.Errorf("vfs: replace %s: %w", path, errNilFS)
	}
	if path == "" {
		return fmt.Errorf("vfs: replace: empty path: %w", iofs.ErrInvalid)
	}
	tmp := path + ".tmp"
	f, err := fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err = writeSynced(f, data); err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		// The temporary file holds nothing path does: a failed replace
		// leaves the directory as it found it, and the same replace can
		// be tried again.
		return errors.Join(err, fs.Remove(tmp))
	}
	return fs.SyncDir(filepath.Dir(path))
}

// ReadFile returns the contents of the file path, which must be at most
// limit bytes long. An error opening it is returned as it is (check a
// missing file with errors.Is and io/fs.ErrNotExist). A nil fs (see [IsNil]) is refused
// with an error wrapping io/fs.ErrInvalid.
func ReadFile(fs FS, path string, limit int64) ([]byte, error) {
	if IsNil(fs) {
		return nil, fmt.Errorf("vfs: read %s: %w", path, errNilFS)
	}
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d it may hold", path, size, limit)
	}
	data := make([]byte, size)
	if n, err := f.ReadAt(data, 0); err != nil && !(errors.Is(err, io.EOF) && int64(n) == size) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}
