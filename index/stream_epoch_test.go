package index

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// A backlog published in order joins the stream whatever its instants:
// Queue's doc comment says most of a backlog is the stream, held by the
// table and not on the heap, and DESIGN.md that the Unix epoch is an
// instant like any other. A new queue's stream once started at
// EnqueuedAt 0, and a publish joins only at or after the stream's last
// instant: a backlog published in order by a clock before 1970 stayed on
// the heap (and was written whole into every checkpoint), while the same
// backlog from the epoch on was held by the table. Both are held by the
// table now.
func TestABacklogPublishedInOrderBefore1970JoinsTheStream(t *testing.T) {
	for _, base := range []int64{0, -10_000_000_000, math.MinInt64} {
		x := declared(t)
		q := x.Queue("q")
		for i := int64(0); i < 6; i++ {
			require.NoError(t, x.Apply(wal.MakePosition(1, int(100*(i+1))), pub(uint64(i+1), base+i, "")))
		}
		require.Zero(t, q.Active(), "enqueued from %d on, in order: an in-order backlog is held by the table, not on the heap", base)
	}
}

// A checkpoint holds a stream's last instant as it is; one taken while no
// message had joined a queue's stream holds the starting value, 0 in a
// checkpoint written while streams started at 0 and math.MinInt64 since.
// Load takes either for "no message joined", so a checkpoint written
// before the change still opens (the format is unchanged) and a backlog
// published before 1970 after it joins the stream; and a stream whose
// last instant is before 1970 keeps it across a checkpoint, so that the
// next publish in order joins and one out of order does not.
func TestAStreamStartedBefore1970SurvivesACheckpoint(t *testing.T) {
	const before1970 = -10_000_000_000
	for _, tc := range []struct {
		name    string
		written int64 // the streamEnq of the empty queue's checkpoint
	}{{"written when streams started at 0", 0}, {"written now", math.MinInt64}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			x, err := Rebuild(vfs.Default, dir)
			require.NoError(t, err)
			require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
			q := x.Queue("q")
			require.Equal(t, int64(math.MinInt64), q.streamEnq)
			q.streamEnq = tc.written
			checkpointAt(t, x, dir, wal.MakePosition(1, 100))
			require.NoError(t, x.Table.Close())

			y, _, err := Load(vfs.Default, dir)
			require.NoError(t, err)
			q = y.Queue("q")
			require.Equal(t, int64(math.MinInt64), q.streamEnq)
			for i := int64(0); i < 3; i++ {
				require.NoError(t, y.Apply(wal.MakePosition(1, int(200+100*i)), pub(uint64(i+1), before1970+i, "")))
			}
			require.Zero(t, q.Active(), "published in order before 1970 after the checkpoint")
			require.Equal(t, int64(before1970+2), q.streamEnq)
			checkpointAt(t, y, dir, wal.MakePosition(1, 600))
			require.NoError(t, y.Table.Close())

			z, _, err := Load(vfs.Default, dir)
			require.NoError(t, err)
			defer z.Table.Close()
			q = z.Queue("q")
			require.Equal(t, int64(before1970+2), q.streamEnq, "a stream's last instant before 1970 is kept")
			require.NoError(t, z.Apply(wal.MakePosition(1, 700), pub(4, before1970+2, "")))
			require.Zero(t, q.Active(), "in order: joins")
			require.NoError(t, z.Apply(wal.MakePosition(1, 800), pub(5, before1970+1, "")))
			require.Equal(t, 1, q.Active(), "out of order: active")
			require.NoError(t, z.Damaged())
		})
	}
}
