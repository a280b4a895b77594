package vfs

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// requireForeign checks that err refuses name as [Default] promises: it
// wraps ErrForeign and fs.ErrPermission, names the file and says why.
func requireForeign(t *testing.T, err error, name, why string) {
	t.Helper()
	require.ErrorIs(t, err, ErrForeign)
	require.ErrorIs(t, err, fs.ErrPermission)
	require.ErrorContains(t, err, name)
	require.ErrorContains(t, err, why)
}

// A symbolic link where a store's file should be is refused, whether the
// store reads the file, creates it, or locks it, and the file it names is
// left as it was: a LOCK linked to another file used to truncate it.
func TestDefaultOpensNoSymbolicLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	require.NoError(t, os.WriteFile(target, []byte("keep me"), 0o600))
	for _, tc := range []struct {
		name string
		open func(name string) error
	}{
		{"read", func(name string) error { _, err := Default.OpenFile(name, os.O_RDONLY, 0); return err }},
		{"write", func(name string) error { _, err := Default.OpenFile(name, os.O_RDWR, 0o600); return err }},
		{"create", func(name string) error {
			_, err := Default.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
			return err
		}},
		{"lock", func(name string) error { _, err := Default.Lock(name); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			link := filepath.Join(dir, "link-"+tc.name)
			require.NoError(t, os.Symlink(target, link))
			requireForeign(t, tc.open(link), link, "is a symbolic link (to "+target+")")
			dangling := filepath.Join(dir, "dangling-"+tc.name)
			require.NoError(t, os.Symlink(filepath.Join(dir, "made-"+tc.name), dangling))
			requireForeign(t, tc.open(dangling), dangling, "is a symbolic link")
			require.NoFileExists(t, filepath.Join(dir, "made-"+tc.name), "nothing was created through the link")
		})
	}
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "keep me", string(b))

	// The directory named may be a link: that is the operator's choice.
	real := filepath.Join(dir, "real")
	require.NoError(t, os.Mkdir(real, 0o700))
	require.NoError(t, os.Symlink(real, filepath.Join(dir, "store")))
	f, err := Default.OpenFile(filepath.Join(dir, "store", "seg"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.FileExists(t, filepath.Join(real, "seg"))
}

// A named pipe where a store's file should be is refused at once, not
// waited on for a writer that never comes.
func TestDefaultRefusesANamedPipeWithoutWaiting(t *testing.T) {
	name := filepath.Join(t.TempDir(), "00000001.seg")
	require.NoError(t, unix.Mkfifo(name, 0o600))
	done := make(chan error, 1)
	go func() {
		_, err := Default.OpenFile(name, os.O_RDONLY, 0)
		done <- err
	}()
	select {
	case err := <-done:
		requireForeign(t, err, name, "is not a regular file")
	case <-time.After(time.Minute):
		// Unblock the open, so the test ends with its report.
		w, err := os.OpenFile(name, os.O_WRONLY, 0)
		if err == nil {
			_ = w.Close()
		}
		t.Fatal("the open of a named pipe waited for a writer")
	}
}

// A file another user owns is refused (a file of root's is not): in a
// directory others can write, it was planted. As root the test gives the file to another uid; otherwise it
// sees the file as another user's.
func TestDefaultRefusesAFileAnotherUserOwns(t *testing.T) {
	const other = 4242
	// giveAway makes path look owned by other: for real as root, through
	// ownerOf otherwise. The names in rooted look owned by root.
	given, rooted := map[string]bool{}, map[string]bool{}
	if os.Geteuid() != 0 {
		real := ownerOf
		ownerOf = func(fi fs.FileInfo) (uint32, bool) {
			if given[fi.Name()] {
				return other, true
			}
			if rooted[fi.Name()] {
				return 0, true
			}
			return real(fi)
		}
		t.Cleanup(func() { ownerOf = real })
	}
	giveAway := func(path string) {
		if os.Geteuid() == 0 {
			require.NoError(t, os.Chown(path, other, other))
		} else {
			given[filepath.Base(path)] = true
		}
	}

	dir := t.TempDir()
	name := filepath.Join(dir, "00000001.seg")
	require.NoError(t, os.WriteFile(name, []byte("planted"), 0o666))
	giveAway(name)
	_, err := Default.OpenFile(name, os.O_RDONLY, 0)
	requireForeign(t, err, name, "is owned by uid 4242")
	_, err = Default.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	requireForeign(t, err, name, "chown it if it belongs to this store")
	_, err = Default.Lock(name)
	requireForeign(t, err, name, "another user may have planted it")
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	require.Equal(t, "planted", string(b), "the refused file is left as it was")

	// A file of the process's own user opens.
	mine := filepath.Join(dir, "00000002.seg")
	require.NoError(t, os.WriteFile(mine, []byte("mine"), 0o600))
	f, err := Default.OpenFile(mine, os.O_RDONLY, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	// So does one of root's (as root, every file made here is).
	roots := filepath.Join(dir, "00000003.seg")
	require.NoError(t, os.WriteFile(roots, []byte("root's"), 0o600))
	rooted[filepath.Base(roots)] = true
	f, err = Default.OpenFile(roots, os.O_RDONLY, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	// One of the directory's owner is refused too when that is another
	// user: in a store directory others can write, a planter can replace
	// index/ with a directory of their own, and fill it.
	theirs := filepath.Join(t.TempDir(), "index")
	require.NoError(t, os.Mkdir(theirs, 0o777))
	giveAway(theirs)
	cp := filepath.Join(theirs, "checkpoint")
	require.NoError(t, os.WriteFile(cp, []byte("theirs"), 0o666))
	giveAway(cp)
	_, err = Default.OpenFile(cp, os.O_RDONLY, 0)
	requireForeign(t, err, cp, "is owned by uid 4242")
}

// CheckDir refuses a directory inside a store as Default refuses a file:
// a symbolic link (even to a directory of the process's own user), a
// file where a directory should be, and a directory another user owns.
// A missing one is no error, and one of the process's own user is
// accepted. The file systems that wrap another ask the one they wrap.
func TestCheckDirRefusesWhatAStoreDidNotMake(t *testing.T) {
	const other = 4242
	given := map[string]bool{}
	if os.Geteuid() != 0 {
		real := ownerOf
		ownerOf = func(fi fs.FileInfo) (uint32, bool) {
			if given[fi.Name()] {
				return other, true
			}
			return real(fi)
		}
		t.Cleanup(func() { ownerOf = real })
	}
	dir := t.TempDir()
	mine := filepath.Join(dir, "index")
	require.NoError(t, os.Mkdir(mine, 0o700))
	link := filepath.Join(dir, "linked")
	require.NoError(t, os.Symlink(mine, link))
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	theirs := filepath.Join(dir, "theirs")
	require.NoError(t, os.Mkdir(theirs, 0o777))
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(theirs, other, other))
	} else {
		given["theirs"] = true
	}

	for _, fsys := range []FS{Default, NewCrashFS(Default), NewFaultFS(Default)} {
		require.NoError(t, CheckDir(fsys, mine))
		require.NoError(t, CheckDir(fsys, filepath.Join(dir, "missing")))
		requireForeign(t, CheckDir(fsys, link), link, "is a symbolic link (to "+mine+")")
		requireForeign(t, CheckDir(fsys, file), file, "not a directory")
		requireForeign(t, CheckDir(fsys, theirs), theirs, "is owned by uid 4242")
	}
}
