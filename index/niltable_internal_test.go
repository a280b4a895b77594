package index

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An index running over a nil Table has nowhere to keep its entries: its
// Put drops them. A queue that then reads one finds it missing, and that
// is damage, which stops the store, not the reading of a closed table,
// which a store that closed may meet and shrug off.
func TestAnIndexOverANilTableIsDamagedNotClosed(t *testing.T) {
	x := NewWithTable(nil)
	q, err := x.Declare(1, "q", Policy{MaxDeliveries: 3})
	require.NoError(t, err)
	_, ok, closed, damaged := q.entry(1)
	require.False(t, ok)
	require.False(t, closed, "a nil table read as a closed one")
	require.True(t, damaged)
	require.ErrorContains(t, x.Damaged(), "nil *index.Table")
}
