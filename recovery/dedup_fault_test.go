package recovery_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// prepGate holds the first write to a file whose name contains name until
// released, then fails it with ENOSPC (the disk filled up while the next
// segment was being prepared).
type prepGate struct {
	vfs.FS
	name    string
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

type prepGateFile struct {
	vfs.File
	g *prepGate
}

func (g *prepGate) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(name, g.name) {
		return f, err
	}
	return &prepGateFile{File: f, g: g}, nil
}

func (f *prepGateFile) WriteAt(p []byte, off int64) (int, error) {
	hold := false
	f.g.once.Do(func() { hold = true })
	if hold {
		close(f.g.held)
		<-f.g.release
		return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.WriteAt(p, off)
}

// TestADuplicateOfAFailedPublishFails: a keyed publish O needs the next
// segment, which cannot be made (ENOSPC). While the log's writer waits for
// it, PublishKeyed with O's key finds O pending. It must report what O's
// own append reports: it used to wait on a barrier instead, which needs
// no new segment and succeeded, so the duplicate returned O's ID with a
// nil error though O was never written; after a reopen the key named
// nothing and the ID went to another message. (The timeouts below only
// find the publish that waits; a slow disk makes the test see nothing, not
// fail.)
func TestADuplicateOfAFailedPublishFails(t *testing.T) {
	dir := fastDir(t)
	gate := &prepGate{FS: vfs.Default, name: "0000000002.seg.tmp", held: make(chan struct{}), release: make(chan struct{})}
	c := newClock(t0)
	s, q := openQueue(t, dir, broker.Options{Now: c.Now, SegmentBytes: broker.MinSegmentBytes, FS: gate}, "events")
	payload := []byte(strings.Repeat("p", 1000))
	// Keyed publishes, one at a time, until one blocks: it needs the next
	// segment, which the preparer is stuck making.
	var blockedKey string
	type res struct {
		m   broker.MessageValue
		err error
	}
	var blocked chan res
	for i := 0; i < 10000 && blocked == nil; i++ {
		key := fmt.Sprintf("k-%d", i)
		ch := make(chan res, 1)
		go func() {
			m, err := q.PublishKeyed(bg(), key, payload)
			ch <- res{m, err}
		}()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("publish %d: %v", i, r.err)
			}
		case <-time.After(500 * time.Millisecond):
			blockedKey, blocked = key, ch
		}
	}
	if blocked == nil {
		t.Fatal("no publish ever needed the next segment")
	}
	<-gate.held
	t.Logf("PublishKeyed(%s) waits for the next segment", blockedKey)

	dup := make(chan res, 1)
	go func() {
		m, err := q.PublishKeyed(bg(), blockedKey, []byte("again"))
		dup <- res{m, err}
	}()
	time.Sleep(300 * time.Millisecond) // the duplicate queues its Barrier
	close(gate.release)                // the preparer fails: ENOSPC

	orig := <-blocked
	d := <-dup
	t.Logf("original: %v", orig.err)
	t.Logf("duplicate: id %q err %v", d.m.ID, d.err)
	_ = s.Close()

	s2, err := broker.Open(dir, broker.Options{Now: c.Now, SegmentBytes: broker.MinSegmentBytes})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s2.Close()
	q2, err := s2.Queue("events", policyOf("events"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := q2.PublishKeyed(bg(), blockedKey, []byte("after reopen"))
	if err != nil {
		t.Fatal(err)
	}
	dups := q2.Stats().Duplicates
	t.Logf("after reopen PublishKeyed(%s) = id %s, payload %q, duplicates %d", blockedKey, again.ID, again.Payload, dups)
	if orig.err != nil && (d.err == nil || dups == 0 && again.ID == d.m.ID) {
		t.Errorf("the original publish failed (%v), yet the duplicate reported success naming message %s; after a reopen the key %s is unknown: PublishKeyed enqueued a new message %s (%q)", orig.err, d.m.ID, blockedKey, again.ID, again.Payload)
	}
}
