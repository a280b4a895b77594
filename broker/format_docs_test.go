package broker_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// The on-disk format as segment/doc.go, index/doc.go and the comments of
// index/checkpoint.go and index/table.go draw it, read back byte by byte
// from a store the broker wrote, with a decoder written from those docs
// alone (the standard library's CRC-32C and varints, none of the store's
// own decoders).

var docCastagnoli = crc32.MakeTable(crc32.Castagnoli)

// docFrame is one frame as segment/doc.go lays it out.
type docFrame struct {
	off    int
	synced uint32
	kind   byte // low 4 bits of the type byte
	place  byte // bits 4-5
	body   []byte
}

// docSegment reads the segment file at path, which the doc says is
// segment seq: its header, then its frames up to the first zero frame
// header or its seal.
func docSegment(t *testing.T, path string, seq uint32) (frames []docFrame, sealed bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(data), 32, "%s: a header of 32 bytes", path)
	h := data[:32]
	require.Equal(t, "WALBSEG\x00", string(h[0:8]), "%s: magic", path)
	require.Equal(t, uint16(2), binary.LittleEndian.Uint16(h[8:]), "%s: version 2", path)
	require.Equal(t, uint16(0), binary.LittleEndian.Uint16(h[10:]), "%s: flags 0", path)
	require.Equal(t, seq, binary.LittleEndian.Uint32(h[12:]), "%s: sequence", path)
	salt := binary.LittleEndian.Uint32(h[16:])
	require.NotZero(t, salt, "%s: a drawn salt (0 once in 2^32 files)", path)
	require.Equal(t, make([]byte, 8), h[20:28], "%s: reserved bytes 20..28 are zero", path)
	require.Equal(t, crc32.Checksum(h[:28], docCastagnoli), binary.LittleEndian.Uint32(h[28:]), "%s: header crc", path)

	open := false // inside a group
	for off := 32; ; {
		if off+17 > len(data) || bytes.Equal(data[off:off+17], make([]byte, 17)) {
			break
		}
		fh := data[off : off+17]
		n := int(binary.LittleEndian.Uint32(fh[4:]))
		require.LessOrEqual(t, off+17+n, len(data), "%s@%d: frame fits", path, off)
		require.Equal(t, seq, binary.LittleEndian.Uint32(fh[8:]), "%s@%d: frame sequence", path, off)
		require.Equal(t, crc32.Update(salt, docCastagnoli, data[off+4:off+17+n]), binary.LittleEndian.Uint32(fh[0:]),
			"%s@%d: crc of bytes 4..17+length seeded with the salt", path, off)
		f := docFrame{off: off, synced: binary.LittleEndian.Uint32(fh[12:]), kind: fh[16] & 0x0f, place: fh[16] >> 4 & 3, body: data[off+17 : off+17+n]}
		require.Zero(t, fh[16]&0xc0, "%s@%d: type bits 6-7 are 0", path, off)
		require.Contains(t, []byte{1, 2, 3}, f.kind, "%s@%d: kind", path, off)
		require.LessOrEqual(t, int(f.synced), off, "%s@%d: synced <= the frame's offset", path, off)
		switch f.place {
		case 0, 1:
			require.False(t, open, "%s@%d: a group opens inside another", path, off)
			open = f.place == 1
		case 2, 3:
			require.True(t, open, "%s@%d: middle or last frame outside a group", path, off)
			open = f.place == 2
		}
		switch f.kind {
		case 2:
			require.Zero(t, n, "%s@%d: a seal's body is empty", path, off)
			require.Zero(t, f.place, "%s@%d: a seal is a group of one", path, off)
		case 3:
			require.Equal(t, make([]byte, n), f.body, "%s@%d: a padding's body is zeros", path, off)
		}
		frames = append(frames, f)
		off += 17 + n
		if f.kind == 2 {
			sealed = true
			break
		}
	}
	require.False(t, open, "%s: the last group is whole", path)
	return frames, sealed
}

// docEvent is one event as index/doc.go encodes it.
type docEvent struct {
	kind                     byte
	queue                    uint64
	seq, deliveries, code    uint64
	time, window             int64
	nonce                    uint64
	name, key, reason, cause string
	payload, secret          []byte
	policy                   []int64
	hasFailure               bool
}

// docDecode decodes an event by index/doc.go, failing the test on any
// byte the doc does not account for.
func docDecode(t *testing.T, where string, b []byte) docEvent {
	t.Helper()
	require.NotEmpty(t, b, "%s: an event has a kind byte", where)
	e := docEvent{kind: b[0]}
	b = b[1:]
	uv := func(field string) uint64 {
		v, n := binary.Uvarint(b)
		require.Positive(t, n, "%s: %s uvarint", where, field)
		b = b[n:]
		return v
	}
	sv := func(field string) int64 {
		v, n := binary.Varint(b)
		require.Positive(t, n, "%s: %s varint", where, field)
		b = b[n:]
		return v
	}
	str := func(field string) string {
		n := uv(field)
		require.LessOrEqual(t, n, uint64(len(b)), "%s: %s length", where, field)
		s := string(b[:n])
		b = b[n:]
		return s
	}
	failure := func() {
		if len(b) == 0 {
			return
		}
		e.hasFailure = true
		e.code = uv("failure code")
		e.reason = str("failure reason")
		e.cause = str("failure cause")
		require.NotEmpty(t, e.reason, "%s: a failure trailer has a reason", where)
	}
	switch e.kind {
	case 1:
		require.Len(t, b, 32, "%s: meta is the 32-byte secret", where)
		e.secret, b = b, nil
	case 12:
		e.seq = uv("nextSeq")
	case 13:
	case 2:
		e.queue = uv("queue")
		e.name = str("name")
		for _, f := range []string{"visibilityTimeout", "retryDelay", "maxRetryDelay", "maxDeliveries", "maxMessageBytes", "capacity", "dedupWindow"} {
			e.policy = append(e.policy, sv(f))
		}
	case 11:
		e.queue = uv("queue")
		e.time = sv("clock")
		e.window = sv("window")
	case 3, 4, 5, 6, 7, 8, 9, 10:
		e.queue = uv("queue")
		e.seq = uv("seq")
		switch e.kind {
		case 3:
			e.time = sv("enqueuedAt")
			e.key = str("key")
			e.payload, b = b, nil
		case 4, 8:
			e.deliveries = uv("deliveries")
			e.time = sv("expiresAt")
			require.GreaterOrEqual(t, len(b), 8, "%s: nonce", where)
			e.nonce = binary.LittleEndian.Uint64(b)
			b = b[8:]
			if e.kind == 4 {
				failure()
			}
		case 6:
			e.deliveries = uv("deliveries")
			e.time = sv("visibleAt")
			failure()
		case 7:
			e.deliveries = uv("deliveries")
			e.time = sv("failedAt")
			e.code = uv("code")
			e.reason = str("reason")
			e.cause = str("cause")
		}
		require.Less(t, e.queue, uint64(1)<<31, "%s: queue below 2^31", where)
	default:
		t.Fatalf("%s: kind %d is not in index/doc.go", where, e.kind)
	}
	require.Empty(t, b, "%s: kind %d: bytes the doc does not account for", where, e.kind)
	return e
}

type docRecord struct {
	seg   uint32
	frame docFrame
	ev    docEvent
}

// docLog reads every segment of the store in dir by the doc.
func docLog(t *testing.T, dir string) (recs []docRecord, segs []uint32, frames map[uint32][]docFrame) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	frames = map[uint32][]docFrame{}
	for i, p := range paths {
		var seq uint32
		_, err := fmt.Sscanf(filepath.Base(p), "%010d.seg", &seq)
		require.NoError(t, err)
		fs, sealed := docSegment(t, p, seq)
		require.Equal(t, i < len(paths)-1, sealed, "%s: every segment but the last ends in a seal", p)
		frames[seq] = fs
		segs = append(segs, seq)
		for _, f := range fs {
			if f.kind == 1 {
				recs = append(recs, docRecord{seg: seq, frame: f, ev: docDecode(t, fmt.Sprintf("%s@%d", p, f.off), f.body)})
			}
		}
	}
	return recs, segs, frames
}

func TestTheFilesAStoreWritesAreWhatTheFormatDocsDescribe(t *testing.T) {
	e := newEnv(t)
	pol := policy(func(p *broker.PolicyValue) {
		p.MaxRetryDelay = 4 * time.Second
		p.Capacity = 1000
		p.DedupWindow = time.Hour
		p.MaxMessageBytes = 200 << 10
	})
	q := e.queue("jobs", pol)
	keyed, err := q.PublishKeyed(ctx(t), "key-1", []byte("keyed payload"))
	require.NoError(t, err)
	batch, err := q.PublishBatch(ctx(t), [][]byte{[]byte("b1"), []byte("b2"), []byte("b3")})
	require.NoError(t, err)
	ds := mustReceive(t, q, 4) // keyed, b1, b2, b3
	require.Len(t, ds, 4)
	require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt))
	cause := broker.NewError("FLAKY_DISK", 0x2A000007, "disk was flaky", "private detail")
	mustNack(t, q, ds[1].Lease.Receipt, cause)
	extended, err := q.Extend(ctx(t), ds[2].Lease.Receipt, time.Minute)
	require.NoError(t, err)
	require.NoError(t, q.Reject(ctx(t), ds[3].Lease.Receipt, broker.NewError("BAD_INPUT", 0x2A000008, "bad input", "private")))
	require.NoError(t, q.ReplayDeadLetter(ctx(t), batch[2].ID))
	again := mustReceiveOne(t, q) // b3 again
	require.NoError(t, q.Reject(ctx(t), again.Lease.Receipt, nil))
	require.NoError(t, q.DeleteDeadLetter(ctx(t), batch[2].ID))
	// Past one segment: a rotation writes a seal and the next segment's
	// preamble.
	big := strings.Repeat("x", 150<<10)
	for i := 0; i < 16; i++ {
		mustPublish(t, q, big)
	}
	e.clock.Advance(2 * time.Hour) // the key is past its window
	last := mustPublish(t, q, "last")
	e.close()

	recs, segs, frames := docLog(t, e.dir)
	require.Greater(t, len(segs), 1, "the test needs a rotation")
	// Every sealed segment's seal claims its own offset synced.
	for _, seq := range segs[:len(segs)-1] {
		fs := frames[seq]
		seal := fs[len(fs)-1]
		require.Equal(t, uint32(seal.off), seal.synced, "segment %d: the rotation's seal says it is durable", seq)
	}

	byKind := map[byte][]docRecord{}
	for _, r := range recs {
		byKind[r.ev.kind] = append(byKind[r.ev.kind], r)
	}
	for k := byte(1); k <= 12; k++ {
		require.NotEmpty(t, byKind[k], "kind %d was written", k)
	}
	require.Empty(t, byKind[13], "no salvage, no salvaged event")

	// The first segment's first record is the meta event; every later
	// segment starts with a preamble holding the same secret, a mark and
	// the queue's clock reading (window MaxInt64).
	require.Equal(t, byte(1), recs[0].ev.kind)
	secret := recs[0].ev.secret
	for _, seq := range segs[1:] {
		var kinds []byte
		for _, r := range recs {
			if r.seg != seq {
				continue
			}
			if len(kinds) == 4 { // meta, declare, clock reading, mark
				break
			}
			kinds = append(kinds, r.ev.kind)
			if r.ev.kind == 1 {
				require.Equal(t, secret, r.ev.secret, "segment %d: the preamble's meta holds the log's secret", seq)
			}
		}
		require.Contains(t, kinds, byte(1), "segment %d preamble: meta", seq)
		require.Contains(t, kinds, byte(12), "segment %d preamble: mark", seq)
		require.Contains(t, kinds, byte(2), "segment %d preamble: declare", seq)
	}
	sawReading := false
	for _, r := range byKind[11] {
		if r.ev.window == math.MaxInt64 {
			sawReading = true
		}
	}
	require.True(t, sawReading, "an evict with window MaxInt64 is a clock reading")

	decl := byKind[2][0].ev
	require.Equal(t, "jobs", decl.name)
	require.Equal(t, []int64{int64(pol.VisibilityTimeout), int64(pol.RetryDelay), int64(pol.MaxRetryDelay),
		int64(pol.MaxDeliveries), int64(pol.MaxMessageBytes), int64(pol.Capacity), int64(pol.DedupWindow)}, decl.policy,
		"declare: the policy fields in the doc's order")
	pub := byKind[3][0].ev
	require.Equal(t, decl.queue, pub.queue)
	require.Equal(t, "key-1", pub.key)
	require.Equal(t, "keyed payload", string(pub.payload))
	require.Equal(t, keyed.EnqueuedAt.UnixNano(), pub.time)
	require.Equal(t, keyed.ID, fmt.Sprintf("%016x", pub.seq))
	// The batch is one group of three frames.
	var places []byte
	for _, r := range byKind[3][1:4] {
		places = append(places, r.frame.place)
	}
	require.Equal(t, []byte{1, 2, 3}, places, "a batch of three is first, middle, last")

	lease := byKind[4][0].ev
	require.Equal(t, uint64(1), lease.deliveries)
	require.Equal(t, ds[0].Lease.ExpiresAt.UnixNano(), lease.time)
	require.False(t, lease.hasFailure, "an ordinary lease has no failure trailer")
	nack := byKind[6][0].ev
	require.True(t, nack.hasFailure)
	require.Equal(t, uint64(0x2A000007), nack.code)
	require.Equal(t, "FLAKY_DISK", nack.reason)
	require.Equal(t, "disk was flaky", nack.cause, "the Public half, never the private one")
	dl := byKind[7][0].ev
	require.Equal(t, "BAD_INPUT", dl.reason)
	require.Equal(t, uint64(0x2A000008), dl.code)
	require.Equal(t, "bad input", dl.cause)
	for _, r := range recs {
		require.NotContains(t, string(r.frame.body), "private", "a private detail is never written")
	}
	ext := byKind[8][0].ev
	require.Equal(t, uint64(1), ext.deliveries)
	require.Equal(t, extended.ExpiresAt.UnixNano(), ext.time)
	var maxSeq uint64
	for _, r := range byKind[3] {
		maxSeq = max(maxSeq, r.ev.seq)
	}
	require.Equal(t, last.ID, fmt.Sprintf("%016x", maxSeq))
	for _, r := range byKind[12] {
		require.LessOrEqual(t, r.ev.seq, maxSeq+1, "a mark names a next sequence no publish passed")
	}

	// The checkpoint Close wrote, by the comment in index/checkpoint.go.
	cp, err := os.ReadFile(filepath.Join(e.dir, "index", "checkpoint"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(cp), 64)
	require.Equal(t, "WALBCKP\x00", string(cp[:8]))
	require.Equal(t, uint32(1), binary.LittleEndian.Uint32(cp[8:]))
	require.Equal(t, crc32.Update(crc32.Checksum(cp[16:64], docCastagnoli), docCastagnoli, cp[64:]), binary.LittleEndian.Uint32(cp[12:]), "checkpoint crc")
	require.Equal(t, uint64(len(cp)-64), binary.LittleEndian.Uint64(cp[16:]), "bodyLen")
	logPos := binary.LittleEndian.Uint64(cp[24:])
	lastSeg := segs[len(segs)-1]
	lf := frames[lastSeg]
	require.Equal(t, uint64(lastSeg)<<32|uint64(lf[len(lf)-1].off+17+len(lf[len(lf)-1].body)), logPos, "logPos is the log's end")
	require.Equal(t, maxSeq+1, binary.LittleEndian.Uint64(cp[32:]), "nextSeq")
	require.Equal(t, uint32(decl.queue), binary.LittleEndian.Uint32(cp[40:]), "maxQueue")
	require.Equal(t, make([]byte, 20), cp[44:64], "bytes 44..64 are zero")

	// The table entries, by the comment in index/table.go.
	tbl, err := os.ReadFile(filepath.Join(e.dir, "index", "tbl-000000000000.idx"))
	require.NoError(t, err)
	checked := 0
	for _, r := range byKind[3] {
		seq := r.ev.seq
		ent := tbl[seq*32 : seq*32+32]
		if bytes.Equal(ent, make([]byte, 32)) {
			continue // absent: the chunk file holds only what a checkpoint flushed
		}
		checked++
		buf := binary.LittleEndian.AppendUint64(nil, seq)
		buf = append(buf, ent[:28]...)
		require.Equal(t, crc32.Checksum(buf, docCastagnoli), binary.LittleEndian.Uint32(ent[28:]), "entry %d crc", seq)
		require.Equal(t, uint64(r.seg)<<32|uint64(r.frame.off), binary.LittleEndian.Uint64(ent[0:]), "entry %d pos", seq)
		require.Equal(t, r.ev.time, int64(binary.LittleEndian.Uint64(ent[8:])), "entry %d enqueuedAt", seq)
		require.Equal(t, uint32(r.ev.queue), binary.LittleEndian.Uint32(ent[16:])&^(1<<31), "entry %d queue", seq)
		// The frame's length, header included (index.Message.Size).
		require.Equal(t, uint32(17+len(r.frame.body)), binary.LittleEndian.Uint32(ent[20:]), "entry %d size", seq)
		require.Zero(t, binary.LittleEndian.Uint32(ent[24:]), "entry %d reserved", seq)
	}
	require.NotZero(t, checked, "the checkpoint flushed table entries")
}

// What a salvage writes: a padding frame (kind 3, a body of zeros) over
// the damaged record, and after it a salvaged event (kind 13, no fields).
func TestWhatASalvageWritesIsWhatTheFormatDocsDescribe(t *testing.T) {
	e, _, _, _ := corruptLog(t)
	e.opts.Salvage = true
	e.open()
	e.close()
	recs, _, frames := docLog(t, e.dir)
	padded := -1
	for _, f := range frames[1] {
		if f.kind == 3 {
			padded = f.off
		}
	}
	require.NotEqual(t, -1, padded, "a padding frame where the damaged record was")
	var salvaged []docRecord
	for _, r := range recs {
		if r.ev.kind == 13 {
			salvaged = append(salvaged, r)
		}
	}
	require.Len(t, salvaged, 1, "one salvaged event")
	require.Equal(t, []byte{13}, salvaged[0].frame.body, "a salvaged event is its kind byte alone")
	require.Greater(t, salvaged[0].frame.off, padded, "written after the repair")
}
