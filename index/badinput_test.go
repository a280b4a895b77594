package index

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeOfAnEmptyRecordSaysSo: an empty record has no kind byte; the
// error says the record is empty, not that its kind is unknown.
func TestDecodeOfAnEmptyRecordSaysSo(t *testing.T) {
	for _, rec := range [][]byte{nil, {}} {
		_, err := Decode(rec)
		require.ErrorIs(t, err, ErrBadEvent)
		require.ErrorContains(t, err, "empty record")
		require.NotContains(t, err.Error(), "kind")
	}
}
