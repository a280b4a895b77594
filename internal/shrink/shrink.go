// Package shrink gives back the memory of a burst. A Go map keeps the room
// of the most entries it ever held, and a slice its array (maps.Clone and
// an append keep them too), so a burst of messages, leases or dedup keys
// stayed on the heap at its size after it had passed. The rule used
// throughout: rebuild once a collection is down to a quarter of its size
// at its last rebuild (or of its capacity), and only from From entries
// on. A rebuild then copies no more entries than left since the last, so
// its cost per removal is constant.
package shrink

import "slices"

// From is the fewest entries a collection must have held before it is
// rebuilt smaller.
const From = 1024

// Due reports whether a map holding n entries, which held peak since its
// last rebuild, is to be rebuilt.
func Due(n, peak int) bool { return peak >= From && n <= peak/4 }

// Map returns a copy of m in a map of its size.
func Map[K comparable, V any](m map[K]V) map[K]V {
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Slice returns s, or a copy of it in an array of its size once s holds a
// quarter of its capacity or less.
func Slice[S ~[]E, E any](s S) S {
	if Due(len(s), cap(s)) {
		return slices.Clone(s)
	}
	return s
}
