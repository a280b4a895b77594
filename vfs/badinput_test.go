package vfs

import (
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
