package vfs

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
)

// MkdirAllDurable is fs.MkdirAll(dir, perm) made durable: once it returns,
// a power loss cannot take dir, or anything later made durable in it, away.
//
// It syncs the parent of every directory of the path, from the top down,
// whether MkdirAll created it or found it: a directory that exists may be
// one an earlier call created and then died (or failed) before the sync
// that made its name durable, and nothing tells such a directory from one
// that has been durable for years. The top of the path is taken as
// durable: the root of an absolute path, which has no name to lose, and,
// for a relative path, the working directory, which is the caller's. So
// "/var/lib/store/wal" syncs "/", "/var", "/var/lib" and "/var/lib/store",
// and "store/wal" syncs "." and "store". It costs one directory sync per
// component of the path, each almost free where its directory holds no
// unsynced change (on ext4 it still flushes the device cache); the store
// calls it when it opens or makes a directory, never on a write's path. A
// directory it found in a parent it may not read (permission denied) is
// taken as durable, since it cannot sync that parent; a directory it made
// must have its parent synced, and an error names the directory that
// failed. A nil fs (see [IsNil]) is refused with an error wrapping io/fs.ErrInvalid.
func MkdirAllDurable(fs FS, dir string, perm os.FileMode) error {
	if IsNil(fs) {
		return fmt.Errorf("vfs: mkdir %s: %w", dir, errNilFS)
	}
	made := map[string]bool{} // the directories this call makes
	for d := filepath.Clean(dir); ; {
		_, err := fs.ReadDir(d)
		if err == nil || !errors.Is(err, iofs.ErrNotExist) {
			break // there (or unreadable: MkdirAll will say why)
		}
		made[d] = true
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if err := fs.MkdirAll(dir, perm); err != nil {
		return err
	}
	var named []string // dir first, then each directory above it the path names
	for d := filepath.Clean(dir); filepath.Dir(d) != d; d = filepath.Dir(d) {
		if filepath.Base(d) != ".." { // names a directory above, never one made here
			named = append(named, d)
		}
	}
	for i := len(named) - 1; i >= 0; i-- {
		err := fs.SyncDir(filepath.Dir(named[i]))
		if err != nil && errors.Is(err, iofs.ErrPermission) && !made[named[i]] {
			// A directory that was there, in a parent this process may
			// not read (an execute-only home directory, say): no call of
			// this process made it (it makes directories it can read),
			// and the parent cannot be synced. Taken as durable.
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}
