package broker_test

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// gateFS holds the log's writes and fdatasyncs where a test says.
type gateFS struct {
	vfs.FS
	mu sync.Mutex
	// holdWrite: a WriteAt whose bytes contain it waits for writeGo.
	holdWrite []byte
	writeHeld chan struct{}
	writeGo   chan struct{}
	// holdSyncs: an fdatasync of a segment waits for syncGo (or gives up
	// after a long time, noting it in syncGaveUp).
	holdSyncs  bool
	syncGo     chan struct{}
	syncGaveUp bool
}

type gateFile struct {
	vfs.File
	g    *gateFS
	name string
}

func (g *gateFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &gateFile{File: f, g: g, name: name}, nil
}

func (f *gateFile) WriteAt(p []byte, off int64) (int, error) {
	f.g.mu.Lock()
	hold := f.g.holdWrite != nil && bytes.Contains(p, f.g.holdWrite)
	if hold {
		f.g.holdWrite = nil
	}
	f.g.mu.Unlock()
	if hold {
		close(f.g.writeHeld)
		<-f.g.writeGo
	}
	return f.File.WriteAt(p, off)
}

func (f *gateFile) Sync() error {
	f.g.mu.Lock()
	hold := f.g.holdSyncs && strings.Contains(f.name, "0000000001.seg") // the active segment, not the next one being prepared
	f.g.mu.Unlock()
	if hold {
		select {
		case <-f.g.syncGo:
		case <-time.After(5 * time.Second):
			f.g.mu.Lock()
			f.g.syncGaveUp = true
			f.g.mu.Unlock()
		}
	}
	return f.File.Sync()
}

// Under SyncNone "a publish waits for the device only in the rare case
// that a reservation's background commit falls 2,048 publishes behind"
// (Options.Sync). Here the mark that reserves the publish's ID was queued
// 2,048 publishes earlier and its fdatasync completed long before (every
// later publish was written after it); the publish that reaches the bound
// recorded durable must wait for that mark, not for the one its own call
// queues next, which would cost one publish in every 4,096 an fdatasync
// whatever the disk does. The test holds every segment fdatasync once the
// publish is queued: a publish that waits only for its write returns.
func TestSyncNonePublishWaitsForNoDeviceWhenItsReservationIsDurable(t *testing.T) {
	g := &gateFS{FS: vfs.Default, writeHeld: make(chan struct{}), writeGo: make(chan struct{}), syncGo: make(chan struct{})}
	e := newEnv(t, func(o *broker.Options) {
		o.FS = g
		o.Sync = broker.SyncNone
		o.SyncInterval = time.Hour // no background commit but the marks'
		broker.ManualMaintenance(o)
	})
	jobs := e.queue("jobs", policy())
	other := e.queue("other", policy())

	// Up to the bound the mark made durable at Open reserves: 4,096
	// sequences (seqReserve). The mark that reserves the next ones is
	// queued at half of it, and is durable long before the last of these
	// returns.
	var last uint64
	for last < 4095 {
		m := mustPublish(t, jobs, "x")
		last, _ = broker.MessageSeq(m.ID)
	}
	require.Equal(t, uint64(4095), last)

	// Keep the writer busy on a publish of another queue (sequence 4096,
	// still below the durable bound), so that the next publish of jobs
	// queues its records behind it.
	g.mu.Lock()
	g.holdWrite = []byte("HOLD-THE-WRITER")
	g.mu.Unlock()
	go func() { _, _ = other.Publish(ctx(t), []byte("HOLD-THE-WRITER")) }()
	<-g.writeHeld

	type result struct {
		m   broker.MessageValue
		err error
	}
	done := make(chan result, 1)
	active := broker.ActiveMessages(jobs)
	go func() {
		m, err := jobs.Publish(ctx(t), []byte("y")) // sequence 4097
		done <- result{m, err}
	}()
	for broker.ActiveMessages(jobs) == active { // its records are queued (it left the queue's lock)
		runtime.Gosched()
	}
	// From now on every fdatasync of the log waits until the publish has
	// returned: one that waits only for its write returns at once.
	g.mu.Lock()
	g.holdSyncs = true
	g.mu.Unlock()
	close(g.writeGo)

	r := <-done
	close(g.syncGo)
	require.NoError(t, r.err)
	seq, _ := broker.MessageSeq(r.m.ID)
	require.Equal(t, uint64(4097), seq)
	g.mu.Lock()
	gaveUp := g.syncGaveUp
	g.mu.Unlock()
	require.False(t, gaveUp, "under SyncNone, with the mark reserving its ID durable 2,048 publishes ago, the publish waited for an fdatasync (it returned only once the held fdatasync was let go)")
}
