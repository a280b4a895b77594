package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// A salvage that fails part way (the copy aside, the list of the spans it
// repairs, the padding written over the damage, refused or cut short, or
// the fdatasync after it) fails Open with the file system's error, and
// hides nothing: an ordinary Open still refuses the log, whether the
// padding reached the file or not, and a second Open with Salvage keeps
// exactly what a salvage that had not failed keeps and reports the span.
func TestASalvageThatFailsCanBeRunAgain(t *testing.T) {
	dir, acked, groupEnd := buildLog(t)
	victim := firstIn(acked, 1)
	vi := indexOf(acked, victim.pos)
	var want []entry
	for i, e := range acked {
		if groupEnd[i] != groupEnd[vi] {
			want = append(want, e)
		}
	}
	for _, tc := range []struct {
		name string
		rule func(path string) vfs.Rule
	}{
		{"copy aside", func(string) vfs.Rule {
			return vfs.Rule{Op: vfs.OpWrite, NameContains: ".seg.", Times: 1} // salvage/<segment>.<time>
		}},
		{"list of spans", func(string) vfs.Rule {
			return vfs.Rule{Op: vfs.OpSync, NameContains: "unfinished", Times: 1}
		}},
		{"padding refused", func(path string) vfs.Rule {
			return vfs.Rule{Op: vfs.OpWrite, Match: func(n string) bool { return n == path }, Times: 1}
		}},
		{"padding cut short", func(path string) vfs.Rule {
			return vfs.Rule{Op: vfs.OpWrite, Match: func(n string) bool { return n == path }, Times: 1, ShortFraction: 0.5, Err: io.ErrShortWrite}
		}},
		{"fdatasync", func(path string) vfs.Rule {
			return vfs.Rule{Op: vfs.OpSync, Match: func(n string) bool { return n == path }, Times: 1}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := copyDir(t, dir)
			path := segFile(d, 1)
			flipByte(t, path, victim.pos.Offset()+segment.FrameHeaderSize+1)

			fs := vfs.NewFaultFS(vfs.Default)
			fs.Inject(tc.rule(path))
			_, err := Open(d, Options{SegmentBytes: smallSeg, Salvage: true, FS: fs})
			require.Error(t, err)
			require.ErrorContains(t, err, "salvage")
			require.True(t, errors.Is(err, syscall.EIO) || errors.Is(err, io.ErrShortWrite), "the file system's error: %v", err)
			require.Positive(t, fs.Injected(tc.rule(path).Op), "the fault was met")

			_, err = Open(d, Options{SegmentBytes: smallSeg})
			require.ErrorIs(t, err, ErrCorrupt, "an ordinary Open refuses the log: still damaged, or repaired by a salvage that did not finish")
			require.ErrorContains(t, err, path)

			l, err := Open(d, Options{SegmentBytes: smallSeg, Salvage: true})
			require.NoError(t, err)
			requireEntries(t, want, readAll(t, l))
			rec := l.Recovery()
			require.Len(t, rec.Salvaged, 1, "the span is reported, whether the failed salvage repaired it or not")
			require.Equal(t, path, rec.Salvaged[0].File)
			require.Equal(t, victim.pos.Offset(), rec.Salvaged[0].Offset)
			require.FileExists(t, rec.Salvaged[0].CopiedTo)
			require.NoError(t, l.Close())
			require.NoFileExists(t, filepath.Join(d, "salvage", "unfinished.json"), "the Open that finished the salvage removed its list")

			l = mustOpen(t, d, Options{SegmentBytes: smallSeg})
			requireEntries(t, want, readAll(t, l))
			require.Empty(t, l.Recovery().Salvaged)
			require.NoError(t, l.Close())
		})
	}
}

// A salvage of two damaged segments that repairs the first and fails on
// the second leaves the first repaired for good: the Open that finishes
// the salvage still reports both spans (from the list the failed one
// left), so that what the first one held is not lost without a word.
func TestASalvageFinishedLaterReportsTheSpansTheFailedOneRepaired(t *testing.T) {
	dir, acked, _ := buildLog(t)
	d := copyDir(t, dir)
	var victims []entry
	for _, seq := range []uint32{1, 3} {
		v := firstIn(acked, seq)
		victims = append(victims, v)
		flipByte(t, segFile(d, seq), v.pos.Offset()+segment.FrameHeaderSize+1)
	}
	second := segFile(d, 3)
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpSync, Match: func(n string) bool { return n == second }, Times: 1})
	_, err := Open(d, Options{SegmentBytes: smallSeg, Salvage: true, FS: fs})
	require.ErrorIs(t, err, syscall.EIO)

	_, err = Open(d, Options{SegmentBytes: smallSeg})
	require.ErrorIs(t, err, ErrCorrupt, "the first segment reads as repaired, but the salvage did not finish")
	require.ErrorIs(t, err, ErrUnfinishedSalvage, "a caller can tell this refusal from damage found now")
	require.ErrorContains(t, err, "did not finish")
	require.ErrorContains(t, err, "open with Salvage to finish and report them")

	// Moved before it is opened again: the report names the files where
	// they are now.
	moved := filepath.Join(t.TempDir(), "moved")
	require.NoError(t, os.Rename(d, moved))
	l, err := Open(moved, Options{SegmentBytes: smallSeg, Salvage: true})
	require.NoError(t, err)
	defer l.Close()
	rec := l.Recovery()
	require.Len(t, rec.Salvaged, 2)
	for i, v := range victims {
		require.Equal(t, v.pos.Segment(), rec.Salvaged[i].Segment)
		require.Equal(t, v.pos.Offset(), rec.Salvaged[i].Offset)
		require.Equal(t, segFile(moved, v.pos.Segment()), rec.Salvaged[i].File)
		require.Positive(t, rec.Salvaged[i].Length)
		require.NotEmpty(t, rec.Salvaged[i].Cause.Error(), "the cause, as the list kept it")
		require.FileExists(t, rec.Salvaged[i].CopiedTo)
	}
}

// A list of repaired spans that does not read (damaged, or not one)
// stops Open, Salvage or not, with an error that names it and says how
// to go on; nothing is changed.
func TestAnUnreadableListOfAnUnfinishedSalvageStopsOpen(t *testing.T) {
	dir, acked, _ := buildLog(t)
	list := filepath.Join(dir, "salvage", "unfinished.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(list), 0o700))
	for _, bad := range []string{
		`{"spans": [{"segment": "one"`,
		`{"spans": [{"segment": 1, "offset": -5, "length": 40}]}`,
		`{"spans": [{"segment": 0, "offset": 32, "length": 40}]}`,
		`{"spans": [{"segment": 1, "offset": 1073741800, "length": 40}]}`,
	} {
		require.NoError(t, os.WriteFile(list, []byte(bad), 0o600))
		for _, salvage := range []bool{false, true} {
			_, err := Open(dir, Options{SegmentBytes: smallSeg, Salvage: salvage})
			require.Error(t, err, bad)
			require.ErrorContains(t, err, list)
			require.ErrorContains(t, err, "remove the list")
		}
	}
	require.NoError(t, os.Remove(list))
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	defer l.Close()
	requireEntries(t, acked, readAll(t, l))
}

// A power loss at any point of a salvage of two damaged segments hides
// nothing: after it, an Open without Salvage either refuses the log (the
// damage, or the list of an unfinished salvage, is still there) or, once
// the salvage's Open had returned its report, opens the repaired log; and
// an Open with Salvage then keeps exactly the intact records and reports
// both spans.
func TestAPowerLossDuringASalvageHidesNothing(t *testing.T) {
	dir, acked, groupEnd := buildLog(t)
	var victims []entry
	skip := map[int]bool{}
	for _, seq := range []uint32{1, 3} {
		v := firstIn(acked, seq)
		victims = append(victims, v)
		flipByte(t, segFile(dir, seq), v.pos.Offset()+segment.FrameHeaderSize+1)
		skip[groupEnd[indexOf(acked, v.pos)]] = true
	}
	var want []entry
	for i, e := range acked {
		if !skip[groupEnd[i]] {
			want = append(want, e)
		}
	}
	// How many mutating operations an Open with Salvage takes to return.
	cfs := vfs.NewCrashFS(vfs.Default)
	d := copyDir(t, dir)
	l, err := Open(d, Options{FS: cfs, SegmentBytes: smallSeg, Salvage: true})
	require.NoError(t, err)
	total := cfs.Ops()
	require.Len(t, l.Recovery().Salvaged, 2)
	require.NoError(t, l.Close())

	for k := int64(0); k <= total; k++ {
		for _, keep := range []float64{0, 1} {
			d := copyDir(t, dir)
			cfs := vfs.NewCrashFS(vfs.Default)
			cfs.CrashAfter(k)
			l, err := Open(d, Options{FS: cfs, SegmentBytes: smallSeg, Salvage: true})
			reported := err == nil
			if l != nil {
				_ = l.Close()
			}
			clone := filepath.Join(t.TempDir(), "clone")
			require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: d, KeepUnsyncedFraction: keep}))
			what := fmt.Sprintf("power lost after %d of %d operations, unsynced kept %v", k, total, keep)

			plain := filepath.Join(t.TempDir(), "plain")
			require.NoError(t, os.CopyFS(plain, os.DirFS(clone)), "salvage/ and all")
			l, err = Open(plain, Options{SegmentBytes: smallSeg})
			if err == nil {
				require.True(t, reported, "%s: an ordinary Open succeeds though no Open reported the salvage", what)
				requireEntries(t, want, readAll(t, l))
				require.NoError(t, l.Close())
				continue
			}
			require.ErrorIs(t, err, ErrCorrupt, what)

			l, err = Open(clone, Options{SegmentBytes: smallSeg, Salvage: true})
			require.NoError(t, err, what)
			requireEntries(t, want, readAll(t, l))
			rec := l.Recovery()
			require.Len(t, rec.Salvaged, 2, "%s: %v", what, rec.Salvaged)
			for i, v := range victims {
				require.Equal(t, v.pos.Segment(), rec.Salvaged[i].Segment, what)
				require.Equal(t, v.pos.Offset(), rec.Salvaged[i].Offset, what)
			}
			require.NoError(t, l.Close())
		}
	}
	t.Logf("a power loss after each of the %d operations of a salvage of two segments", total)
}

// With KeepSalvageList, the list of the repaired spans outlives the Open
// that salvaged, and its Close, until SalvageDone: meanwhile an Open
// without Salvage refuses the log, and one with it reports the spans
// again. SalvageDone removes the list (a second call, or one on a log
// that salvaged nothing, does nothing).
func TestSalvageDoneEndsWhatKeepSalvageListKept(t *testing.T) {
	dir, acked, _ := buildLog(t)
	victim := firstIn(acked, 2)
	flipByte(t, segFile(dir, 2), victim.pos.Offset()+segment.FrameHeaderSize+1)
	list := filepath.Join(dir, "salvage", "unfinished.json")
	keep := Options{SegmentBytes: smallSeg, Salvage: true, KeepSalvageList: true}

	l := mustOpen(t, dir, keep)
	require.Len(t, l.Recovery().Salvaged, 1)
	require.NoError(t, l.Close())
	require.FileExists(t, list)
	_, err := Open(dir, Options{SegmentBytes: smallSeg})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "did not finish")

	l = mustOpen(t, dir, keep)
	require.Len(t, l.Recovery().Salvaged, 1, "reported again")
	require.Equal(t, victim.pos.Offset(), l.Recovery().Salvaged[0].Offset)
	require.NoError(t, l.SalvageDone())
	require.NoFileExists(t, list)
	require.NoError(t, l.SalvageDone(), "a second call does nothing")
	require.NoError(t, l.Close())

	l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	require.Empty(t, l.Recovery().Salvaged)
	require.NoError(t, l.SalvageDone(), "nothing to remove")
	require.NoError(t, l.Close())
}

// "A salvage that fails part way ... can be run again" (docs/DESIGN.md,
// Recovery), a salvage of a segment cut below its header too: it builds
// the replacement under a temporary name, and one that failed before the
// rename left that file, which the next salvage of the segment removes
// before making it again (the other leftovers are removed only after the
// scan it runs in).
func TestASalvageOfACutSegmentThatFailedCanBeRunAgain(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 2048})
	want := appendRecords(t, l, 0, 200)
	require.GreaterOrEqual(t, l.Stats().Segments, 4)
	require.NoError(t, l.Close())
	require.NoError(t, os.Truncate(segFile(dir, 2), 0))

	// The first salvage fails where it renames the new segment into place.
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: segName(2) + tmpSuffix, Err: syscall.EIO, Times: 1})
	_, err := Open(dir, Options{SegmentBytes: 2048, Salvage: true, FS: ffs})
	require.ErrorIs(t, err, syscall.EIO)
	require.Positive(t, ffs.Injected(vfs.OpRename), "the fault was met")
	_, statErr := os.Stat(filepath.Join(dir, segName(2)+tmpSuffix))
	require.NoError(t, statErr, "the failed salvage left its temporary segment (as a crash would)")

	// Run again, on a healthy disk.
	l, err = Open(dir, Options{SegmentBytes: 2048, Salvage: true})
	require.NoError(t, err, "a salvage that failed part way cannot be run again")
	defer l.Close()
	var kept []entry
	for _, e := range want {
		if e.pos.Segment() != 2 {
			kept = append(kept, e)
		}
	}
	requireEntries(t, kept, readAll(t, l))
}
