package broker_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
)

// A table file changed on disk between two runs: cut short (to nothing,
// mid-entry, by one page), grown (by a byte, by a page: no longer the
// size of a chunk, nor a multiple of a page), or gone. Open rebuilds the
// index from the log, as documented, saying which file made it, and the
// state is what the store acknowledged. A table entry damaged in place
// (a flipped bit in a stream message's entry) is found when the stream
// reaches it: the Receive fails with Corrupt and hands out nothing, and
// the reopen rebuilds the same state.
func TestTableFileChangedBetweenRunsIsRebuiltFromTheLog(t *testing.T) {
	const chunkBytes = index.EntrySize * index.ChunkEntries
	page := int64(os.Getpagesize())
	for _, c := range []struct {
		name   string
		change func(path string) error
		atOpen bool // Open finds it (else the first Receive does)
	}{
		{"cut to nothing", func(p string) error { return os.Truncate(p, 0) }, true},
		{"cut mid-entry", func(p string) error { return os.Truncate(p, 1000) }, true},
		{"cut by a page", func(p string) error { return os.Truncate(p, chunkBytes-page) }, true},
		{"grown by a byte", func(p string) error { return os.Truncate(p, chunkBytes+1) }, true},
		{"grown by a page", func(p string) error { return os.Truncate(p, chunkBytes+page) }, true},
		{"removed", os.Remove, true},
		{"an entry's bit flipped", func(p string) error {
			return flipByte(p, 20*index.EntrySize+3) // message 20: the stream's head once 1 to 5 are taken
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs lockedBuffer
			e := newEnv(t, func(o *broker.Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
			q := e.queue("jobs", policy())
			for i := range 40 {
				mustPublish(t, q, fmt.Sprintf("m%d", i))
			}
			e.reopen() // the backlog's entries are in the table file now
			q = e.queue("jobs", policy())
			ds := mustReceive(t, q, 5)
			require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt))
			mustNack(t, q, ds[1].Lease.Receipt, fmt.Errorf("later"))
			want := broker.Dump(e.s)
			e.close()

			path := filepath.Join(e.dir, "index", "tbl-000000000000.idx")
			require.NoError(t, c.change(path))
			s := e.open()
			if c.atOpen {
				require.Contains(t, logs.text(), "rebuilding the index from the log")
				require.Contains(t, logs.text(), "tbl-000000000000.idx", "the warning names the file")
				require.Empty(t, broker.StateDiff(want, broker.Dump(s)))
				require.NoError(t, broker.VerifyIndex(s))
				return
			}
			q = e.queue("jobs", policy())
			_, err := q.Receive(ctx(t), 100)
			requireErrorIs(t, err, broker.Corrupt, "tbl-000000000000.idx")
			_ = s.Close()
			e.s = nil
			s = e.open()
			require.Empty(t, broker.StateDiff(want, broker.Dump(s)))
			require.NoError(t, broker.VerifyIndex(s))
		})
	}
}

// flipByte inverts the byte at off in the file at path.
func flipByte(path string, off int64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if off >= int64(len(b)) {
		return fmt.Errorf("%s: no byte at %d", path, off)
	}
	b[off] ^= 0xff
	return os.WriteFile(path, b, 0o600)
}
