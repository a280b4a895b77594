package mapfault

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/edsrzf/mmap-go"
	"github.com/stretchr/testify/require"
)

// mapCutShort maps a file of size bytes, then cuts it to keep bytes.
func mapCutShort(t testing.TB, size, keep int64) mmap.MMap {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	require.NoError(t, f.Truncate(size))
	_, err = f.WriteAt([]byte{7}, 0)
	require.NoError(t, err)
	m, err := mmap.MapRegion(f, int(size), mmap.RDONLY, 0, 0)
	require.NoError(t, err)
	t.Cleanup(func() { m.Unmap() })
	require.NoError(t, f.Truncate(keep))
	return m
}

// sink keeps the compiler from leaving out a read whose value is unused.
var sink byte

func TestAReadPastTheFilesEndIsAnErrorGivingItsOffset(t *testing.T) {
	m := mapCutShort(t, 1<<20, 4096)
	var sum byte
	err := Read(m, func() error {
		sum += m[0]
		sum += m[8192+5]
		return nil
	})
	require.ErrorIs(t, err, ErrFault)
	require.ErrorContains(t, err, "offset 8197 of 1048576")
	var f *Fault
	require.ErrorAs(t, err, &f)
	require.Equal(t, Fault{Offset: 8197, Len: 1 << 20}, *f)
	require.Equal(t, byte(7), sum, "the read went as far as the fault")
}

func TestAReadThatDoesNotFaultReturnsItsOwnError(t *testing.T) {
	m := mapCutShort(t, 8192, 8192)
	mine := errors.New("mine")
	require.Equal(t, mine, Read(m, func() error {
		if m[0] != 7 {
			return nil
		}
		return mine
	}))
	require.NoError(t, Read(m, func() error { sink += m[8191]; return nil }))
}

func TestAPanicThatIsNoFaultInTheMappingGoesOn(t *testing.T) {
	m := mapCutShort(t, 8192, 8192)
	require.PanicsWithValue(t, "other", func() {
		_ = Read(m, func() error { panic("other") })
	})
	var p *[2]int
	require.Panics(t, func() {
		_ = Read(m, func() error { return errors.New(string(rune(p[1]))) })
	}, "a nil dereference is no fault of the mapping")
	other := mapCutShort(t, 1<<16, 0)
	require.Panics(t, func() {
		_ = Read(m, func() error { sink += other[100]; return nil })
	}, "a fault in another mapping is not this one's")
}

// guarded reads m[i] the way the table and the log guard a read.
func guarded(m []byte, i int) (b byte, err error) {
	defer Catch(Guard(), &err, m)
	return m[i], nil
}

// unguarded reads m[i], for comparison.
//
//go:noinline
func unguarded(m []byte, i int) (b byte, err error) { return m[i], nil }

// BenchmarkGuard is the cost of a guarded read of one byte of a mapping,
// beside an unguarded one: what a Get of the table, or a frame decoded by
// the log, pays for the guard.
func BenchmarkGuard(b *testing.B) {
	m := mapCutShort(b, 8192, 8192)
	for _, c := range []struct {
		name string
		read func([]byte, int) (byte, error)
	}{{"guarded", guarded}, {"unguarded", unguarded}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				v, err := c.read(m, 100)
				sink += v
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
