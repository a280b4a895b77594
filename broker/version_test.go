package broker_test

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/segment"
)

// treeContents returns every file under dir but the lock, with its bytes.
func treeContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "LOCK" {
			return err
		}
		data, err := os.ReadFile(path)
		out[path] = string(data)
		return err
	}))
	return out
}

// TestAStoreOfALaterFormatVersionIsRefusedAsUnsupportedAndLeftAsItIs: a
// store whose log a later build wrote, in a format version this build
// does not read (a rollback after an upgrade), is not damage. Open refuses
// it with an error that says so and wraps errors.ErrUnsupported, not
// Corrupt (whose text points to Salvage), refuses it with Salvage too, and
// changes no file: the later build finds its store whole.
func TestAStoreOfALaterFormatVersionIsRefusedAsUnsupportedAndLeftAsItIs(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	var want []string
	for i := 0; i < 50; i++ { // 5 MB: three segments
		want = append(want, mustPublish(t, q, string(make([]byte, 100<<10))).ID)
	}
	e.close()
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
	require.NoError(t, err)
	require.Greater(t, len(segs), 1, "the test needs several segments")
	last := segs[len(segs)-1]
	setVersion := func(v uint16) {
		data, err := os.ReadFile(last)
		require.NoError(t, err)
		binary.LittleEndian.PutUint16(data[8:], v)
		binary.LittleEndian.PutUint32(data[28:], crc32.Checksum(data[:28], crc32.MakeTable(crc32.Castagnoli)))
		require.NoError(t, os.WriteFile(last, data, 0o600))
	}
	setVersion(segment.Version + 1)
	before := treeContents(t, e.dir)

	for _, salvage := range []bool{false, true} {
		opts := e.opts
		opts.Salvage = salvage
		_, err := broker.Open(e.dir, opts)
		require.ErrorIs(t, err, errors.ErrUnsupported, "salvage %v", salvage)
		require.NotErrorIs(t, err, broker.Corrupt, "salvage %v", salvage)
		require.ErrorContains(t, err, last)
		require.ErrorContains(t, err, "written by a later build")
		require.ErrorContains(t, err, "Salvage does not apply")
		require.NotContains(t, err.Error(), "Options.Salvage may open")
		require.Equal(t, before, treeContents(t, e.dir), "salvage %v: Open changed the store's files", salvage)
	}

	setVersion(segment.Version)
	e.open()
	q = e.queue("jobs", policy())
	require.ElementsMatch(t, want, ids(mustReceive(t, q, len(want)+1)))
}

// "A log a later build wrote in a format version this one does not read
// is not damage: Open refuses it ... and changes no file" (Open): the
// temporary files beside the later build's log (a segment it was
// preparing, say) are left as they were, not removed as a crash's
// leftovers before the segments' version is known.
func TestAnOpenRefusingALaterFormatVersionRemovesNoFile(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "one")
	e.close()
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
	require.NoError(t, err)
	last := segs[len(segs)-1]
	data, err := os.ReadFile(last)
	require.NoError(t, err)
	binary.LittleEndian.PutUint16(data[8:], segment.Version+1)
	binary.LittleEndian.PutUint32(data[28:], crc32.Checksum(data[:28], crc32.MakeTable(crc32.Castagnoli)))
	require.NoError(t, os.WriteFile(last, data, 0o600))
	// What a later build leaves beside its log: the next segment, being
	// prepared when it stopped.
	preparing := filepath.Join(e.dir, "0000000002.seg.tmp")
	require.NoError(t, os.WriteFile(preparing, []byte("a segment being prepared"), 0o600))
	before := treeContents(t, e.dir)

	_, err = broker.Open(e.dir, e.opts)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.FileExists(t, preparing, "the refused Open removed a file of the later build's store")
	require.Equal(t, before, treeContents(t, e.dir), "Open changed the store's files")
}
