package wal

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// entry is a record the test appended (or read back) and where it went.
type entry struct {
	pos Position
	rec []byte
}

func mustOpen(t *testing.T, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	require.NoError(t, err)
	return l
}

// record returns the i-th test record: its index, then filler of a length
// that varies with i, so frames straddle blocks and segment ends.
func record(i int) []byte {
	b := fmt.Appendf(nil, "record-%05d:", i)
	for j := 0; j < i%37; j++ {
		b = append(b, byte('a'+j%26))
	}
	return b
}

// appendRecords appends records first..first+n-1 one call each.
func appendRecords(t *testing.T, l *Log, first, n int) []entry {
	t.Helper()
	var out []entry
	for i := first; i < first+n; i++ {
		rec := record(i)
		pos, err := l.Append(rec)
		require.NoError(t, err)
		require.Len(t, pos, 1)
		out = append(out, entry{pos[0], rec})
	}
	return out
}

// readAll returns every record of the log in order.
func readAll(t *testing.T, l *Log) []entry {
	t.Helper()
	var out []entry
	require.NoError(t, l.Iterate(0, func(pos Position, rec []byte) error {
		out = append(out, entry{pos, append([]byte(nil), rec...)})
		return nil
	}))
	return out
}

// requireEntries checks that got is exactly want, in order.
func requireEntries(t *testing.T, want, got []entry) {
	t.Helper()
	require.Equal(t, len(want), len(got), "record count")
	for i := range want {
		require.Equal(t, want[i].pos, got[i].pos, "position of record %d", i)
		require.Equal(t, string(want[i].rec), string(got[i].rec), "record %d", i)
	}
}

// copyDir copies the regular files of src, but the lock, into a new
// temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	return copyInto(t, t.TempDir(), src)
}

// seededRand returns a generator and logs its seed, so a failure can be
// replayed.
func seededRand(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// segFile returns the path of segment seq in dir.
func segFile(dir string, seq uint32) string { return filepath.Join(dir, segName(seq)) }

func isLocked(err error) bool { return errors.Is(err, ErrLocked) }

// saltOfFile returns the salt of the segment file at path, which a frame a
// test writes into that file must carry to verify there.
func saltOfFile(t *testing.T, path string) uint32 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := make([]byte, segment.HeaderSize)
	_, err = io.ReadFull(f, h)
	require.NoError(t, err)
	return segment.SaltOf(h)
}
