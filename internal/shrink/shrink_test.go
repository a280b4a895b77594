package shrink

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDueFromAQuarterOfAtLeastFrom(t *testing.T) {
	require.False(t, Due(0, From-1), "below From nothing is rebuilt")
	require.True(t, Due(From/4, From))
	require.False(t, Due(From/4+1, From))
}

func TestSliceKeepsItsEntriesAndGivesBackItsArray(t *testing.T) {
	s := make([]int, 4*From)
	for i := range s {
		s[i] = i
	}
	kept := Slice(s[:From+1])
	require.Equal(t, 4*From, cap(kept), "above a quarter of its capacity it stays")
	small := Slice(s[:From])
	require.Less(t, cap(small), 2*From)
	require.Equal(t, s[:From], small)

	m := map[int]string{1: "a", 2: "b"}
	require.Equal(t, m, Map(m))
}
