package vfs

import (
	"fmt"
	iofs "io/fs"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCopyFileRemovesTheCopyWhenItFails: whatever fails once dst exists
// (a read, a write, the fdatasync, a source that is a directory), dst is
// removed and the copy can be tried again. It used to stay, and the retry
// failed with EEXIST.
func TestCopyFileRemovesTheCopyWhenItFails(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.WriteFile(src, []byte("hello"), 0o600))
	for _, tc := range []struct {
		name string
		src  string
		rule Rule // fires once, when Op is set
	}{
		{"read", src, Rule{Op: OpRead, NameContains: "src"}},
		{"write", src, Rule{Op: OpWrite, NameContains: "dst"}},
		{"fdatasync", src, Rule{Op: OpSync, NameContains: "dst"}},
		{"close", src, Rule{Op: OpClose, NameContains: "dst"}},
		{"source is a directory", dir, Rule{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ffs := NewFaultFS(Default)
			if tc.rule.Op != 0 {
				tc.rule.Times = 1
				ffs.Inject(tc.rule)
			}
			dst := filepath.Join(t.TempDir(), "dst")
			err := CopyFile(ffs, tc.src, dst)
			require.Error(t, err)
			if tc.rule.Op != 0 {
				require.ErrorIs(t, err, syscall.EIO)
			}
			require.NoFileExists(t, dst)
			if tc.src == src {
				require.NoError(t, CopyFile(ffs, src, dst), "tried again")
				got, err := os.ReadFile(dst)
				require.NoError(t, err)
				require.Equal(t, "hello", string(got))
			}
		})
	}
}

// TestSyncDirRefusesAFile: fsync of a regular file succeeds, so SyncDir of
// one used to report a directory synced when none was; a CrashFS took its
// entries for durable. It fails with ENOTDIR, and changes nothing.
func TestSyncDirRefusesAFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	require.ErrorIs(t, Default.SyncDir(file), syscall.ENOTDIR)
	require.ErrorIs(t, NewFaultFS(Default).SyncDir(file), syscall.ENOTDIR)
	require.ErrorIs(t, NewCrashFS(Default).SyncDir(file), syscall.ENOTDIR)
	require.ErrorIs(t, Default.SyncDir(filepath.Join(dir, "missing")), os.ErrNotExist)
	require.NoError(t, Default.SyncDir(dir))
}

// TestMapRefusesALengthOutsideTheFile: Map(-1) used to map the whole
// file, and a length past the file's size succeeded, with pages that fault
// when touched. Map maps the first length bytes, so length is in [1, size].
func TestMapRefusesALengthOutsideTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte("hello"), 0o600))
	for name, fs := range map[string]FS{"Default": Default, "FaultFS": NewFaultFS(Default), "CrashFS": NewCrashFS(Default)} {
		f, err := fs.OpenFile(path, os.O_RDONLY, 0)
		require.NoError(t, err)
		for _, n := range []int{-1, 0, 6, 4096, 1 << 20} {
			m, err := f.Map(n)
			require.ErrorIs(t, err, syscall.EINVAL, "%s: Map(%d)", name, n)
			require.Nil(t, m)
		}
		for _, n := range []int{1, 5} {
			m, err := f.Map(n)
			require.NoError(t, err, "%s: Map(%d)", name, n)
			require.Equal(t, "hello"[:n], string(m))
			require.NoError(t, m.Unmap())
		}
		require.NoError(t, f.Close())
	}
}

// TestResolveRefusesTheEmptyPath: it used to resolve to the working
// directory, a place the caller never named. The refusal wraps
// io/fs.ErrInvalid, as that of a path holding a NUL byte does, and as
// IsLink's of the empty path does.
func TestResolveRefusesTheEmptyPath(t *testing.T) {
	r, err := Resolve("")
	require.ErrorIs(t, err, iofs.ErrInvalid)
	require.ErrorContains(t, err, "empty path")
	require.Empty(t, r)
}

// TestResolveFollowsASymlinkToAMissingPlace: a symbolic link to a place
// that does not exist names that place (a file created through it lands
// there), so both resolve alike. The link used to resolve to itself.
func TestResolveFollowsASymlinkToAMissingPlace(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	target := filepath.Join(dir, "target")
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "abs")))
	require.NoError(t, os.Symlink("target", filepath.Join(dir, "rel")))
	require.NoError(t, os.Symlink("abs", filepath.Join(dir, "chain")))
	require.NoError(t, os.Symlink(dir, filepath.Join(dir, "dirlink")))
	for _, name := range []string{"abs", "rel", "chain", "dirlink/abs", "dirlink/rel"} {
		for _, sub := range []string{"", "sub", "sub/deeper"} {
			got, err := Resolve(filepath.Join(dir, name, sub))
			require.NoError(t, err, "%s/%s", name, sub)
			require.Equal(t, filepath.Join(target, sub), got, "%s/%s", name, sub)
		}
	}
	got, err := Resolve(target)
	require.NoError(t, err)
	require.Equal(t, target, got)

	// Creating through the link puts the file where Resolve said.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rel"), []byte("x"), 0o600))
	require.FileExists(t, target)
	got, err = Resolve(filepath.Join(dir, "chain"))
	require.NoError(t, err)
	require.Equal(t, target, got, "once the place exists")

	// A cycle is refused.
	require.NoError(t, os.Symlink("loop", filepath.Join(dir, "loop")))
	_, err = Resolve(filepath.Join(dir, "loop", "x"))
	require.Error(t, err)
}

// TestFaultFSWriteBackRefusesANegativeRange: where the inner file cannot
// write back (a CrashFS's), the FaultFS does nothing but still refuses a
// range sync_file_range(2) refuses.
func TestFaultFSWriteBackRefusesANegativeRange(t *testing.T) {
	ffs := NewFaultFS(NewCrashFS(Default))
	f := openRW(t, ffs, filepath.Join(t.TempDir(), "f"))
	wb := f.(WriteBacker)
	require.ErrorIs(t, wb.WriteBack(-1, 10), syscall.EINVAL)
	require.ErrorIs(t, wb.WriteBack(0, -1), syscall.EINVAL)
	require.NoError(t, wb.WriteBack(0, 0))
}

// requirePanicsWith checks that fn panics with an error whose message
// contains want.
func requirePanicsWith(t *testing.T, want string, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		require.NotNil(t, r, "no panic, want one with %q", want)
		err, ok := r.(error)
		require.True(t, ok, "panicked with %v, not an error", r)
		require.ErrorContains(t, err, want)
	}()
	fn()
}

// TestFaultFSRefusesAMalformedRuleOrObserverAtOnce: a NaN Probability
// passed Inject's check and then fired on every call; a NaN ShortFraction
// passed too. A nil observer, or a nil inner FS, was accepted and panicked
// deep inside the next operation. Each now panics where it is given, as
// Inject documents for a malformed rule, and leaves the FaultFS as it was.
func TestFaultFSRefusesAMalformedRuleOrObserverAtOnce(t *testing.T) {
	ffs := NewFaultFS(Default)
	requirePanicsWith(t, "Probability NaN", func() {
		ffs.Inject(Rule{Op: OpSyncDir, Probability: math.NaN(), Rand: newRand(1)})
	})
	requirePanicsWith(t, "ShortFraction", func() {
		ffs.Inject(Rule{Op: OpWrite, ShortFraction: math.NaN()})
	})
	requirePanicsWith(t, "nil function", func() { ffs.Observe(nil) })
	requirePanicsWith(t, "nil function", func() { ffs.OnSync(nil) })
	requirePanicsWith(t, "nil inner FS", func() { NewFaultFS(nil) })
	// A nil pointer in an FS is no FS either (IsNil): it panicked only at
	// the first call, deep inside it.
	requirePanicsWith(t, "nil inner FS", func() { NewFaultFS((*CrashFS)(nil)) })
	requirePanicsWith(t, "nil inner FS", func() { NewFaultFS((*FaultFS)(nil)) })
	requirePanicsWith(t, "both ShortBytes and ShortFraction", func() {
		ffs.Inject(Rule{Op: OpWrite, ShortBytes: 1, ShortFraction: 0.5})
	})

	dir := t.TempDir()
	require.NoError(t, ffs.SyncDir(dir), "no rule was added")
	f := openRW(t, ffs, filepath.Join(dir, "f"))
	require.NoError(t, f.Sync(), "no observer was added")
	require.Zero(t, ffs.Injected(OpSyncDir))
}

// TestTheHelpersRefuseANilFS: CopyFile, CreateEmpty and MkdirAllDurable
// used to panic on a nil FS at their first file operation. Each refuses it
// (as ReplaceFile and ReadFile do) with fs.ErrInvalid, naming the argument
// and the path, and makes nothing.
func TestTheHelpersRefuseANilFS(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.WriteFile(src, []byte("keep"), 0o600))
	made := filepath.Join(dir, "made")
	for name, call := range map[string]func() error{
		"CopyFile":        func() error { return CopyFile(nil, src, made) },
		"CreateEmpty":     func() error { return CreateEmpty(nil, made) },
		"MkdirAllDurable": func() error { return MkdirAllDurable(nil, made, 0o700) },
		"ReplaceFile":     func() error { return ReplaceFile(nil, made, []byte("x")) },
		"WriteFile":       func() error { return WriteFile(nil, made, []byte("x")) },
		"ReadFile":        func() error { _, err := ReadFile(nil, made, 10); return err },
	} {
		err := call()
		require.ErrorIs(t, err, iofs.ErrInvalid, name)
		require.ErrorContains(t, err, "nil vfs.FS", name)
		require.ErrorContains(t, err, made, name)
		require.NoFileExists(t, made, name)
		require.NoDirExists(t, made, name)
	}
	got, err := os.ReadFile(src)
	require.NoError(t, err)
	require.Equal(t, "keep", string(got))
}

// TestTheFunctionsOverAnFSRefuseANilPointerOne: a nil *FaultFS or
// *CrashFS in an FS is not a nil FS (see IsNil), and CopyFile and the
// others, which looked only for a nil FS, panicked at its first file
// operation. Each refuses it as it refuses a nil FS.
func TestTheFunctionsOverAnFSRefuseANilPointerOne(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.WriteFile(src, []byte("keep"), 0o600))
	made := filepath.Join(dir, "made")
	for _, fs := range []FS{(*FaultFS)(nil), (*CrashFS)(nil)} {
		for name, call := range map[string]func() error{
			"CopyFile":        func() error { return CopyFile(fs, src, made) },
			"CreateEmpty":     func() error { return CreateEmpty(fs, made) },
			"MkdirAllDurable": func() error { return MkdirAllDurable(fs, made, 0o700) },
			"ReplaceFile":     func() error { return ReplaceFile(fs, made, []byte("x")) },
			"WriteFile":       func() error { return WriteFile(fs, made, []byte("x")) },
			"ReadFile":        func() error { _, err := ReadFile(fs, made, 10); return err },
			"CheckDir":        func() error { return CheckDir(fs, made) },
		} {
			name = fmt.Sprintf("%s(%T)", name, fs)
			var err error
			require.NotPanics(t, func() { err = call() }, name)
			require.ErrorIs(t, err, iofs.ErrInvalid, name)
			require.ErrorContains(t, err, "nil vfs.FS", name)
			require.ErrorContains(t, err, made, name)
			require.NoFileExists(t, made, name)
			require.NoDirExists(t, made, name)
		}
	}
}

// TestIsLinkRefusesTheEmptyPath: the empty path names no place; IsLink
// used to answer "not a link" for it, as for a missing path, where
// Resolve refuses it. It is refused too.
func TestIsLinkRefusesTheEmptyPath(t *testing.T) {
	link, err := IsLink("")
	require.ErrorIs(t, err, iofs.ErrInvalid)
	require.ErrorContains(t, err, "empty path")
	require.False(t, link)
}
