package wal

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every segment after the first starts with the preamble, as one group,
// and an append may use the whole segment less the room kept for it.
func TestPreambleStartsEverySegment(t *testing.T) {
	var calls atomic.Int64
	opts := Options{SegmentBytes: 2048, PreambleBytes: 128, Preamble: func() [][]byte {
		n := calls.Add(1)
		return [][]byte{[]byte(fmt.Sprintf("pre-a-%d", n)), []byte(fmt.Sprintf("pre-b-%d", n))}
	}}
	l := mustOpen(t, t.TempDir(), opts)
	defer l.Close()
	want := appendRecords(t, l, 0, 200)
	segs := l.Stats().Segments
	require.Greater(t, segs, 3)
	require.Equal(t, int64(segs-1), calls.Load(), "one preamble per rotation")

	firstOf := map[uint32][]string{}
	var user []entry
	require.NoError(t, l.Iterate(0, func(p Position, rec []byte) error {
		if len(firstOf[p.Segment()]) < 2 {
			firstOf[p.Segment()] = append(firstOf[p.Segment()], string(rec))
		}
		if len(rec) >= 4 && string(rec[:4]) == "pre-" {
			return nil
		}
		user = append(user, entry{p, append([]byte(nil), rec...)})
		return nil
	}))
	requireEntries(t, want, user)
	for seq, first := range firstOf {
		if seq == 1 {
			continue
		}
		n := seq - 1
		require.Equal(t, []string{fmt.Sprintf("pre-a-%d", n), fmt.Sprintf("pre-b-%d", n)}, first, "segment %d", seq)
	}

	// The largest group a segment may hold leaves room for the preamble.
	_, err := l.Append(make([]byte, opts.maxGroupBytes()+1))
	require.ErrorIs(t, err, ErrTooLarge)
}

// A preamble larger than the room kept for it fails the appends that needed
// the rotation, without rotating and without poisoning the log.
func TestPreambleTooLargeRefusesRotation(t *testing.T) {
	var big atomic.Bool
	opts := Options{SegmentBytes: 2048, PreambleBytes: 64, Preamble: func() [][]byte {
		if big.Load() {
			return [][]byte{make([]byte, 100)}
		}
		return nil
	}}
	l := mustOpen(t, t.TempDir(), opts)
	defer l.Close()
	big.Store(true)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = l.Append(make([]byte, 100))
	}
	require.ErrorIs(t, err, ErrTooLarge)
	require.False(t, errors.Is(err, ErrPoisoned))
	require.Equal(t, 1, l.Stats().Segments)
	big.Store(false)
	_, err = l.Append(make([]byte, 100))
	require.NoError(t, err)
	require.Equal(t, 2, l.Stats().Segments)
}
