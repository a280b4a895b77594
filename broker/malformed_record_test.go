package broker_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/wal"
)

// A record of a known kind whose body is malformed, its frame valid: Open
// refuses the store with Corrupt naming the file, the offset, the kind
// and the field, without pointing to Salvage; Salvage refuses it the same
// way; and neither changes a file, so the record after it is still there.
func TestAMalformedRecordOfAKnownKindIsRefusedNamingItsFieldAndLosesNothing(t *testing.T) {
	for _, c := range []struct {
		name     string
		body     []byte
		mentions string
	}{
		{"a length past the end", []byte{3, 1, 5, 2, 100, 'a', 'b'}, "publish event: index: malformed event: key: 100 bytes run past the record (2 left)"},
		{"a field cut short", []byte{4, 1, 1, 1, 2, 1, 2, 3}, "lease event: index: malformed event: nonce: 8 bytes run past the record (3 left)"},
		{"bytes past the last field", []byte{5, 1, 1, 0x80}, "ack event: index: malformed event: 1 trailing bytes"},
		{"a failure trailer without a reason", []byte{6, 1, 1, 1, 2, 7, 0, 0}, "nack event: index: malformed event: failure trailer without a reason"},
		{"a varint in a longer form", []byte{5, 1, 0x81, 0x00}, "ack event: index: malformed event: seq: bad unsigned field"},
		{"an empty record", []byte{}, "index: malformed event: empty record"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			q := e.queue("jobs", policy())
			mustPublish(t, q, "one")
			e.close()
			after := index.Event{Kind: index.KindPublish, Queue: 1, Seq: 2, Time: t0.UnixNano(), Payload: []byte("after it")}
			l, err := wal.Open(e.dir, wal.Options{SegmentBytes: testSegmentBytes})
			require.NoError(t, err)
			pos, err := l.Append(c.body, after.Append(nil))
			require.NoError(t, err)
			require.NoError(t, l.Close())
			before := storeFiles(t, e.dir)

			openEach(t, e, func(salvage bool, err error) {
				requireErrorIs(t, err, broker.Corrupt, filepath.Join(e.dir, "0000000001.seg"), c.mentions)
				var ce *wal.CorruptionError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, pos[0].Offset(), ce.Offset, "salvage %v: the offset of the malformed record", salvage)
				require.NotContains(t, err.Error(), "Options.Salvage may open", "salvage %v", salvage)
				require.Equal(t, before, storeFiles(t, e.dir), "salvage %v: the refused Open changed the store's files", salvage)
			})
			_, err = os.Stat(filepath.Join(e.dir, "salvage"))
			require.ErrorIs(t, err, os.ErrNotExist, "nothing was copied aside")
		})
	}
}
