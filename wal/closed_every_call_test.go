package wal

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// errors.go: "ErrClosed is returned by every call on a closed Log": a
// call whose records are too large for a segment is no exception, so that
// a caller telling "the log is gone" from "this call was wrong" with
// errors.Is(err, ErrClosed) is not told to shrink its records instead.
func TestACallOnAClosedLogIsErrClosedWhateverItsRecords(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096})
	require.NoError(t, l.Close())
	_, err := l.Append(make([]byte, 3000), make([]byte, 3000))
	require.ErrorIs(t, err, ErrClosed, "records too large for a segment")
	_, err = l.Append(make([]byte, 3000))
	require.ErrorIs(t, err, ErrClosed, "records that fit")
}
