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
// recorded and not kept, directories whole, and nothing kept; it says
// what it removed, and what it could not remove, with why, and says
// nothing of a path already gone.
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
	// os.RemoveAll refuses a path that ends in ".": a removal that fails.
	stuck := filepath.Join(root, "stuck") + "/."
	require.NoError(t, os.Mkdir(filepath.Join(root, "stuck"), 0o700))
	gone := filepath.Join(root, "gone.json")
	var l leftovers
	l.add(dir)
	l.add(empty)
	l.add(stuck)
	l.add(gone)
	keep := l.add(whole)
	keep()

	removals := l.removeAll()
	var paths []string
	for _, r := range removals {
		paths = append(paths, r.path)
	}
	require.Equal(t, []string{empty, stuck, dir}, paths) // sorted, without the one gone
	for _, p := range []string{dir, empty} {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, p)
	}
	_, err := os.Stat(whole)
	require.NoError(t, err, "a kept path was removed")

	var b bytes.Buffer
	sayRemovals(newProgress(&b), removals)
	require.Equal(t, "walbench: interrupted again: removed "+empty+"\n"+
		"walbench: interrupted again: could not remove "+stuck+", left behind: "+removals[1].err.Error()+"\n"+
		"walbench: interrupted again: removed "+dir+"\n", b.String())
	require.Error(t, removals[1].err)
}

// TestRunRecordsWhatAForcedQuitRemoves: a run tells run's forced quit
// about its temporary directory and the temporary file of its -json
// report, beside the -json path, and withdraws each once it is gone; it
// never records the -json path itself, which walbench does not remove.
func TestRunRecordsWhatAForcedQuitRemoves(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		parent := t.TempDir()
		jsonFile := filepath.Join(t.TempDir(), "out.json")
		ctx, cancel := context.WithCancelCause(context.Background())
		if stopped {
			cancel(errInterrupted)
		}
		var l leftovers
		var recorded []string
		made := func(p string) func() { recorded = append(recorded, p); return l.add(p) }
		var stdout, stderr bytes.Buffer
		code := runContext(ctx, []string{"probe", "-time", "30ms", "-dir", parent, "-json", jsonFile},
			&stdout, &stderr, &env{progress: newProgress(&stderr)}, made)
		cancel(nil)
		l.mu.Lock()
		paths := l.paths
		l.mu.Unlock()
		require.Empty(t, paths, "paths left to a forced quit after the run")
		require.Len(t, recorded, 2, "want the temporary directory and the report's temporary file: %v", recorded)
		require.Equal(t, filepath.Dir(jsonFile), filepath.Dir(recorded[0]), "the report's temporary file is not beside the -json path")
		require.NotEqual(t, jsonFile, recorded[0])
		require.Equal(t, parent, filepath.Dir(recorded[1]))
		for _, p := range recorded {
			_, err := os.Stat(p)
			require.ErrorIs(t, err, os.ErrNotExist, "%s is left behind", p)
		}
		if stopped {
			require.Equal(t, exitInterrupted, code, stderr.String())
			_, err := os.Stat(jsonFile)
			require.ErrorIs(t, err, os.ErrNotExist, "a -json file made though nothing was measured")
			continue
		}
		require.Equal(t, exitOK, code, stderr.String())
		require.NotNil(t, readReport(t, jsonFile).Probe)
	}
}
