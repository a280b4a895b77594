package broker_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
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
// damaged, having met no salvaged event, is refused, and the index
// rebuilt from the log opened with that checkpoint's hints: the replay
// showed the log to be the one it was taken of. The rebuild walks every
// sealed segment to the seal the checkpoint records, and holds every
// message.
func TestARebuildAfterATableAReplayFoundDamagedKeepsTheHints(t *testing.T) {
	const published, acked = 130, 5
	e, pol, old := storeWithOldIndex(t, published)
	ackFirst(t, e, pol, acked)

	swapIndex(t, old, e.dir)
	flipTableFiles(t, filepath.Join(e.dir, "index"))
	s := e.open()
	require.True(t, s.Recovery().IndexRebuilt, "the damaged checkpoint is not used")
	require.Equal(t, published-acked, e.queue("jobs", pol).Stats().Ready, "every message not acknowledged")
	ds, err := e.queue("jobs", pol).Receive(ctx(t), published)
	require.NoError(t, err, "every message the store holds reads")
	require.Len(t, ds, published-acked)
}

// tableFiles returns the table files of the index directory index, one at
// least.
func tableFiles(t *testing.T, index string) []string {
	t.Helper()
	chunks, err := filepath.Glob(filepath.Join(index, "tbl-*.idx"))
	require.NoError(t, err)
	require.NotEmpty(t, chunks, "setup: the checkpoint has table files")
	return chunks
}
