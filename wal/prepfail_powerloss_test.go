package wal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// cutFS is a CrashFS that notices the first operation of a failed
// preparation's cleanup to reach it (first says which one that is) and,
// with after >= 0, loses power after that many more operations: 0 cuts
// just before it.
type cutFS struct {
	*vfs.CrashFS
	first func(op vfs.Op, name, newName string) bool
	after int64

	mu sync.Mutex
	at int64 // the cleanup's first operation's index; -1 until it comes
}

func newCutFS(first func(op vfs.Op, name, newName string) bool, after int64) *cutFS {
	return &cutFS{CrashFS: vfs.NewCrashFS(vfs.Default), first: first, after: after, at: -1}
}

func (c *cutFS) seen(op vfs.Op, name, newName string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at >= 0 || !c.first(op, name, newName) {
		return
	}
	c.at = c.Ops()
	if c.after >= 0 {
		c.CrashAfter(c.at + c.after)
	}
}

func (c *cutFS) cleanupAt() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *cutFS) Remove(name string) error {
	c.seen(vfs.OpRemove, name, "")
	return c.CrashFS.Remove(name)
}

func (c *cutFS) Rename(oldname, newname string) error {
	c.seen(vfs.OpRename, oldname, newname)
	return c.CrashFS.Rename(oldname, newname)
}

// prepFailWorkload opens dir through fs and appends records first to
// first+59, one call each, across several rotations. An append that fails
// while the log goes on (a preparation failed) is counted and skipped; any
// other failure (the power lost, the log poisoned) stops it. It returns
// the appends acknowledged and how many failed.
func prepFailWorkload(dir string, fs vfs.FS, first int) (acked []entry, failed int, err error) {
	l, err := Open(dir, Options{FS: fs, SegmentBytes: 1024})
	if err != nil {
		return nil, 0, err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	for i := first; i < first+60; i++ {
		pos, err := l.Append(record(i))
		if err != nil {
			if errors.Is(err, vfs.ErrCrashed) || l.Err() != nil {
				return acked, failed, err
			}
			failed++
			continue
		}
		acked = append(acked, entry{pos[0], record(i)})
	}
	return acked, failed, nil
}

// isSegTmp reports whether name is a segment being prepared (not a spare).
func isSegTmp(name string) bool {
	base := filepath.Base(name)
	return strings.HasSuffix(base, segSuffix+tmpSuffix) && !strings.HasPrefix(base, sparePrefix)
}

func isSpare(name string) bool { return strings.HasPrefix(filepath.Base(name), sparePrefix) }

// leftovers names the temporary files in dir: segments being prepared and
// spares.
func leftovers(t *testing.T, dir string) (segTmp, spares int) {
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range names {
		switch {
		case isSegTmp(e.Name()):
			segTmp++
		case isSpare(e.Name()):
			spares++
		}
	}
	return segTmp, spares
}

// TestAPowerLossWhileAFailedPreparationCleansUpLosesNothing: the next
// segment's preparation fails (a zero-fill write short of space, the same
// with the removal of the file failing too, so that the next attempt
// removes it, or a retired file's reuse whose fdatasync fails, so that it
// is renamed back and removed), and the power fails at each operation of
// the cleanup that follows and of the rest of the workload. Each clone,
// kept to its synced state or with a share of the unsynced writes, must
// open, whatever temporary file the power loss kept, to every record
// acknowledged (checkAfterPowerLoss); then the log must go on through
// several new segments, among them those a preparation's file left could
// have been taken for, and keep every record across a reopen.
func TestAPowerLossWhileAFailedPreparationCleansUpLosesNothing(t *testing.T) {
	root := shmDir(t)
	seg2 := segName(2) + tmpSuffix
	// The workload removes nothing else: the first removal is the
	// cleanup's, whichever file it takes.
	removal := func(op vfs.Op, _, _ string) bool { return op == vfs.OpRemove }
	cases := []struct {
		name string
		// template fills dir before the workload; it returns the
		// records it acknowledged and the position below which
		// segments were removed.
		template func(t *testing.T, dir string) ([]entry, Position)
		faults   []vfs.Rule
		// first says which operation to reach the CrashFS starts the
		// cleanup.
		first func(op vfs.Op, name, newName string) bool
		// mayFail says that an append may meet the failure: a zero-fill
		// that fails while the writer waits for its file fails that
		// rotation (one that failed before is tried again, and the
		// retry succeeds), and a failed reuse falls back on a new file.
		mayFail bool
	}{
		{
			name:    "zero-fill short of space, file removed",
			faults:  []vfs.Rule{{Op: vfs.OpWrite, Match: func(n string) bool { return filepath.Base(n) == seg2 }, Times: 1, ShortBytes: 100, Err: syscall.ENOSPC}},
			first:   removal,
			mayFail: true,
		},
		{
			name: "zero-fill short of space, removal failed, removed by the next attempt",
			faults: []vfs.Rule{
				{Op: vfs.OpWrite, Match: func(n string) bool { return filepath.Base(n) == seg2 }, Times: 1, ShortBytes: 100, Err: syscall.ENOSPC},
				{Op: vfs.OpRemove, Match: func(n string) bool { return filepath.Base(n) == seg2 }, Times: 1},
			},
			first:   removal,
			mayFail: true,
		},
		{
			name: "reuse of a retired file fails, renamed back and removed",
			template: func(t *testing.T, dir string) ([]entry, Position) {
				l := mustOpen(t, dir, Options{SegmentBytes: 1024})
				acked := appendRecords(t, l, 0, 60)
				below := MakePosition(3, 0)
				_, err := l.RemoveBelow(below)
				require.NoError(t, err)
				require.NoError(t, l.Close())
				_, spares := leftovers(t, dir)
				require.Positive(t, spares, "the template has a retired file to reuse")
				return acked, below
			},
			faults: []vfs.Rule{{Op: vfs.OpSync, Match: isSegTmp, Times: 1}},
			first: func(op vfs.Op, name, newName string) bool {
				return op == vfs.OpRename && isSegTmp(name) && isSpare(newName)
			},
		},
	}
	rng := seededRand(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			template := freshDir(t, root)
			var before []entry
			var removedBelow Position
			if tc.template != nil {
				before, removedBelow = tc.template(t, template)
			}
			run := func(after int64) (*cutFS, string, []entry, int, error) {
				dir := copyInto(t, root, template)
				cfs := newCutFS(tc.first, after)
				ffs := vfs.NewFaultFS(cfs)
				for _, r := range tc.faults {
					ffs.Inject(r)
				}
				acked, failed, err := prepFailWorkload(dir, ffs, 100)
				return cfs, dir, append(append([]entry(nil), before...), acked...), failed, err
			}

			// A dry run: the preparation fails, the log goes on, and
			// the cleanup comes at operation at of total.
			dry, _, _, failed, err := run(-1)
			require.NoError(t, err)
			if !tc.mayFail {
				require.Zero(t, failed, "appends that met the failed preparation")
			}
			at, total := dry.cleanupAt(), dry.Ops()
			require.GreaterOrEqual(t, at, int64(0), "the cleanup did not come")
			t.Logf("the cleanup begins at operation %d of %d", at+1, total)

			outcomes := map[string]int{}
			for after := int64(0); at+after <= total+2; after++ {
				cfs, dir, acked, _, _ := run(after)
				require.GreaterOrEqual(t, cfs.cleanupAt(), int64(0), "the cleanup did not come")
				for c, opts := range []vfs.CrashOptions{
					{Root: dir},
					{Root: dir, KeepUnsyncedFraction: 0.5, TearLastWrite: true, Rand: rand.New(rand.NewPCG(rng.Uint64(), 5))},
				} {
					what := fmt.Sprintf("power lost %d operations into the cleanup of a failed preparation, clone %d", after, c)
					clone := filepath.Join(freshDir(t, root), "clone")
					require.NoError(t, cfs.CrashClone(clone, opts))
					segTmp, spares := leftovers(t, clone)
					outcomes[fmt.Sprintf("segment being prepared %d, spares %d", segTmp, spares)]++
					checkAfterPowerLoss(t, clone, acked, removedBelow, what)

					// The log goes on through new segments and a reopen.
					l, err := Open(clone, Options{SegmentBytes: 1024})
					require.NoError(t, err, what)
					more := appendRecords(t, l, 1000, 60)
					require.NoError(t, l.Close(), what)
					checkAfterPowerLoss(t, clone, append(append([]entry(nil), acked...), more...), removedBelow, what+", then rotated and reopened")
				}
			}
			t.Logf("clones: %v", outcomes)
			require.GreaterOrEqual(t, len(outcomes), 2,
				"every clone had the same temporary files: no power loss fell both before the cleanup was durable and after")
		})
	}
}
