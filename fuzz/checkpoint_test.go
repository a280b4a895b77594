package fuzz

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/crc32"
	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// The checkpoint file's header (index/checkpoint.go): magic, version,
// CRC-32C of header bytes 16 to 63 and then the body, body length, log
// position, next sequence.
const ckptHeader = 64

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// wrapCheckpoint returns a well-formed checkpoint file around body.
func wrapCheckpoint(logPos, nextSeq uint64, body []byte) []byte {
	h := make([]byte, ckptHeader, ckptHeader+len(body))
	copy(h, "WALBCKP\x00")
	binary.LittleEndian.PutUint32(h[8:], 1)
	binary.LittleEndian.PutUint64(h[16:], uint64(len(body)))
	binary.LittleEndian.PutUint64(h[24:], logPos)
	binary.LittleEndian.PutUint64(h[32:], nextSeq)
	binary.LittleEndian.PutUint32(h[12:], crc32.Update(crc32.Checksum(h[16:], castagnoli), castagnoli, body))
	return append(h, body...)
}

// ckptTemplate is a directory holding, in pristine/, the table files that
// the generated checkpoints need. Each input's index directory gets them
// as hard links (Load removes the table files a checkpoint does not name).
type ckptTemplate struct {
	root     string
	index    string
	pristine string
	chunks   []string
}

func newCkptTemplate(t testing.TB) *ckptTemplate {
	root := fastDir(t)
	tp := &ckptTemplate{root: root, index: filepath.Join(root, "index"), pristine: filepath.Join(root, "pristine")}
	build := filepath.Join(root, "build")
	buildCheckpoints(t, build)
	require.NoError(t, os.MkdirAll(tp.pristine, 0o700))
	require.NoError(t, os.MkdirAll(tp.index, 0o700))
	names, err := filepath.Glob(filepath.Join(build, "tbl-*.idx"))
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, n := range names {
		require.NoError(t, os.Rename(n, filepath.Join(tp.pristine, filepath.Base(n))))
		tp.chunks = append(tp.chunks, filepath.Base(n))
	}
	require.NoError(t, os.RemoveAll(build))
	return tp
}

// reset puts back the table files and writes the checkpoint file.
func (tp *ckptTemplate) reset(t testing.TB, file []byte) {
	for _, c := range tp.chunks {
		if _, err := os.Lstat(filepath.Join(tp.index, c)); errors.Is(err, os.ErrNotExist) {
			require.NoError(t, os.Link(filepath.Join(tp.pristine, c), filepath.Join(tp.index, c)))
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(tp.index, "checkpoint"), file, 0o600))
}

// FuzzCheckpointLoad loads arbitrary bytes as the index's checkpoint: as
// they are, or, with wrap, as the body of a well-formed file (so that the
// CRC passes and the body decoder is what gets exercised). What Load
// accepts must agree with itself (requireConsistent): its counts with the
// messages and keys it holds.
//
// It found three faults of index.Load, since fixed (their regression tests
// are TestCheckpointStreamPastNextSequenceIsRefused,
// TestCheckpointNamingATableFileTwiceLeaksNothing and the corpus entry
// f694a875887c3aaa: a message state of 2052 read as a byte, Dead).
func FuzzCheckpointLoad(f *testing.F) {
	tp := newCkptTemplate(f)
	f.Fuzz(func(t *testing.T, wrap bool, logPos, nextSeq uint64, data []byte) {
		file := data
		if wrap {
			file = wrapCheckpoint(logPos, nextSeq, data)
		}
		tp.reset(t, file)
		parsed, perr := parseCheckpoint(file)

		// A header naming a later version (a later build's checkpoint, not
		// damage) is refused with ErrLaterVersion, and only such a one.
		later := len(file) >= ckptHeader && bytes.HasPrefix(file, []byte("WALBCKP\x00")) && binary.LittleEndian.Uint32(file[8:]) > 1

		before := openUnder(tp.root)
		sealed, hintPos := index.LogHints(vfs.Default, tp.index)
		x, from, err := index.Load(vfs.Default, tp.index)
		if later {
			require.ErrorIs(t, err, index.ErrLaterVersion, "a checkpoint of version %d", binary.LittleEndian.Uint32(file[8:]))
		}
		if err != nil {
			require.Nil(t, x)
			if !later {
				require.ErrorIs(t, err, index.ErrDamaged, "Load failed without ErrDamaged")
				require.NotErrorIs(t, err, index.ErrLaterVersion, "a checkpoint of no later version refused as a later build's")
			}
			requireNoneLeft(t, tp.root, before)
			return
		}
		require.NotNil(t, x)
		require.NotNil(t, x.Table)
		defer func() {
			require.NoError(t, x.Table.Close(), "closing the table")
			requireNoneLeft(t, tp.root, before)
		}()
		require.NoError(t, perr, "Load accepted a checkpoint the format does not allow")
		require.Equal(t, hintPos, from, "LogHints and Load read another log position")
		require.NotNil(t, sealed, "LogHints refused a checkpoint Load accepted")
		require.Equal(t, parsed.nextSeq, x.PeekNextSeq())
		requireConsistent(t, x, "as loaded")

		// Every queue dumps. A stream reaching at or past the next sequence
		// has no end a walk could reach (Dump, Receive's NextReady).
		for _, q := range parsed.queues {
			if q.streamMax >= parsed.nextSeq && q.streamMax >= q.cursor {
				t.Fatalf("Load accepted queue %q whose stream runs from %d to %d, at or past the next sequence %d: a stream holds only "+
					"sequences handed out, and a walk of it (Dump, Receive's NextReady) to 2^64-1 never ends", q.name, q.cursor, q.streamMax, parsed.nextSeq)
			}
		}
		names := x.Queues()
		require.Len(t, names, len(parsed.queues))
		for _, name := range names {
			q := x.Queue(name)
			require.NotNil(t, q, "queue %q listed but not found", name)
			require.Equal(t, name, q.Name)
			require.Same(t, q, x.QueueByID(q.ID))
			for _, now := range []int64{0, seedClock.UnixNano() + int64(15*time.Second), math.MaxInt64} {
				dump := q.Dump(now)
				require.True(t, strings.HasPrefix(dump, fmt.Sprintf("queue %d %s ", q.ID, name)), "dump of %q: %.80s", name, dump)
			}
			_ = q.NextReady()
			_, _ = q.NextDue()
			_ = q.DeadLetters(10)
		}
		requireConsistent(t, x, "after every queue was walked")
		_ = x.SegmentUses()
		_ = x.LiveChunks()
	})
}

// requireConsistent checks that what x holds agrees with itself
// (index.Index.Verify): each count it keeps (a queue's live, dead and
// stream counts, a log segment's use, a table chunk's live count) is what
// its messages and dedup keys count again, every one of them below the
// next sequence. Load reads no table entry, so a checkpoint beside table
// files that hold other streams than it counts (the template's files
// under another checkpoint: the broker's, say) loads, and that
// disagreement is damage to the index files, found by a walk (an error
// wrapping ErrDamaged); any other is a checkpoint Load should have
// refused.
func requireConsistent(t *testing.T, x *index.Index, when string) {
	t.Helper()
	if err := x.Verify(); err != nil && !errors.Is(err, index.ErrDamaged) {
		t.Fatalf("%s: Load accepted a checkpoint whose counts disagree with what it holds: %v", when, err)
	}
}

// openUnder lists the files under dir that this process has open or
// mapped (Linux; elsewhere nothing), by the names they were opened with.
func openUnder(dir string) []string {
	var open []string
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(link, dir) {
				open = append(open, "open "+strings.TrimSuffix(link, " (deleted)"))
			}
		}
	}
	if maps, err := os.ReadFile("/proc/self/maps"); err == nil {
		for _, l := range strings.Split(string(maps), "\n") {
			if i := strings.Index(l, dir); i >= 0 {
				open = append(open, "mapped "+strings.TrimSuffix(l[i:], " (deleted)"))
			}
		}
	}
	slices.Sort(open)
	return open
}

// requireNoneLeft checks that what is open or mapped under dir is what was
// before.
func requireNoneLeft(t *testing.T, dir string, before []string) {
	t.Helper()
	after := openUnder(dir)
	var left []string
	for _, f := range after {
		if i, ok := slices.BinarySearch(before, f); ok {
			before = slices.Delete(before, i, i+1)
		} else {
			left = append(left, f)
		}
	}
	require.Empty(t, left, "files left open or mapped")
}

// parsedCheckpoint is what parseCheckpoint reads of a checkpoint file.
type parsedCheckpoint struct {
	nextSeq uint64
	queues  []parsedQueue
	want    []uint64
}

type parsedQueue struct {
	name              string
	cursor, streamMax uint64
}

// parseCheckpoint decodes a checkpoint file by the grammar index.Snapshot
// writes (see index/checkpoint.go), independently of the index's decoder:
// the body's uvarints in their shortest form, 32-bit fields within 32 bits,
// counts and lengths within the body, nothing left over, each queue's
// messages at sequences handed out (from 1, below the next sequence), and
// no list naming an entry twice (Snapshot writes each from a map).
func parseCheckpoint(file []byte) (parsedCheckpoint, error) {
	var p parsedCheckpoint
	if len(file) < ckptHeader || string(file[:8]) != "WALBCKP\x00" || binary.LittleEndian.Uint32(file[8:]) != 1 ||
		binary.LittleEndian.Uint64(file[16:]) != uint64(len(file)-ckptHeader) {
		return p, errors.New("header")
	}
	body := file[ckptHeader:]
	if crc32.Update(crc32.Checksum(file[16:ckptHeader], castagnoli), castagnoli, body) != binary.LittleEndian.Uint32(file[12:]) {
		return p, errors.New("checksum")
	}
	p.nextSeq = binary.LittleEndian.Uint64(file[32:])
	r := &bodyReader{b: body}
	count := func() uint64 {
		n := r.uvarint()
		if n > uint64(len(r.b)) {
			r.fail()
			return 0
		}
		return n
	}
	// once fails r if v is in listed, and adds it.
	once := func(listed map[any]bool, v any) {
		if listed[v] {
			r.fail()
		}
		listed[v] = true
	}
	sealed := map[any]bool{}
	for range count() { // sealed segments
		once(sealed, r.u32())
		r.u32()
	}
	r.str() // secret
	r.uvarint()
	uses := map[any]bool{}
	for range count() { // segment uses
		once(uses, r.u32())
		for range 5 {
			r.uvarint()
		}
	}
	chunks := map[any]bool{}
	for range count() { // chunk counts
		once(chunks, r.uvarint())
		r.uvarint()
	}
	ids, names := map[any]bool{}, map[any]bool{}
	for range count() {
		if r.err {
			break
		}
		once(ids, r.u32())
		q := parsedQueue{name: r.str()}
		once(names, q.name)
		for range 7 {
			r.varint()
		}
		q.cursor, q.streamMax = r.uvarint(), r.uvarint()
		r.varint()
		r.uvarint()
		r.varint()
		gone := map[any]bool{}
		for range count() {
			once(gone, r.uvarint())
		}
		held := map[uint64]bool{}
		for range count() {
			seq := r.uvarint()
			if seq == 0 || seq >= p.nextSeq || held[seq] {
				r.fail()
			}
			held[seq] = true
			r.varint()
			r.uvarint()
			r.str()
			st := r.uvarint()
			r.u32()
			r.varint()
			r.uvarint()
			r.varint()
			r.u32()
			r.str()
			r.str()
			r.u32()
			if st < 2 || st > 4 { // Ready, Leased, Dead
				r.fail()
			}
		}
		keys := map[any]bool{}
		for range count() {
			once(keys, r.str())
			r.uvarint()
			r.varint()
			r.u32()
		}
		p.queues = append(p.queues, q)
	}
	files := map[any]bool{}
	for range count() {
		c := r.uvarint()
		once(files, c)
		p.want = append(p.want, c)
	}
	if r.err || len(r.b) > 0 {
		return p, errors.New("body")
	}
	return p, nil
}

type bodyReader struct {
	b   []byte
	err bool
}

func (r *bodyReader) fail() { r.err = true }

func (r *bodyReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || (n > 1 && r.b[n-1] == 0) {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *bodyReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 || (n > 1 && r.b[n-1] == 0) {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *bodyReader) u32() uint32 {
	v := r.uvarint()
	if v > math.MaxUint32 {
		r.fail()
		return 0
	}
	return uint32(v)
}

func (r *bodyReader) str() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// seedClock is the instant the generated checkpoints' events happen at.
var seedClock = time.Unix(1_700_000_000, 0)

// seedSecret is the store secret every generated checkpoint carries.
var seedSecret = bytes.Repeat([]byte{7}, index.SecretSize)

// buildCheckpoints builds an index in dir through the index's API, with
// queues, messages in every state, dedup keys and an eviction, and returns
// the checkpoint file written after each stage (the last one's table files
// stay in dir). Everything is fixed, so the same files come out every time.
func buildCheckpoints(t testing.TB, dir string) [][]byte {
	t.Helper()
	x, err := index.Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	defer func() { require.NoError(t, x.Table.Close()) }()
	now := seedClock.UnixNano()
	sec := int64(time.Second)
	seg, off := uint32(1), 32
	var last wal.Position
	apply := func(e index.Event) {
		t.Helper()
		last = wal.MakePosition(seg, off)
		off += 17 + len(e.Append(nil))
		require.NoError(t, x.Apply(last, &e))
	}
	var files [][]byte
	checkpoint := func() {
		t.Helper()
		snap, err := x.Snapshot(last+1, map[uint32]int{1: 4000})
		require.NoError(t, err)
		_, err = x.Table.Flush(true)
		require.NoError(t, err)
		require.NoError(t, index.WriteCheckpoint(vfs.Default, dir, snap, x.Table.Chunks()))
		b, err := os.ReadFile(filepath.Join(dir, "checkpoint"))
		require.NoError(t, err)
		files = append(files, b)
	}
	jobs := index.Policy{VisibilityTimeout: 10 * sec, RetryDelay: sec, MaxDeliveries: 2, MaxMessageBytes: 64, Capacity: 20, DedupWindow: 60 * sec}
	mail := index.Policy{VisibilityTimeout: 5 * sec, RetryDelay: sec, MaxRetryDelay: 3 * sec, MaxDeliveries: 4, MaxMessageBytes: 32, Capacity: 8, DedupWindow: 30 * sec}
	pub := func(q uint32, seq uint64, at int64, key string) {
		apply(index.Event{Kind: index.KindPublish, Queue: q, Seq: seq, Time: at, Key: key, Payload: []byte(fmt.Sprintf("payload %d", seq))})
	}

	apply(index.Event{Kind: index.KindMeta, Secret: seedSecret})
	checkpoint() // no queue
	apply(index.Event{Kind: index.KindDeclare, Queue: 1, Name: "jobs", Policy: jobs})
	apply(index.Event{Kind: index.KindDeclare, Queue: 2, Name: "mail", Policy: mail})
	for i := uint64(1); i <= 6; i++ {
		key := ""
		if i%2 == 0 {
			key = fmt.Sprintf("k%d", i)
		}
		pub(1, i, now+int64(i)*sec, key)
	}
	pub(2, 7, now+7*sec, "m")
	checkpoint() // a stream in each queue
	apply(index.Event{Kind: index.KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: now + 20*sec, Nonce: 11})
	apply(index.Event{Kind: index.KindNack, Queue: 1, Seq: 2, Deliveries: 1, Time: now + 12*sec})
	apply(index.Event{Kind: index.KindLease, Queue: 1, Seq: 3, Deliveries: 2, Time: now + 9*sec, Nonce: 12})
	apply(index.Event{Kind: index.KindDeadLetter, Queue: 1, Seq: 4, Deliveries: 2, Time: now + 10*sec, Code: 0x07010003, Reason: "LEASE_EXPIRED"})
	apply(index.Event{Kind: index.KindLease, Queue: 2, Seq: 7, Deliveries: 1, Time: now + 30*sec, Nonce: 13})
	apply(index.Event{Kind: index.KindAck, Queue: 2, Seq: 7})
	pub(1, 8, now+2*sec, "") // out of EnqueuedAt order: active, not streamed
	seg, off = 2, 32
	pub(2, 9, now+40*sec, "n")
	apply(index.Event{Kind: index.KindEvict, Queue: 2, Time: now + 100*sec, Window: 30 * sec})
	checkpoint() // every state, a key outliving its message, an eviction
	apply(index.Event{Kind: index.KindReplay, Queue: 1, Seq: 4})
	apply(index.Event{Kind: index.KindDeadLetter, Queue: 1, Seq: 5, Deliveries: 0, Time: now + 50*sec, Code: 0x02010005, Reason: "CARD_DECLINED", Cause: "the card was declined"})
	apply(index.Event{Kind: index.KindDelete, Queue: 1, Seq: 6})
	apply(index.Event{Kind: index.KindExtend, Queue: 1, Seq: 1, Deliveries: 1, Time: now + 60*sec, Nonce: 14})
	apply(index.Event{Kind: index.KindMark, Seq: 20})
	checkpoint() // a replay, a delete, an extension, a mark
	return files
}

// brokerCheckpoint returns the checkpoint a real store writes at Close
// after a short life, on a fixed clock. The store draws its secret at
// random (broker.Open) and nothing else of the file depends on it:
// withSecret puts seedSecret in its place, so that the same file comes out
// every time.
func brokerCheckpoint(t testing.TB) []byte {
	t.Helper()
	dir := fastDir(t)
	now := seedClock
	s, err := broker.Open(dir, broker.Options{Now: func() time.Time { return now }, SegmentBytes: broker.MinSegmentBytes})
	require.NoError(t, err)
	q, err := s.Queue("jobs", queuePolicies[0])
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 5 {
		_, err := q.PublishKeyed(ctx, fmt.Sprintf("k%d", i%3), []byte(fmt.Sprintf("m%d", i)))
		require.NoError(t, err)
		_, err = q.Publish(ctx, []byte(fmt.Sprintf("p%d", i)))
		require.NoError(t, err)
	}
	ds, err := q.Receive(ctx, 3)
	require.NoError(t, err)
	require.Len(t, ds, 3)
	require.NoError(t, q.Ack(ctx, ds[0].Lease.Receipt))
	_, err = q.Nack(ctx, ds[1].Lease.Receipt, nil)
	require.NoError(t, err)
	require.NoError(t, q.Reject(ctx, ds[2].Lease.Receipt, errors.New("no")))
	require.NoError(t, s.Close())
	b, err := os.ReadFile(filepath.Join(dir, "index", "checkpoint"))
	require.NoError(t, err)
	return withSecret(t, b, seedSecret)
}

// withSecret returns the checkpoint file with secret in place of the one
// it holds (of the same size), its checksum made right again.
func withSecret(t testing.TB, file, secret []byte) []byte {
	t.Helper()
	_, err := parseCheckpoint(file)
	require.NoError(t, err)
	out := bytes.Clone(file)
	body := out[ckptHeader:]
	r := &bodyReader{b: body}
	for range r.uvarint() { // sealed segments
		r.u32()
		r.u32()
	}
	if n := r.uvarint(); r.err || n != uint64(len(secret)) {
		t.Fatalf("the checkpoint's secret is not %d bytes long", len(secret))
	}
	copy(r.b, secret) // parseCheckpoint checked that it lies within the body
	binary.LittleEndian.PutUint32(out[12:], crc32.Update(crc32.Checksum(out[16:ckptHeader], castagnoli), castagnoli, body))
	return out
}

// checkpointSeeds are the generated inputs of FuzzCheckpointLoad: real
// checkpoints as files and as wrapped bodies, and damaged ones.
func checkpointSeeds(t testing.TB) []seed {
	dir := fastDir(t)
	files := buildCheckpoints(t, dir)
	files = append(files, brokerCheckpoint(t))
	var seeds []seed
	add := func(name string, wrap bool, file []byte) {
		var logPos, nextSeq uint64
		data := file
		if wrap {
			logPos, nextSeq = binary.LittleEndian.Uint64(file[24:]), binary.LittleEndian.Uint64(file[32:])
			data = file[ckptHeader:]
		}
		seeds = append(seeds, seed{name, []any{wrap, logPos, nextSeq, data}})
	}
	for i, f := range files {
		add(fmt.Sprintf("file-%d", i), false, f)
		add(fmt.Sprintf("body-%d", i), true, f)
	}
	full := files[len(files)-2]
	flipped := bytes.Clone(full)
	flipped[len(flipped)-3] ^= 0x20
	add("bad-crc", false, flipped)
	add("cut", false, full[:len(full)-1])
	add("header-only", false, full[:ckptHeader])
	v2 := bytes.Clone(full)
	binary.LittleEndian.PutUint32(v2[8:], 2)
	add("version-2", false, v2)
	add("empty", false, nil)
	// The last real body names table file 0 once; naming it twice must be
	// refused or harmless.
	last := files[len(files)-2][ckptHeader:]
	if n := len(last); n >= 2 && last[n-2] == 1 && last[n-1] == 0 {
		dup := append(bytes.Clone(last[:n-2]), 2, 0, 0)
		f := files[len(files)-2]
		seeds = append(seeds, seed{"body-table-twice", []any{true, binary.LittleEndian.Uint64(f[24:]), binary.LittleEndian.Uint64(f[32:]), dup}})
	}
	seeds = append(seeds,
		seed{"body-trailing", []any{true, uint64(1 << 32), uint64(9), append(bytes.Clone(full[ckptHeader:]), 0)}},
		seed{"body-empty", []any{true, uint64(0), uint64(1), []byte{}}},
		seed{"next-seq-zero", []any{true, uint64(0), uint64(0), bytes.Clone(files[0][ckptHeader:])}},
		seed{"body-garbage", []any{true, uint64(5), uint64(5), []byte("\x01\x01\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")}},
		// Each one step past what Load may accept: a stream reaching the
		// next sequence, a message listed twice.
		seed{"stream-at-next-seq", []any{true, uint64(1<<32 | 32), uint64(10), checkpointBody(1, 10)}},
		seed{"message-twice", []any{true, uint64(1<<32 | 32), uint64(10), checkpointBody(1, 0, 3, 3)}},
		// A ready message, counted where it is; and a log segment counting
		// one message more than it and its queue's stream hold.
		seed{"one-message", []any{true, uint64(1<<32 | 32), uint64(10), checkpointBody(1, 0, 3)}},
		seed{"segment-counting-one-more", []any{true, uint64(1<<32 | 32), uint64(10), countingBody(1, 1, 0, 3)}},
		// That message's checkpoint naming log segment 1 sealed twice,
		// at the same offset: whichever a reader kept, a repeat is damage.
		seed{"sealed-twice", []any{true, uint64(1<<32 | 32), uint64(10), append([]byte{2, 1, 100, 1, 100}, checkpointBody(1, 0, 3)[1:]...)}},
	)
	return seeds
}

// checkpointBody returns the body of a checkpoint of one queue, jobs, and
// no table file: the queue's stream runs from cursor to streamMax, and it
// holds the ready messages msgs, listed in that order, which log segment 1
// and their table chunks count.
func checkpointBody(cursor, streamMax uint64, msgs ...uint64) []byte {
	return countingBody(0, cursor, streamMax, msgs...)
}

// countingBody is checkpointBody whose log segment 1 and first table chunk
// count extra messages besides msgs (the queue's stream counts none).
func countingBody(extra int, cursor, streamMax uint64, msgs ...uint64) []byte {
	var b []byte
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	v := func(v int64) { b = binary.AppendVarint(b, v) }
	u(0) // sealed segments
	u(0) // secret
	u(0) // orphans
	chunks := map[uint64]uint64{}
	for _, seq := range msgs {
		chunks[index.ChunkOf(seq)]++
	}
	if n := uint64(len(msgs) + extra); n == 0 {
		u(0) // segment uses
	} else {
		u(1) // segment uses
		u(1) // segment
		u(n)
		u(40 * n) // bytes
		u(0)      // keys
		if len(msgs) == 0 {
			u(1)
			u(1)
		} else {
			u(slices.Min(msgs))
			u(slices.Max(msgs))
		}
		chunks[0] += uint64(extra)
	}
	u(uint64(len(chunks)))
	for _, c := range slices.Sorted(maps.Keys(chunks)) {
		u(c)
		u(chunks[c])
	}
	u(1) // queues
	u(1) // id
	u(4) // name
	b = append(b, "jobs"...)
	for range 7 { // policy
		v(1)
	}
	u(cursor)
	u(streamMax)
	v(0) // streamEnq
	u(0) // fresh
	v(0) // lastEvicts
	u(0) // gone
	u(uint64(len(msgs)))
	for _, seq := range msgs {
		u(seq)
		v(seedClock.UnixNano()) // enqueued
		u(1<<32 | 32)           // position
		u(0)                    // key
		u(2)                    // state: ready
		for range 7 {           // deliveries, at, nonce, failed at, code, reason, cause: zero
			u(0)
		}
		u(40) // size
	}
	u(0) // keys
	u(0) // table files
	return b
}

// The checkpoints buildCheckpoints writes load beside the template's table
// files, undamaged, with every message where the events put it: the seeds
// of FuzzCheckpointLoad start from real, loadable files.
func TestGeneratedCheckpointsLoad(t *testing.T) {
	tp := newCkptTemplate(t)
	files := buildCheckpoints(t, fastDir(t))
	require.Len(t, files, 4)
	wantQueues := []int{0, 2, 2, 2}
	for i, file := range files {
		tp.reset(t, file)
		before := openUnder(tp.root)
		x, _, err := index.Load(vfs.Default, tp.index)
		require.NoError(t, err, "checkpoint %d", i)
		require.Len(t, x.Queues(), wantQueues[i], "checkpoint %d", i)
		var dump string
		for _, name := range []string{"jobs", "mail"} {
			if q := x.Queue(name); q != nil {
				dump += q.Dump(seedClock.UnixNano())
			}
		}
		require.NoError(t, x.Damaged(), "checkpoint %d", i)
		require.NoError(t, x.Verify(), "checkpoint %d: its counts, beside its own table files", i)
		require.NoError(t, x.Table.Close())
		requireNoneLeft(t, tp.root, before)
		switch i {
		case 1:
			require.Contains(t, dump, "ready order 1 2 3 4 5 6\n", "the stream of jobs")
		case 3:
			require.Contains(t, dump, "ready order 8 4\n", "jobs: the late message, then the replayed one (the nacked one waits)")
			require.Contains(t, dump, "dead order 5\n", "jobs: the rejected message")
			require.Contains(t, dump, `seen "k2"=2@`, "jobs remembers its keys")
		}
	}
}
