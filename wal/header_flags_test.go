package wal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
)

// A segment whose header verifies with a flag or a reserved byte set was
// written by a later build that gave it a meaning (segment.DecodeHeader):
// Open refuses the log as it refuses a later format version, Salvage or
// not, and changes no file. Read as if they were 0, its frames were
// taken for this format's; and a Salvage must not rewrite the header of a
// file that is not damaged.
func TestASegmentWithALaterBuildsFlagIsRefusedAndLeftAsItIs(t *testing.T) {
	for _, c := range []struct {
		name string
		at   int // the header byte set
	}{{"flags", 10}, {"reserved", 24}} {
		t.Run(c.name, func(t *testing.T) {
			dir, acked, _ := buildLog(t)
			last, _ := lastWritten(acked)
			for _, seq := range []uint32{2, last} {
				path := segFile(dir, seq)
				data, err := os.ReadFile(path)
				require.NoError(t, err)
				data[c.at] = 1
				binary.LittleEndian.PutUint32(data[28:], crc32.Checksum(data[:28], crc32.MakeTable(crc32.Castagnoli)))
				require.NoError(t, os.WriteFile(path, data, 0o600))
			}
			before := dirContents(t, dir)
			for _, salvage := range []bool{false, true} {
				_, err := Open(dir, Options{SegmentBytes: smallSeg, Salvage: salvage})
				require.ErrorIs(t, err, segment.ErrVersion, "salvage %v", salvage)
				require.ErrorIs(t, err, errors.ErrUnsupported, "salvage %v", salvage)
				require.NotErrorIs(t, err, ErrCorrupt, "salvage %v", salvage)
				require.ErrorContains(t, err, segFile(dir, 2), "salvage %v", salvage)
				require.ErrorContains(t, err, c.name, "salvage %v", salvage)
				require.Equal(t, before, dirContents(t, dir), "salvage %v: Open changed the directory", salvage)
			}
		})
	}
}
