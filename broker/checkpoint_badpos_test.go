package broker_test

import (
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/crc32"
	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/wal"
)

// A checkpoint that passes its checksum but gives a log position no
// segment holds (in segment 0, or past the end of any segment) was taken
// by Open for the log's durable position and given to wal.Open, which
// refuses such a position as a bad option: the store did not open. It is
// damage to the index, which the log rebuilds.
func TestACheckpointWhoseLogPositionNoSegmentHoldsIsRebuiltOver(t *testing.T) {
	for _, pos := range []wal.Position{wal.MakePosition(0, 200), wal.MakePosition(1, wal.MaxSegmentBytes+1)} {
		var logs lockedBuffer
		e := newEnv(t, func(o *broker.Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
		q := e.queue("jobs", policy())
		mustPublish(t, q, "kept")
		want := broker.Dump(e.s)
		e.close()

		path := filepath.Join(e.dir, "index", "checkpoint")
		file, err := os.ReadFile(path)
		require.NoError(t, err)
		binary.LittleEndian.PutUint64(file[24:], uint64(pos))
		tab := crc32.MakeTable(crc32.Castagnoli)
		binary.LittleEndian.PutUint32(file[12:], crc32.Update(crc32.Checksum(file[16:64], tab), tab, file[64:]))
		require.NoError(t, os.WriteFile(path, file, 0o600))

		s := e.open()
		require.Contains(t, logs.text(), "rebuilding the index from the log", "position %v", pos)
		require.Empty(t, broker.StateDiff(want, broker.Dump(s)), "position %v", pos)
		e.close()
	}
}
