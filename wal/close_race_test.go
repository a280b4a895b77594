package wal

import (
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// TestSalvageDoneOnAClosedLogIsErrClosedAndRemovesNothing: every call on a
// closed Log is ErrClosed, and no file of the log is removed once Close has
// let the directory go: SalvageDone must not remove the list another Log,
// which now has the directory and is building its report, relies on.
func TestSalvageDoneOnAClosedLogIsErrClosedAndRemovesNothing(t *testing.T) {
	dir, acked, _ := buildLog(t)
	victim := firstIn(acked, 2)
	flipByte(t, segFile(dir, 2), victim.pos.Offset()+segment.FrameHeaderSize+1)
	list := filepath.Join(dir, "salvage", "unfinished.json")
	keep := Options{SegmentBytes: smallSeg, Salvage: true, KeepSalvageList: true}

	first := mustOpen(t, dir, keep)
	require.Len(t, first.Recovery().Salvaged, 1)
	require.NoError(t, first.Close())

	// Another Log has the directory now, and has not handed its report on.
	second := mustOpen(t, dir, keep)
	defer second.Close()
	require.FileExists(t, list)

	err := first.SalvageDone()
	assert.FileExists(t, list, "a closed Log removed a file of a directory another Log has open")
	require.ErrorIs(t, err, ErrClosed, "SalvageDone on a closed Log")
}

// TestAReadFromIteratesCallbackReturnsWhileAnotherGoroutineCloses:
// Iterate's fn may call Read while another goroutine closes the log. With
// a sync.RWMutex per segment, Close's wait for the exclusive lock blocked
// the Read's shared one, held up behind Iterate's: all three hung. The
// Read is refused (ErrClosed), Iterate ends, Close returns.
func TestAReadFromIteratesCallbackReturnsWhileAnotherGoroutineCloses(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096})
	es := appendRecords(t, l, 0, 5)
	first := es[0]
	s := l.segment(first.pos.Segment())

	closed := make(chan error, 1)
	readDone := make(chan error, 1)
	iterDone := make(chan error, 1)
	go func() {
		seen := false
		iterDone <- l.Iterate(0, func(pos Position, rec []byte) error {
			if seen {
				return nil
			}
			seen = true
			// Another goroutine closes the log; wait until it has begun
			// to close the segment (a new reader is then refused).
			go func() { closed <- l.Close() }()
			for {
				if s.readers.Load()&closingBit != 0 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			_, err := l.Read(first.pos)
			readDone <- err
			return nil
		})
	}()
	select {
	case err := <-readDone:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Read from Iterate's fn never returned while Close waits for the segment: deadlock (Iterate and Close are stuck too)")
	}
	require.NoError(t, <-iterDone)
	require.NoError(t, <-closed)
}

// rotGateFS blocks, once armed, the rename that puts a prepared segment in
// place (rotation), until release is closed.
type rotGateFS struct {
	vfs.FS
	armed            atomic.Bool
	entered, release chan struct{}
}

func (g *rotGateFS) Rename(oldname, newname string) error {
	if strings.HasSuffix(oldname, segSuffix+tmpSuffix) && strings.HasSuffix(newname, segSuffix) && g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.FS.Rename(oldname, newname)
}

// TestARotationUnderWayWhenTheLogIsPoisonedAcknowledgesNothing: a failed
// directory sync of RemoveBelow poisons the log, and no later fsync's
// success may stand for what it lost: a rotation under way then (the batch
// was taken before the poison) stops, and its Append fails with
// ErrPoisoned rather than being acknowledged in the new segment.
func TestARotationUnderWayWhenTheLogIsPoisonedAcknowledgesNothing(t *testing.T) {
	fault := vfs.NewFaultFS(vfs.Default)
	g := &rotGateFS{FS: fault, entered: make(chan struct{}), release: make(chan struct{})}
	l := mustOpen(t, t.TempDir(), Options{FS: g, SegmentBytes: 1024})
	var es []entry
	for l.Stats().Segments < 2 {
		es = append(es, appendRecords(t, l, len(es), 1)...)
	}
	g.armed.Store(true)
	type result struct {
		pos []Position
		err error
	}
	appended := make(chan result, 1)
	go func() {
		for i := len(es); ; i++ {
			pos, err := l.Append(record(i))
			if err != nil || pos[0].Segment() > 2 {
				appended <- result{pos, err}
				return
			}
		}
	}()
	<-g.entered // the writer is rotating from segment 2 to 3

	fault.Inject(vfs.Rule{Op: vfs.OpSyncDir, Times: 1})
	_, err := l.RemoveBelow(MakePosition(2, 0))
	require.ErrorIs(t, err, ErrPoisoned, "the removal's directory sync failed")
	require.ErrorIs(t, l.Err(), ErrPoisoned)

	close(g.release)
	r := <-appended
	defer l.Close()
	require.ErrorIs(t, r.err, ErrPoisoned, "an Append acknowledged at %v, after a rotation synced the directory again on a poisoned log", r.pos)
}
