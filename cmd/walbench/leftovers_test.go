package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLeftoversRemovesWhatWasNotKept: a forced quit removes every path
// recorded and not kept, directories whole, and nothing kept.
func TestLeftoversRemovesWhatWasNotKept(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "walbench-1")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "store"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "store", "x"), []byte("x"), 0o600))
	empty := filepath.Join(root, "empty.json")
	whole := filepath.Join(root, "whole.json")
	for _, p := range []string{empty, whole} {
		require.NoError(t, os.WriteFile(p, nil, 0o600))
	}
	var l leftovers
	l.add(dir)
	l.add(empty)
	keep := l.add(whole)
	keep()

	require.Equal(t, []string{empty, dir}, l.removeAll()) // sorted
	for _, p := range []string{dir, empty} {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, p)
	}
	_, err := os.Stat(whole)
	require.NoError(t, err, "a kept path was removed")
}

// TestRunRecordsWhatAForcedQuitRemoves: a run tells run's forced quit
// about its temporary directory and its -json file, and withdraws the
// file once its report is in it; a run stopped before it measured
// anything leaves the file for the quit to remove.
func TestRunRecordsWhatAForcedQuitRemoves(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		parent := t.TempDir()
		jsonFile := filepath.Join(t.TempDir(), "out.json")
		ctx, cancel := context.WithCancelCause(context.Background())
		if stopped {
			cancel(errInterrupted)
		}
		var l leftovers
		var stdout, stderr bytes.Buffer
		code := runContext(ctx, []string{"probe", "-time", "30ms", "-dir", parent, "-json", jsonFile},
			&stdout, &stderr, &env{progress: newProgress(&stderr)}, l.add)
		cancel(nil)
		l.mu.Lock()
		paths := l.paths
		l.mu.Unlock()
		tmps, err := filepath.Glob(filepath.Join(parent, "walbench-*"))
		require.NoError(t, err)
		require.Empty(t, tmps, "the run left its temporary directory")
		if stopped {
			require.Equal(t, exitInterrupted, code, stderr.String())
			require.True(t, paths[jsonFile], "an unwritten -json file is not left to the quit: %v", paths)
			continue
		}
		require.Equal(t, exitOK, code, stderr.String())
		require.False(t, paths[jsonFile], "a written report would be removed by a forced quit")
		require.Len(t, paths, 1, "the temporary directory is not recorded: %v", paths)
		for p := range paths {
			require.Equal(t, parent, filepath.Dir(p))
		}
		require.NotNil(t, readReport(t, jsonFile).Probe)
	}
}
