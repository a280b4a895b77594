package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// Damage to the last record before a clean Close's end is refused as
// corruption (TestDamageBeforeTheCleanEndIsRefused); with Salvage it is
// salvaged as what it is: the damaged file copied aside first, the span
// listed in Recovery().Salvaged. It was zeroed as a torn tail instead, with
// no copy, and Recovery reported it as TornTail ("bytes that were never
// made durable") though the clean mark said they were: the loop that steps
// over damage stopped when no valid frame followed it, and the repair then
// zeroed the tail.
func TestSalvageOfDamageBeforeTheCleanEndCopiesAndReportsIt(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	es := appendRecords(t, l, 0, 5)
	require.NoError(t, l.Close())
	victim := es[len(es)-1].pos
	path := segFile(dir, victim.Segment())
	flipByte(t, path, victim.Offset()+segment.FrameHeaderSize)

	_, err := Open(dir, Options{SegmentBytes: smallSeg})
	var ce *CorruptionError
	require.ErrorAs(t, err, &ce, "refused without Salvage: the record was durable")

	l, err = Open(dir, Options{SegmentBytes: smallSeg, Salvage: true})
	require.NoError(t, err)
	defer l.Close()
	requireEntries(t, es[:len(es)-1], readAll(t, l))
	rec := l.Recovery()
	copies, _ := filepath.Glob(filepath.Join(dir, salvageDirName, segName(victim.Segment())+".*"))
	require.NotEmpty(t, copies, "the damaged file is copied aside before it is repaired")
	require.Nil(t, rec.TornTail, "a record the clean mark vouched for is no torn tail")
	require.NotEmpty(t, rec.Salvaged, "the skipped span is reported")
	_, err = os.Stat(copies[0])
	require.NoError(t, err)
}

// Whatever vouches for the end of the last segment (a clean Close's mark,
// or Options.Verified), and whatever took the last records before it
// (damage, zeros, the file cut short), Salvage reports the bytes from the
// end of the valid frames to that end as one salvaged span, with the file
// copied aside first, and never as a torn tail; the log then goes on after
// the span, and an Open without Salvage reads it whole. A file cut short
// used to open with the loss unreported (the clean-mark checks were
// skipped with Salvage, and a scan that ended cleanly before the durable
// end was neither refused nor salvaged).
func TestSalvageReportsTheRecordsLostBeforeTheDurableEnd(t *testing.T) {
	damages := []struct {
		name   string
		damage func(t *testing.T, path string, victim, end int)
	}{
		{"a bit flipped", func(t *testing.T, path string, victim, _ int) {
			flipByte(t, path, victim+segment.FrameHeaderSize)
		}},
		{"zeroed", func(t *testing.T, path string, victim, end int) {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			clear(data[victim:end])
			require.NoError(t, os.WriteFile(path, data, 0o600))
		}},
		{"cut in the record", func(t *testing.T, path string, victim, _ int) {
			require.NoError(t, os.Truncate(path, int64(victim+segment.FrameHeaderSize+3)))
		}},
		{"cut before the record", func(t *testing.T, path string, victim, _ int) {
			require.NoError(t, os.Truncate(path, int64(victim)))
		}},
	}
	for _, vouch := range []string{"clean mark", "verified"} {
		for _, d := range damages {
			t.Run(vouch+"/"+d.name, func(t *testing.T) {
				dir := t.TempDir()
				l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
				es := appendRecords(t, l, 0, 5)
				end := l.End()
				require.NoError(t, l.Close())
				opts := Options{SegmentBytes: smallSeg}
				if vouch == "verified" {
					require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
					opts.Verified = end
				}
				victim := es[len(es)-1].pos
				require.Equal(t, end.Segment(), victim.Segment())
				path := segFile(dir, victim.Segment())
				d.damage(t, path, victim.Offset(), end.Offset())

				_, err := Open(dir, opts)
				var ce *CorruptionError
				require.ErrorAs(t, err, &ce, "refused without Salvage: the record was durable")
				require.Equal(t, path, ce.File)

				salvage := opts
				salvage.Salvage = true
				l, err = Open(dir, salvage)
				require.NoError(t, err)
				rec := l.Recovery()
				require.Nil(t, rec.TornTail, "bytes known durable are no torn tail")
				require.Len(t, rec.Salvaged, 1)
				sp := rec.Salvaged[0]
				require.Equal(t, path, sp.File)
				require.Equal(t, victim.Offset(), sp.Offset)
				require.Equal(t, end.Offset()-victim.Offset(), sp.Length, "the span runs to the durable end")
				require.ErrorContains(t, sp.Cause, "durable to offset")
				require.FileExists(t, sp.CopiedTo, "the file was copied aside before the repair")
				requireEntries(t, es[:len(es)-1], readAll(t, l))
				more := appendRecords(t, l, 100, 3)
				require.GreaterOrEqual(t, more[0].pos, end, "appends go on after the span")
				require.NoError(t, l.Close())

				l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
				defer l.Close()
				requireEntries(t, append(es[:len(es)-1:len(es)-1], more...), readAll(t, l))
				require.Empty(t, l.Recovery().Salvaged)
			})
		}
	}
}

// An empty segment a crash left after an interrupted rotation is removed,
// and the segment before it becomes the last: what it lost before its
// durable end (Options.Verified, here) is reported as salvaged, as for a
// segment that was last from the start, never zeroed as a torn tail.
func TestSalvageReportsLossBeforeVerifiedBehindAnInterruptedRotation(t *testing.T) {
	for _, damage := range []string{"zeroed", "cut"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
			es := appendRecords(t, l, 0, 5)
			end := l.End()
			require.NoError(t, l.Close())
			require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
			victim := es[len(es)-1].pos
			require.Equal(t, end.Segment(), victim.Segment())
			path := segFile(dir, victim.Segment())
			switch damage {
			case "zeroed":
				data, err := os.ReadFile(path)
				require.NoError(t, err)
				clear(data[victim.Offset():end.Offset()])
				require.NoError(t, os.WriteFile(path, data, 0o600))
			case "cut":
				require.NoError(t, os.Truncate(path, int64(victim.Offset())))
			}
			// The crash also left the next segment in place, empty (a
			// rotation renamed it in before sealing this one).
			next := end.Segment() + 1
			f, err := segment.Create(vfs.Default, segFile(dir, next), next, 0, smallSeg)
			require.NoError(t, err)
			require.NoError(t, f.Close())

			// (Open without Salvage refuses this log, but removes the
			// empty segment first: it is not tried here.)
			opts := Options{SegmentBytes: smallSeg, Verified: end, Salvage: true}
			l, err = Open(dir, opts)
			require.NoError(t, err)
			defer l.Close()
			rec := l.Recovery()
			require.Nil(t, rec.TornTail)
			require.NotEmpty(t, rec.Salvaged,
				"Salvage opened %d of %d records, with the record at %v (before the verified end %v) gone and nothing reported (removed %v)",
				len(readAll(t, l)), len(es), victim, end, rec.RemovedEmpty)
		})
	}
}
