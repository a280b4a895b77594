package wal

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// groupRec is record j of call c, which has n records.
func groupRec(c, j, n int) []byte {
	b := fmt.Appendf(nil, "call-%04d-%d-of-%d:", c, j, n)
	for k := 0; k < (c*7+j*13)%41; k++ {
		b = append(b, byte('a'+k%26))
	}
	return b
}

// atomWorkload appends calls of 1..4 records, in the given mode, with a
// mix of durable and written-only calls, across many rotations.
func atomWorkload(dir string, fs vfs.FS, mode SyncMode) (durable map[int]bool, err error) {
	durable = map[int]bool{}
	l, err := Open(dir, Options{FS: fs, SegmentBytes: 1024, Sync: mode})
	if err != nil {
		return durable, err
	}
	defer func() { _ = l.Close() }()
	for c := 0; c < 60; c++ {
		n := 1 + c%4
		var recs [][]byte
		for j := 0; j < n; j++ {
			recs = append(recs, groupRec(c, j, n))
		}
		dur := c%3 == 0
		if _, err := l.Enqueue(dur, recs...).Wait(); err != nil {
			return durable, err
		}
		if dur {
			// Its fdatasync covers it and every call written before it.
			for k := 0; k <= c; k++ {
				durable[k] = true
			}
		}
	}
	return durable, nil
}

// TestGroupsStayWholeAcrossPowerLossInEveryMode: a power loss after every mutating operation of a
// workload of 1-4-record calls, durable and write-only, across rotations,
// under SyncAlways and SyncNever, with torn and partly kept unsynced
// writes, and unsynced names and sizes kept apart from the data
// (metadataStates). Every call found is whole, in order, and every call an
// fdatasync covered is found.
func TestGroupsStayWholeAcrossPowerLossInEveryMode(t *testing.T) {
	root := shmDir(t)
	for _, mode := range []SyncMode{SyncAlways, SyncNever} {
		dry := vfs.NewCrashFS(vfs.Default)
		_, err := atomWorkload(freshDir(t, root), dry, mode)
		require.NoError(t, err)
		total := dry.Ops()
		step := int64(1)
		if testing.Short() {
			step = 5
		}
		for k := int64(0); k <= total; k += step {
			cfs := vfs.NewCrashFS(vfs.Default)
			cfs.CrashAfter(k)
			dir := freshDir(t, root)
			durable, _ := atomWorkload(dir, cfs, mode)
			for v := 0; v < 5; v++ {
				opts := vfs.CrashOptions{Root: dir, Rand: rand.New(rand.NewPCG(uint64(k), uint64(v)))}
				kind := ""
				switch v {
				case 1:
					opts.KeepUnsyncedFraction, opts.TearLastWrite = 0.5, true
				case 2:
					opts.KeepUnsyncedFraction = 1
				case 3:
					opts.KeepUnsyncedFraction, opts.BlockSize = 0.5, 512
				case 4: // names and sizes kept apart from the data
					ms := metadataStates[k%int64(len(metadataStates))]
					opts = ms.Options(dir, opts.Rand)
					kind = " (" + ms.Name + ")"
				}
				clone := filepath.Join(freshDir(t, root), "clone")
				require.NoError(t, cfs.CrashClone(clone, opts))
				what := fmt.Sprintf("mode %v crash after op %d of %d, variant %d%s", mode, k, total, v, kind)
				l, err := Open(clone, Options{SegmentBytes: 1024})
				require.NoError(t, err, what)
				got := readAll(t, l)
				require.NoError(t, l.Close())
				seen := map[int]int{}
				lastCall := -1
				for i := 0; i < len(got); {
					var c, j, n int
					_, err := fmt.Sscanf(string(got[i].rec), "call-%04d-%d-of-%d:", &c, &j, &n)
					require.NoError(t, err, what)
					require.Equal(t, 0, j, "%s: call %d starts at record %d of %d", what, c, j, n)
					require.Greater(t, c, lastCall, what)
					lastCall = c
					for jj := 0; jj < n; jj++ {
						require.Less(t, i+jj, len(got), "%s: call %d cut short: %d of %d records", what, c, jj, n)
						require.Equal(t, string(groupRec(c, jj, n)), string(got[i+jj].rec), "%s: call %d record %d", what, c, jj)
					}
					seen[c] = n
					i += n
				}
				for c := range durable {
					require.Contains(t, seen, c, "%s: durable call %d lost", what, c)
				}
			}
		}
	}
}

// TestTooLargeNamesThePreambleRoom: one Append may encode at most a
// segment less the room kept for the preamble; an Append refused for that
// room alone gets an error that names Options.PreambleBytes, the option
// that made it too large, not only SegmentBytes.
func TestTooLargeNamesThePreambleRoom(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096, PreambleBytes: 2048})
	defer l.Close()
	_, err := l.Append(make([]byte, 3000)) // fits a 4096-byte segment; not with 2048 kept
	require.ErrorIs(t, err, ErrTooLarge)
	require.Contains(t, err.Error(), "PreambleBytes",
		"a 3000-byte record refused only because of the 2048 bytes Options.PreambleBytes keeps; the error names neither that option nor the room: %v", err)
}
