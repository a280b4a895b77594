package broker_test

import (
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// The hints a checkpoint gives the log (which segments are sealed, and
// where) are read from the checkpoint file before the log is opened, and
// are true only of the log the checkpoint was taken of. A checkpoint put
// back from before a salvage that sealed a segment early, but refused for
// another reason than the salvage (its table damaged: the replay that
// would meet the salvaged event never starts), left the rebuild walking
// the log opened with its hints: past the early seal into what the
// salvage left behind, so that the store, salvaged and whole, failed to
// open with Corrupt. Every rebuild after a refusal of the checkpoint
// whose hints opened the log opens it again without them.
func TestARebuildAfterACheckpointIsRefusedDoesNotTrustItsHints(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, index string)
	}{
		{"a table file missing", func(t *testing.T, index string) {
			chunks := tableFiles(t, index)
			require.NoError(t, os.Remove(chunks[0]))
		}},
		{"a table file cut short", func(t *testing.T, index string) {
			chunks := tableFiles(t, index)
			fi, err := os.Stat(chunks[0])
			require.NoError(t, err)
			require.NoError(t, os.Truncate(chunks[0], fi.Size()/2))
		}},
		// Found by the replay from the checkpoint, which meets the
		// salvaged event before it ends: the log is opened again too.
		{"table entries that fail their checksums", flipTableFiles},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const published = 130
			e, pol, old := storeWithOldIndex(t, published)
			// Records past the checkpoint that read its table entries: a
			// replay from it meets them before the salvaged event.
			ackFirst(t, e, pol, 5)
			sealSecondSegmentEarly(t, e.dir)

			e.opts.Salvage = true
			e.open()
			left := e.queue("jobs", pol).Stats().Ready
			require.Less(t, left, published, "setup: the salvage lost the records past the early seal")
			e.close()

			e.opts.Salvage = false
			swapIndex(t, old, e.dir) // the index from before the salvage
			tc.damage(t, filepath.Join(e.dir, "index"))
			s, err := broker.Open(e.dir, e.opts)
			require.NoError(t, err, "the salvaged store opens without Salvage, whatever index it holds")
			e.s = s
			require.True(t, s.Recovery().IndexRebuilt, "the damaged checkpoint is not used")
			require.Equal(t, left, e.queue("jobs", pol).Stats().Ready, "the messages the salvage left")
			ds, err := e.queue("jobs", pol).Receive(ctx(t), published)
			require.NoError(t, err, "every message the store holds reads")
			require.Len(t, ds, left)
			e.close()
		})
	}
}

// flipTableFiles damages every entry of the table files in index, each
// file keeping its size: Load takes the checkpoint, and the replay from it
// finds the damage in the entries it reads.
func flipTableFiles(t *testing.T, index string) {
	t.Helper()
	for _, c := range tableFiles(t, index) {
		data, err := os.ReadFile(c)
		require.NoError(t, err)
		for i := range data {
			data[i] ^= 0x5a
		}
		require.NoError(t, os.WriteFile(c, data, 0o600))
	}
}

// A checkpoint whose table a replay from it to the end of the log found
// damaged, having met no salvaged event, is refused, and the index is
// rebuilt from the log opened again without that checkpoint's hints, as
// after every refusal of the checkpoint whose hints opened it: the
// rebuild after it finds no checkpoint, and cannot tell how far the
// replay went (one that stopped early, at a meta record of another
// store's secret, showed nothing of the hints). The rebuild holds every
// message, and the log is opened twice.
func TestARebuildAfterATableAReplayFoundDamagedOpensTheLogAgain(t *testing.T) {
	const published, acked = 130, 5
	e, pol, old := storeWithOldIndex(t, published)
	ackFirst(t, e, pol, acked)

	swapIndex(t, old, e.dir)
	flipTableFiles(t, filepath.Join(e.dir, "index"))
	fs := &walLockCountFS{FS: vfs.Default}
	e.opts.FS = fs
	s := e.open()
	require.True(t, s.Recovery().IndexRebuilt, "the damaged checkpoint is not used")
	require.Equal(t, int64(2), fs.walLocks.Load(), "the log is opened again without the refused checkpoint's hints")
	require.Equal(t, published-acked, e.queue("jobs", pol).Stats().Ready, "every message not acknowledged")
	ds, err := e.queue("jobs", pol).Receive(ctx(t), published)
	require.NoError(t, err, "every message the store holds reads")
	require.Len(t, ds, published-acked)

	// A store whose checkpoint is taken opens its log once.
	e.close()
	fs.walLocks.Store(0)
	e.open()
	require.Equal(t, int64(1), fs.walLocks.Load(), "setup: an Open that takes its checkpoint opens the log once")
}

// walLockCountFS counts the locks taken on a log's directory: one each
// time the log is opened.
type walLockCountFS struct {
	vfs.FS
	walLocks atomic.Int64
}

func (f *walLockCountFS) Lock(name string) (io.Closer, error) {
	if filepath.Base(name) == "LOCK" {
		f.walLocks.Add(1)
	}
	return f.FS.Lock(name)
}

func (f *walLockCountFS) CheckDir(dir string) error { return vfs.CheckDir(f.FS, dir) }

// tableFiles returns the table files of the index directory index, one at
// least.
func tableFiles(t *testing.T, index string) []string {
	t.Helper()
	chunks, err := filepath.Glob(filepath.Join(index, "tbl-*.idx"))
	require.NoError(t, err)
	require.NotEmpty(t, chunks, "setup: the checkpoint has table files")
	return chunks
}
