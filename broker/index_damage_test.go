package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
)

// flipTableBit flips bit (0 to 7) of byte at (0 to 31) in the table entry
// of message id, in a closed store's table file.
func flipTableBit(t *testing.T, dir, id string, at int64, bit uint) {
	t.Helper()
	seq, ok := broker.MessageSeq(id)
	require.True(t, ok)
	f, err := os.OpenFile(filepath.Join(dir, "index", "tbl-000000000000.idx"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	off := int64(seq%index.ChunkEntries)*index.EntrySize + at
	var one [1]byte
	_, err = f.ReadAt(one[:], off)
	require.NoError(t, err)
	one[0] ^= 1 << bit
	_, err = f.WriteAt(one[:], off)
	require.NoError(t, err)
}

// receiveInOrder receives from q one message at a time, as many times as
// want has messages, and requires each Receive that returns nil to hand
// out the next of want: a store that met damage may fail the call with
// Corrupt instead, and then stops. It returns what was received. (Only a
// failure looks at Stats and the store's error: both read the stream,
// and would find the damage before the Receive under test.)
func receiveInOrder(t *testing.T, s *broker.Store, q *broker.Queue, want []string) []string {
	t.Helper()
	var got []string
	for range want {
		ds, err := q.Receive(context.Background(), 1)
		if err != nil {
			require.ErrorIs(t, err, broker.Corrupt, "only damage may stop it")
			break
		}
		got = append(got, ids(ds)...)
		if len(ds) != 1 || !slices.Equal(want[:len(got)], got) {
			t.Fatalf("a Receive that returned nil handed out %v, not the next message in order: got %v, want %v (Stats now: %+v; store error: %v)",
				ids(ds), got, want, q.Stats(), s.Err())
		}
	}
	return got
}

// One bit flipped in the table entry of a stream message, in its queue
// field (the stream bit), in a store whose two queues interleave their
// publishes: the entry no longer reads as its queue's stream message, and
// the jump of that queue's cursor over the other queue's entries
// (Table.NextStream) is what passes it. DESIGN.md ("Who writes the
// table"): a damaged entry stops the store, which marks its checkpoint
// suspect so that the next open rebuilds. The jump checks every entry it
// passes: the Receive that meets the damaged one fails with Corrupt
// instead of handing out the messages published after it, the store
// stops (a Close writes no checkpoint past the damage), and the next Open
// rebuilds the index from the log, which hands out every message in
// order.
func TestADamagedQueueFieldInATableEntryStopsTheStoreBeforeALaterMessageIsHandedOut(t *testing.T) {
	e := newEnv(t)
	pol := policy()
	a := e.queue("a", pol)
	b := e.queue("b", pol)
	var aIDs, bIDs []string
	for i := 0; i < 4; i++ {
		aIDs = append(aIDs, mustPublish(t, a, fmt.Sprint("a", i)).ID)
		bIDs = append(bIDs, mustPublish(t, b, fmt.Sprint("b", i)).ID)
	}
	e.close() // a checkpoint: the eight in the table's stream

	flipTableBit(t, e.dir, aIDs[1], 19, 7) // the queue field is bytes 16 to 19, the stream bit its top bit

	e.open()
	a = e.queue("a", pol)
	got := receiveInOrder(t, e.s, a, aIDs)
	require.Equal(t, aIDs[:1], got, "the Receive that meets the damage fails")
	require.ErrorIs(t, e.s.Err(), broker.Corrupt, "the store stopped")
	e.close()

	e.open()
	require.True(t, e.s.Recovery().IndexRebuilt, "the checkpoint was marked suspect")
	a, b = e.queue("a", pol), e.queue("b", pol)
	e.clock.Advance(pol.VisibilityTimeout) // the lease of a's first message lapses
	require.Equal(t, aIDs, ids(mustReceive(t, a, 10)), "nothing is lost, and the order is kept")
	require.Equal(t, bIDs, ids(mustReceive(t, b, 10)))
	require.NoError(t, e.s.Err())
}

// One bit flipped in the table entry of a queue's second message, in each
// of its fields, with no other queue: the cursor reads the entry itself
// (Table.Get) and finds it damaged. A Receive of many hands out nothing
// past the damage: it fails with Corrupt, leasing nothing (the message
// before the damage included: what it leased was never logged), and the
// store stops. The next Open rebuilds the index from the log and every
// message is there, in order, never delivered.
func TestAReceiveThatMeetsADamagedTableEntryFailsAndHandsOutNothing(t *testing.T) {
	for _, at := range []int64{0, 8, 16, 20, 28} { // pos, enqueuedAt, queue, size, crc
		t.Run(fmt.Sprint("byte=", at), func(t *testing.T) {
			e := newEnv(t)
			pol := policy()
			q := e.queue("q", pol)
			var want []string
			for i := 0; i < 4; i++ {
				want = append(want, mustPublish(t, q, fmt.Sprint("m", i)).ID)
			}
			e.close()

			flipTableBit(t, e.dir, want[1], at, 2)

			e.open()
			q = e.queue("q", pol)
			ds, err := q.Receive(context.Background(), 10)
			require.ErrorIs(t, err, broker.Corrupt)
			require.Empty(t, ds)
			require.ErrorIs(t, e.s.Err(), broker.Corrupt, "the store stopped")
			e.close()

			e.open()
			require.True(t, e.s.Recovery().IndexRebuilt, "the checkpoint was marked suspect")
			q = e.queue("q", pol)
			ds = mustReceive(t, q, 10)
			require.Equal(t, want, ids(ds), "nothing is lost, and the order is kept")
			for _, d := range ds {
				require.Equal(t, 1, d.Deliveries, "the failed Receive leased nothing")
			}
		})
	}
}

// Wake's look for the next ready message walks the same stream a Receive
// does. When it meets a damaged table entry it says "look now"
// (Scheduled, In zero), as it does for a clock no store can record: the
// Receive that follows reports the damage and stops the store. It used to
// say nothing was scheduled, leaving a consumer that waits on Wake alone
// asleep over a queue of ready messages.
func TestWakeThatMeetsADamagedTableEntrySaysLookNow(t *testing.T) {
	e := newEnv(t)
	pol := policy()
	q := e.queue("q", pol)
	var want []string
	for i := 0; i < 3; i++ {
		want = append(want, mustPublish(t, q, fmt.Sprint("m", i)).ID)
	}
	e.close()

	flipTableBit(t, e.dir, want[0], 28, 2) // its crc

	e.open()
	q = e.queue("q", pol)
	w := q.Wake()
	require.True(t, w.Scheduled, "Wake met the damage: look now")
	require.LessOrEqual(t, w.In, time.Duration(0))
	ds, err := q.Receive(context.Background(), 10)
	require.ErrorIs(t, err, broker.Corrupt, "the Receive reports the damage")
	require.Empty(t, ds)
	require.ErrorIs(t, e.s.Err(), broker.Corrupt, "the store stopped")
}
