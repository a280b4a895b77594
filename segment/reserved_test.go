package segment_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// The flags and the reserved bytes of a header are 0 in every header a
// build of this format writes. A header that verifies (magic, version and
// checksum) with any of them set was written on purpose, by a later build
// that gave them a meaning this build does not know: read as if they were
// 0, its frames would be taken for this format's. It is refused as a
// later build's file (ErrVersion, which wraps errors.ErrUnsupported), not
// as a bad header, which Salvage would rewrite over what that build meant.
// So are bytes 16..20 of a version 1 header, reserved in that version:
// no build wrote them.
func TestAHeaderWithAFlagOrAReservedByteSetIsALaterBuilds(t *testing.T) {
	type change struct {
		name  string
		field string // what the error names
		salt  uint32
		fn    func(h []byte)
	}
	var changes []change
	for bit := range 16 {
		changes = append(changes, change{fmt.Sprintf("flag bit %d", bit), "flags", 0x5a17f00d, func(h []byte) {
			binary.LittleEndian.PutUint16(h[10:], 1<<bit)
		}})
	}
	for at := 20; at < 28; at++ {
		changes = append(changes, change{fmt.Sprintf("reserved byte %d", at), "reserved", 0x5a17f00d, func(h []byte) { h[at] = 0x80 }})
	}
	for at := 16; at < 20; at++ {
		changes = append(changes, change{fmt.Sprintf("version 1, reserved byte %d", at), "reserved", 0, func(h []byte) {
			binary.LittleEndian.PutUint16(h[8:], 1)
			h[at] = 1
		}})
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			good := segment.EncodeHeader(5, c.salt)
			h := good[:]
			c.fn(h)
			binary.LittleEndian.PutUint32(h[28:], crc32.Checksum(h[:28], crc32c))

			_, err := segment.DecodeHeader(h)
			require.ErrorIs(t, err, segment.ErrVersion)
			require.ErrorIs(t, err, errors.ErrUnsupported)
			require.NotErrorIs(t, err, segment.ErrBadHeader, "not damage: Salvage would rewrite it")
			require.ErrorContains(t, err, c.field)
			require.ErrorContains(t, err, "later build")

			// Open refuses the file so, naming it.
			path := filepath.Join(t.TempDir(), "0000000005.seg")
			data := append(h, make([]byte, 4096)...)
			require.NoError(t, os.WriteFile(path, data, 0o600))
			f, err := segment.Open(vfs.Default, path, 5)
			if f != nil {
				_ = f.Close()
			}
			require.ErrorIs(t, err, segment.ErrVersion)
			require.ErrorContains(t, err, path)
		})
	}
	// The headers this build writes, and version 1's, pass.
	for _, h := range [][]byte{func() []byte { h := segment.EncodeHeader(5, 0xffffffff); return h[:] }(), version1(goldenSegment(0))[:segment.HeaderSize]} {
		_, err := segment.DecodeHeader(h)
		require.NoError(t, err)
	}
}
