package broker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/crc32"
	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/wal"
)

// What a store does with a log or an index that says what this code never
// writes (each record or file intact by its checksum): it refuses it with
// an error that names what is wrong, or rebuilds from the log, and never
// hands out an ID twice, stalls, or writes a log that no later open reads.

// writeRawLog makes dir a log holding recs (event records written as they
// are, each checksummed by its frame like any other): what a store reads
// back when the log says something this code would never write.
func writeRawLog(t *testing.T, dir string, recs ...index.Event) {
	t.Helper()
	l, err := wal.Open(dir, wal.Options{SegmentBytes: testSegmentBytes})
	require.NoError(t, err)
	meta := index.Event{Kind: index.KindMeta, Secret: bytes.Repeat([]byte{9}, index.SecretSize)}
	raw := [][]byte{meta.Append(nil)}
	for i := range recs {
		raw = append(raw, recs[i].Append(nil))
	}
	_, err = l.Append(raw...)
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

func rawDeclare(id uint32, name string) index.Event {
	p := policy()
	return index.Event{Kind: index.KindDeclare, Queue: id, Name: name, Policy: index.Policy{
		VisibilityTimeout: int64(p.VisibilityTimeout), RetryDelay: int64(p.RetryDelay), MaxDeliveries: int64(p.MaxDeliveries)}}
}

// A salvage that lost the only declaration of the first queue leaves the
// index with queue number 2 only. A queue declared afterwards must get a
// number of its own: it used to get len(queues)+1 = 2, the surviving
// queue's number, so that its publishes went into the other queue, and
// after a reopen (where the log declares 2 twice, under two names) the new
// queue was gone.
func TestAQueueDeclaredAfterASalvageGetsANumberOfItsOwn(t *testing.T) {
	e := newEnv(t)
	e.queue("alpha-lost-by-damage", policy())
	b := e.queue("bravo", policy())
	mustPublish(t, b, "for bravo")
	e.close()

	// No checkpoint to consult: the declarations come from the log alone.
	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
	require.NoError(t, err)
	damaged := 0
	for _, seg := range segs {
		raw, err := os.ReadFile(seg)
		require.NoError(t, err)
		for i := bytes.Index(raw, []byte("alpha-lost")); i >= 0; i = bytes.Index(raw, []byte("alpha-lost")) {
			raw[i] ^= 0x40
			damaged++
		}
		require.NoError(t, os.WriteFile(seg, raw, 0o600))
	}
	require.NotZero(t, damaged)

	e.opts.Salvage = true
	s := e.open()
	require.Equal(t, []string{"bravo"}, s.Queues(), "the damaged declaration is gone")
	c := e.queue("charlie", policy())
	mustPublish(t, c, "for charlie")

	b = e.queue("bravo", policy())
	got := mustReceive(t, b, 10)
	require.Len(t, got, 1, "bravo holds only its own message")
	require.Equal(t, "for bravo", string(got[0].Message.Payload))

	e.opts.Salvage = false
	s = e.reopen()
	require.ElementsMatch(t, []string{"bravo", "charlie"}, s.Queues(), "both queues survive a reopen")
	c = e.queue("charlie", policy())
	got = mustReceive(t, c, 10)
	require.Len(t, got, 1)
	require.Equal(t, "for charlie", string(got[0].Message.Payload))
}

// A publish record whose sequence is 2^64-1 (checksummed, so read as
// intact) made the next sequence wrap to 0: the store then handed out
// message 0 and, after it, 1, 2, ... again. Open must refuse the log, naming
// what is wrong, instead of reusing IDs.
func TestARecordAtTheLastSequenceIsRefusedNotWrapped(t *testing.T) {
	dir := t.TempDir()
	writeRawLog(t, dir, rawDeclare(1, "jobs"),
		index.Event{Kind: index.KindPublish, Queue: 1, Seq: 1, Time: t0.UnixNano(), Payload: []byte("one")},
		index.Event{Kind: index.KindPublish, Queue: 1, Seq: math.MaxUint64, Time: t0.UnixNano(), Payload: []byte("last")})
	s, err := broker.Open(dir, broker.Options{Now: newFakeClock().Now, SegmentBytes: testSegmentBytes})
	if err == nil {
		defer s.Close()
		q, qerr := s.Queue("jobs", policy())
		require.NoError(t, qerr)
		m, perr := q.Publish(ctx(t), []byte("new"))
		require.NoError(t, perr)
		t.Fatalf("Open accepted a log whose sequences are used up; the next publish got ID %s", m.ID)
	}
	requireErrorIs(t, err, broker.Corrupt, "sequence")
}

// A log whose mark takes every sequence but the last few leaves none for a
// publish: the index's counter wrapped, handing out 2^64-1 (which no open
// reads back) and then 0, 1, ... again. The publish now fails, saying
// why, and the store stays usable for what it holds.
func TestAPublishPastTheLastSequenceIsRefusedNotWrapped(t *testing.T) {
	dir := t.TempDir()
	writeRawLog(t, dir, rawDeclare(1, "jobs"),
		index.Event{Kind: index.KindPublish, Queue: 1, Seq: 1, Time: t0.UnixNano(), Payload: []byte("one")},
		index.Event{Kind: index.KindMark, Seq: math.MaxUint64 - 1})
	s, err := broker.Open(dir, broker.Options{Now: newFakeClock().Now, SegmentBytes: testSegmentBytes})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	for range 2 {
		m, err := q.Publish(ctx(t), []byte("new"))
		requireErrorIs(t, err, index.ErrNoSequence, "jobs", "sequence")
		require.Zero(t, m)
	}
	got, err := q.Receive(ctx(t), 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "one", string(got[0].Message.Payload))
}

// A publish record far ahead of the sequences before it (checksummed, so
// read as intact) widened its queue's stream to 2^40 sequence numbers, and
// the walk of the stream visited each one: the Receive after the first
// message never returned. The walk now jumps from one of the queue's
// entries to the next, here at 2^60. The Receives run in a child process,
// killed after 60 s, so that a hang does not spin on in the test binary
// (the walk to 2^60 never ends: the bound only has to outlast a child
// that starts, opens and fdatasyncs a store on a loaded machine).
func TestAPublishFarAheadInTheLogDoesNotStallReceive(t *testing.T) {
	if dir := os.Getenv("WALBROKER_FAR_AHEAD_CHILD_DIR"); dir != "" {
		s, err := broker.Open(dir, broker.Options{Now: newFakeClock().Now, SegmentBytes: testSegmentBytes})
		if err != nil {
			requireErrorIs(t, err, broker.Corrupt, "sequence")
			return
		}
		defer s.Close()
		q, err := s.Queue("jobs", policy())
		require.NoError(t, err)
		require.Equal(t, "one", string(mustReceiveOne(t, q).Message.Payload))
		require.Equal(t, "far", string(mustReceiveOne(t, q).Message.Payload))
		return
	}
	dir := t.TempDir()
	writeRawLog(t, dir, rawDeclare(1, "jobs"),
		index.Event{Kind: index.KindPublish, Queue: 1, Seq: 1, Time: t0.UnixNano(), Payload: []byte("one")},
		index.Event{Kind: index.KindPublish, Queue: 1, Seq: 1 << 60, Time: t0.UnixNano() + 1, Payload: []byte("far")})
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(c, os.Args[0], "-test.run=^TestAPublishFarAheadInTheLogDoesNotStallReceive$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WALBROKER_FAR_AHEAD_CHILD_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if c.Err() != nil {
		t.Fatal("Receive after the first message did not return within 60 s: the stream walk visits every sequence up to 2^60")
	}
	require.NoError(t, err, "%s", out)
}

// rewriteCheckpointSecret replaces the store secret a checkpoint file holds
// (the body's second field, after the sealed segments) and recomputes the
// file's length and checksum, as a writer would have.
func rewriteCheckpointSecret(t *testing.T, path string, secret []byte) {
	t.Helper()
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	body := file[64:]
	off := 0
	uv := func() uint64 {
		v, n := binary.Uvarint(body[off:])
		require.Positive(t, n)
		off += n
		return v
	}
	for range uv() {
		uv()
		uv()
	}
	start := off
	n := uv()
	off += int(n)
	nb := append(append(binary.AppendUvarint(append([]byte(nil), body[:start]...), uint64(len(secret))), secret...), body[off:]...)
	hdr := append([]byte(nil), file[:64]...)
	binary.LittleEndian.PutUint64(hdr[16:], uint64(len(nb)))
	tab := crc32.MakeTable(crc32.Castagnoli)
	binary.LittleEndian.PutUint32(hdr[12:], crc32.Update(crc32.Checksum(hdr[16:], tab), tab, nb))
	require.NoError(t, os.WriteFile(path, append(hdr, nb...), 0o600))
}

// A checkpoint whose secret is not the 32 bytes a meta event holds (its
// checksum right) was loaded as it was. The store then wrote that secret
// into the preamble of every new segment as a meta record no decoder
// accepts, so the next open that replays those segments refused the whole
// log as corrupt: a bad index file turned into an unreadable log.
func TestACheckpointSecretOfTheWrongLengthNeverReachesTheLog(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 4 << 10 }))
	mustPublish(t, q, "before")
	e.close()
	rewriteCheckpointSecret(t, filepath.Join(e.dir, "index", "checkpoint"), []byte("short"))

	s, err := broker.Open(e.dir, e.opts)
	if err != nil {
		requireErrorIs(t, err, broker.Corrupt, "secret")
		return
	}
	e.s = s
	q = e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 4 << 10 }))
	for range 40 { // about three segments: each new one starts with a preamble
		mustPublish(t, q, strings.Repeat("p", 1<<10))
	}
	e.close()
	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	s, err = broker.Open(e.dir, e.opts)
	require.NoError(t, err, "the log written after the checkpoint was loaded must replay")
	e.s = s
}

// A store reopened with smaller segments than its log was written with
// keeps every live message where it is, but copying one forward must fit
// a new segment: one that cannot be copied stops reclamation at the
// segment it holds, and every later segment stays on disk for as long as
// it lives (2,500 acknowledged messages later, over a hundred segments).
// Open refuses such a SegmentBytes, naming the message; once the message
// is consumed, the smaller segments are accepted.
func TestReopeningWithSegmentsTooSmallForALiveMessageIsRefused(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = 1 << 20 })
	big := e.queue("big", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 200 << 10 }))
	m := mustPublish(t, big, strings.Repeat("B", 150<<10))
	e.close()

	e.opts.SegmentBytes = broker.MinSegmentBytes
	_, err := broker.Open(e.dir, e.opts)
	requireErrorIs(t, err, broker.QueueMisconfigured, "SegmentBytes")
	require.ErrorContains(t, err, m.ID)

	e.opts.SegmentBytes = 1 << 20 // refused, it let go of the directory
	e.open()
	big = e.queue("big", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 200 << 10 }))
	require.NoError(t, big.Ack(ctx(t), mustReceiveOne(t, big).Lease.Receipt))
	e.close()

	e.opts.SegmentBytes = broker.MinSegmentBytes
	s := e.open()
	small := e.queue("small", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 4 << 10 }))
	for i := range 600 {
		mustPublish(t, small, strings.Repeat("s", 1<<10))
		require.NoError(t, small.Ack(ctx(t), mustReceiveOne(t, small).Lease.Receipt))
		if i%50 == 49 {
			require.NoError(t, s.Maintain(), "maintenance after %d messages", i+1)
		}
	}
	require.Less(t, s.Stats().Segments, 10, "segments on disk after 600 KiB of acknowledged messages")
}

// Open of a directory holding a log that is not a store's (records framed
// and checksummed like any other, but no event a store writes) answers
// Corrupt naming the segment file and byte offset, as API.md promises for
// Corrupt, and not only a log position a reader has to map to a file.
func TestACorruptOpenOfALogThatIsNotAStoresNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	l, err := wal.Open(dir, wal.Options{SegmentBytes: testSegmentBytes})
	require.NoError(t, err)
	_, err = l.Append([]byte("hello"), []byte("world"))
	require.NoError(t, err)
	require.NoError(t, l.Close())

	s, err := broker.Open(dir, broker.Options{SegmentBytes: testSegmentBytes})
	if s != nil {
		_ = s.Close()
	}
	requireErrorIs(t, err, broker.Corrupt, filepath.Join(dir, "0000000001.seg")+" at offset 32", "store's directory")
	var ce *wal.CorruptionError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, filepath.Join(dir, "0000000001.seg"), ce.File)
	require.Equal(t, 32, ce.Offset)
	require.NotContains(t, err.Error(), "Options.Salvage may open", "salvage skips damaged frames, not records that verify")
}

// A message's publish record that verifies by its frame but no longer
// decodes (found when the message is received, where the open that trusted
// the checkpoint did not read) is Corrupt naming the segment file and byte
// offset, both while the store runs and at the open that rebuilds after it.
func TestACorruptRecordFoundWhileRunningNamesTheFile(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "the-payload-to-spoil")
	e.close()

	// Give the publish kind 0, which no build writes, its frame's
	// checksum recomputed as a writer would have. (A kind above the last
	// one is a later build's record, not damage: see
	// TestARecordOfAKindALaterBuildAddedIsRefusedAsUnsupportedNotAsDamage.)
	path := filepath.Join(e.dir, "0000000001.seg")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	off := segment.HeaderSize
	for {
		f, err := segment.Decode(data, off, 1)
		require.NoError(t, err, "the publish is in the first segment")
		if bytes.Contains(f.Body, []byte("the-payload-to-spoil")) {
			break
		}
		off = f.End()
	}
	f, _ := segment.Decode(data, off, 1)
	data[off+segment.FrameHeaderSize] = 0
	crc := crc32.Update(segment.SaltOf(data), crc32.MakeTable(crc32.Castagnoli), data[off+4:f.End()])
	binary.LittleEndian.PutUint32(data[off:], crc)
	require.NoError(t, os.WriteFile(path, data, 0o600))

	e.open()
	q = e.queue("jobs", policy())
	_, err = q.Receive(ctx(t), 1)
	requireErrorIs(t, err, broker.Corrupt, fmt.Sprintf("%s at offset %d", path, off))
	_ = e.s.Close()
	e.s = nil

	s, err := broker.Open(e.dir, e.opts)
	if s != nil {
		_ = s.Close()
	}
	requireErrorIs(t, err, broker.Corrupt, fmt.Sprintf("%s at offset %d", path, off))
}
