package segment_test

import (
	"io/fs"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// oneRecord returns a segment of seq holding one record frame, zeros after it.
func oneRecord(seq uint32) []byte {
	h := segment.EncodeHeader(seq)
	data := segment.AppendFrame(h[:], seq, 0, segment.KindRecord, segment.Full, []byte("hello"))
	return append(data, make([]byte, 200)...)
}

func noFrames(segment.Frame) error { return nil }

// TestScanFromRefusesAnOffsetOutsideTheFrames: an offset before the
// header's end or past the data names no place a frame can start. It used
// to index outside the data (a panic for negative offsets and those near
// MaxInt, whose sums overflow) or to report an End outside the data with
// no error.
func TestScanFromRefusesAnOffsetOutsideTheFrames(t *testing.T) {
	data := oneRecord(1)
	for _, from := range []int{math.MinInt, -100, -8, -1, 0, 1, segment.HeaderSize - 1, len(data) + 1, len(data) + 10, math.MaxInt - 5, math.MaxInt} {
		for _, salvage := range []bool{false, true} {
			called := false
			r, err := segment.ScanFrom(data, 1, from, salvage, func(segment.Frame) error { called = true; return nil })
			require.ErrorIs(t, err, fs.ErrInvalid, "from %d, salvage %v", from, salvage)
			require.ErrorContains(t, err, "offset")
			require.Equal(t, segment.Report{}, r, "from %d", from)
			require.False(t, called, "from %d: the function was called", from)
		}
	}
	// The bounds themselves are where frames start and where the data ends.
	r, err := segment.ScanFrom(data, 1, segment.HeaderSize, false, noFrames)
	require.NoError(t, err)
	require.Equal(t, 1, r.Records)
	r, err = segment.ScanFrom(data, 1, len(data), false, noFrames)
	require.NoError(t, err)
	require.Equal(t, segment.Report{End: len(data), Tail: segment.EndClean}, r)
}

// TestScanRefusesDataShorterThanTheHeader: such data is no segment; the
// scan used to report a clean end at HeaderSize, past the data.
func TestScanRefusesDataShorterThanTheHeader(t *testing.T) {
	h := segment.EncodeHeader(1)
	for _, data := range [][]byte{nil, {}, h[:segment.HeaderSize-1]} {
		_, err := segment.Scan(data, 1, false, noFrames)
		require.ErrorIs(t, err, fs.ErrInvalid, "%d bytes", len(data))
		require.ErrorContains(t, err, "header")
	}
	r, err := segment.Scan(h[:], 1, false, noFrames)
	require.NoError(t, err, "a header alone is an empty segment")
	require.Equal(t, segment.Report{End: segment.HeaderSize, Tail: segment.EndClean}, r)
}

// TestScanRefusesANilFunction: it used to panic at the first record.
func TestScanRefusesANilFunction(t *testing.T) {
	for _, salvage := range []bool{false, true} {
		_, err := segment.Scan(oneRecord(1), 1, salvage, nil)
		require.ErrorIs(t, err, fs.ErrInvalid)
		require.ErrorContains(t, err, "nil function")
	}
}

// TestResumeOutsideTheFrames: no frame starts in the header, so an offset
// before its end finds the first frame after it; past the data there is
// none. Negative offsets and those near MaxInt used to panic.
func TestResumeOutsideTheFrames(t *testing.T) {
	data := oneRecord(1)
	for _, from := range []int{math.MinInt, -100, -1, 0, 5, segment.HeaderSize} {
		at, ok := segment.Resume(data, 1, from)
		require.True(t, ok, "from %d", from)
		require.Equal(t, segment.HeaderSize, at, "from %d", from)
	}
	for _, from := range []int{segment.HeaderSize + 1, len(data), len(data) + 1, math.MaxInt - 5, math.MaxInt} {
		_, ok := segment.Resume(data, 1, from)
		require.False(t, ok, "from %d", from)
	}
	_, ok := segment.Resume(nil, 1, 0)
	require.False(t, ok, "no data")
}
