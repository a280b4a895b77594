package recovery_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/recovery"
	"github.com/walbroker/walbroker/vfs"
)

// The damage tests build a store with the workload, damage one of its
// files — a bit flipped, a range zeroed, the file cut short, at a random
// offset — and check how the store takes it:
//
//   - damage to the unsynced tail of the last segment (bytes no completed
//     fdatasync covered, as a crash leaves them) is a torn tail: Open
//     repairs it silently (Recovery().TornTail) and the store holds what
//     the last fdatasync covered;
//   - damage to synced bytes of the log is refused with broker.Corrupt
//     naming the file and the offset — at Open, or, for records the last
//     checkpoint vouched for (which Open does not read), at the first read
//     of the damaged record; that stops the store, and the next Open
//     refuses naming file and offset. Damage nothing ever reads goes
//     unnoticed and changes nothing. Options.Salvage then opens the log:
//     every message whose records are intact is there with its payload,
//     and Recovery().LostMessages names only messages that had a record
//     in the damaged span and are not there;
//   - damage to an index file (the checkpoint, a tbl-*.idx table file)
//     never loses or invents a message: the store rebuilds the index from
//     the log (Recovery().IndexRebuilt), or stops with Corrupt when it
//     meets the damage and rebuilds at the next Open.
//
// WALBROKER_RECOVERY_SEED replays the random choices (logged).

// damageIterations is how many damaged copies each test checks by
// default; -short checks a tenth.
func damageIterations(n int) int {
	if testing.Short() {
		return n / 10
	}
	return n
}

// Segment format (segment/doc.go): a 32-byte header whose bytes 12..16
// hold the segment's sequence, then frames of a 17-byte header (crc,
// length, sequence, synced, type) and a body.
const (
	segHeader   = 32
	frameHeader = 17
	kindRecord  = 1
	kindSeal    = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame is one valid frame of a segment file.
type frame struct {
	off, end int
	synced   int
	kind     byte
	group    int // frames of one atomic group (one append) share it
	body     []byte
}

// segmentAt reads the i-th segment file of the log in dir (a negative i
// counts from the end: -1 is the active segment) and its frames.
func segmentAt(t *testing.T, dir string, i int) (name string, data []byte, frames []frame) {
	t.Helper()
	segs := segmentFiles(t, dir)
	if i < 0 {
		i += len(segs)
	}
	if i < 0 || i >= len(segs) {
		t.Fatalf("%s holds %d segments, not one at %d", dir, len(segs), i)
	}
	name = segs[i]
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return name, data, parseFrames(data)
}

// parseFrames returns the frames of a segment file from its header to the
// first frame that does not verify (its checksum seeded with the header's
// salt, from version 2 on).
func parseFrames(data []byte) []frame {
	if len(data) < segHeader {
		return nil
	}
	seq := binary.LittleEndian.Uint32(data[12:])
	var salt uint32 // version 1 had none
	if binary.LittleEndian.Uint16(data[8:]) >= 2 {
		salt = binary.LittleEndian.Uint32(data[16:])
	}
	var out []frame
	group := 0
	for off := segHeader; off+frameHeader <= len(data); {
		n := int(binary.LittleEndian.Uint32(data[off+4:]))
		if n > len(data)-off-frameHeader || binary.LittleEndian.Uint32(data[off+8:]) != seq {
			break
		}
		end := off + frameHeader + n
		if crc32.Update(salt, castagnoli, data[off+4:end]) != binary.LittleEndian.Uint32(data[off:]) {
			break
		}
		f := frame{off: off, end: end, synced: int(binary.LittleEndian.Uint32(data[off+12:])), kind: data[off+16] & 0x0f, group: group, body: data[off+frameHeader : end]}
		if place := data[off+16] >> 4 & 3; place == 0 || place == 3 { // full or last: the group ends
			group++
		}
		out = append(out, f)
		off = end
		if f.kind == kindSeal {
			break
		}
	}
	return out
}

// preambleLen is how many of a segment's frames are its preamble: the
// leading records that are the store's secret (event kind 1), queue
// declarations (2) and the mark of the next sequence (12), each a group
// of its own.
func preambleLen(frames []frame) int {
	n := 0
	for n < len(frames) && len(frames[n].body) > 0 && (frames[n].body[0] == 1 || frames[n].body[0] == 2 || frames[n].body[0] == 12) {
		n++
	}
	return n
}

// eventMessage returns the message ID an event names (index/doc.go: kind
// byte, then queue and sequence as uvarints for kinds 3 to 10), if any.
func eventMessage(body []byte) (string, bool) {
	if len(body) < 1 || body[0] < 3 || body[0] > 10 {
		return "", false
	}
	_, n := binary.Uvarint(body[1:])
	if n <= 0 {
		return "", false
	}
	seq, m := binary.Uvarint(body[1+n:])
	if m <= 0 {
		return "", false
	}
	return fmt.Sprintf("%016x", seq), true
}

// damage is one change to one file.
type damage struct {
	file string // relative to the store directory
	kind string // "flip", "zero" or "cut"
	off  int
	end  int  // for "zero": the end of the zeroed range
	bit  byte // for "flip"
}

func (d damage) String() string {
	switch d.kind {
	case "flip":
		return fmt.Sprintf("%s: bit %d of byte %d flipped", d.file, d.bit, d.off)
	case "zero":
		return fmt.Sprintf("%s: bytes %d to %d zeroed", d.file, d.off, d.end)
	}
	return fmt.Sprintf("%s: cut to %d bytes", d.file, d.off)
}

// apply damages the file in dir. It reports whether it changed a byte,
// and narrows a zeroing to the bytes it changed.
func (d *damage) apply(dir string) (bool, error) {
	path := filepath.Join(dir, d.file)
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	orig := slices.Clone(data)
	switch d.kind {
	case "flip":
		data[d.off] ^= 1 << d.bit
	case "zero":
		// Bytes already zero are not damaged: narrow the span to the
		// bytes the zeroing changes, so that whoever reasons about
		// where the damage lies (a frame's last byte may have been zero
		// already) reasons about the true span.
		for d.off < d.end && data[d.off] == 0 {
			d.off++
		}
		for d.end > d.off && data[d.end-1] == 0 {
			d.end--
		}
		clear(data[d.off:d.end])
	case "cut":
		data = data[:d.off]
	}
	return !slices.Equal(orig, data), os.WriteFile(path, data, 0o600)
}

// span returns the byte range [from, to) of the original file the damage
// touched.
func (d damage) span(size int) (int, int) {
	switch d.kind {
	case "flip":
		return d.off, d.off + 1
	case "zero":
		return d.off, d.end
	}
	return d.off, size
}

// touched returns the IDs of the messages whose records the damage
// touched in a file of size bytes made of frames, with every record of
// their groups (a group is whole or gone).
func (d damage) touched(frames []frame, size int) map[string]bool {
	from, to := d.span(size)
	groups := map[int]bool{}
	for _, f := range frames {
		if f.end > from && f.off < to || d.kind == "cut" && f.off >= from {
			groups[f.group] = true
		}
	}
	touched := map[string]bool{}
	for _, f := range frames {
		if id, ok := eventMessage(f.body); ok && groups[f.group] {
			touched[id] = true
		}
	}
	return touched
}

// randomDamage returns a random damage of the file of size bytes within
// [from, to).
func randomDamage(rng *rand.Rand, file string, from, to int) damage {
	d := damage{file: file, off: from + rng.IntN(max(1, to-from))}
	switch rng.IntN(3) {
	case 0:
		d.kind, d.bit = "flip", byte(rng.IntN(8))
	case 1:
		d.kind, d.end = "zero", min(to, d.off+1+rng.IntN(64))
	default:
		d.kind = "cut"
	}
	return d
}

// template is a closed store built by the workload, with its journal.
type template struct {
	dir string
	j   *journal
}

func buildTemplates(t *testing.T, root string, seed uint64, n int, mode broker.SyncMode) []template {
	var out []template
	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("template-%d", i))
		j := workload{seed: seed + uint64(i), steps: 200, mode: mode}.run(dir, nil, nil)
		if j.failed != nil || j.openErr != nil || j.closeErr != nil {
			t.Fatalf("the workload failed without damage: %v", j)
		}
		out = append(out, template{dir: dir, j: j})
	}
	return out
}

func segmentFiles(t *testing.T, dir string) []string {
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no segment in %s: %v", dir, err)
	}
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	slices.Sort(names)
	return names
}

// damagedCopy copies the store in src to dir, replacing whatever dir held,
// and applies d to the copy (narrowing d as apply does). It reports
// whether d changed a byte. Replacing matters: CopyTree only adds files,
// and a segment that an earlier copy's salvaged store rotated into would
// otherwise follow this copy's log, a history it never had.
func damagedCopy(t *testing.T, src, dir string, d *damage) bool {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := recovery.CopyTree(src, dir); err != nil {
		t.Fatal(err)
	}
	changed, err := d.apply(dir)
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

// damageCounts counts the outcomes of the damage tests.
type damageCounts struct {
	iterations, unchanged, unnoticed, refusedAtOpen, foundOnRead, salvaged, lostNamed, tornTails, rebuilt int
}

// damagedCopy is damagedCopy counted: one more iteration, and one more
// unchanged when d changed no byte.
func (c *damageCounts) damagedCopy(t *testing.T, src, dir string, d *damage) bool {
	t.Helper()
	changed := damagedCopy(t, src, dir, d)
	c.iterations++
	if !changed {
		c.unchanged++
	}
	return changed
}

// logSynced logs what the tests of damage to synced log bytes saw.
func (c *damageCounts) logSynced(t *testing.T, start time.Time) {
	t.Helper()
	t.Logf("%d damaged copies in %v: %d unchanged by the damage, %d where nothing read the damage, %d refused at open, %d stopped at the first read; "+
		"%d salvaged (%d of them naming lost messages)", c.iterations, time.Since(start).Round(time.Millisecond), c.unchanged, c.unnoticed,
		c.refusedAtOpen, c.foundOnRead, c.salvaged, c.lostNamed)
}

// lastSynced returns the highest offset the frames record as synced: the
// start of the segment's last batch, which no later frame vouches for.
func lastSynced(frames []frame) int {
	last := 0
	for _, f := range frames {
		last = max(last, f.synced)
	}
	return last
}

// TestDamageSyncedLog damages synced bytes of the log of a closed store:
// any byte of a sealed segment, or of the last segment before its last
// batch (the one span no format can vouch for: segment/doc.go).
func TestDamageSyncedLog(t *testing.T) {
	seed := testSeed(t)
	root := fastDir(t)
	tpls := buildTemplates(t, root, seed, 3, broker.SyncAll)
	rng := rand.New(rand.NewPCG(seed, 0xda))
	var c damageCounts
	fails := failureClasses{}
	start := time.Now()
	for it := range damageIterations(1500) {
		if it >= 100 && recovery.NearDeadline(t) {
			t.Logf("cut short near the test binary's deadline after %d damaged copies", it)
			break
		}
		tpl := tpls[it%len(tpls)]
		segs := segmentFiles(t, tpl.dir)
		file := segs[rng.IntN(len(segs))]
		orig, err := os.ReadFile(filepath.Join(tpl.dir, file))
		if err != nil {
			t.Fatal(err)
		}
		frames := parseFrames(orig)
		to := len(orig)
		if file == segs[len(segs)-1] {
			// The last batch of the last segment reads as a torn tail
			// whatever happens to it; stop before it.
			to = lastSynced(frames)
		} else if rng.IntN(2) == 0 && len(frames) > 0 {
			to = frames[len(frames)-1].end // mostly where the records are
		}
		d := randomDamage(rng, file, 0, to)
		if d.kind == "cut" && file == segs[len(segs)-1] {
			d.kind, d.bit = "flip", byte(rng.IntN(8)) // see TestDamageCutLastSegment
		}
		dir := filepath.Join(root, fmt.Sprintf("damaged-%d", it))
		c.damagedCopy(t, tpl.dir, dir, &d)
		what := fmt.Sprintf("iteration %d (seed %d, workload seed %d): %v", it, seed, tpl.j.seed, d)
		if class, details := checkSyncedDamage(dir, tpl.j, d, frames, len(orig), &c); class != "" {
			fails.add(class, what+": "+details, tpl.j)
		}
		_ = os.RemoveAll(dir)
	}
	fails.report(t)
	c.logSynced(t, start)
}

// continued returns j followed by the calls of an inspection (and the
// one that failed, if any): the journal the next inspection must match,
// which must be made at a later clock (so that the leases the inspection
// took have lapsed). A keyed publish that returned a message already
// published is a duplicate.
func continued(j *journal, obs *observation) *journal {
	calls := obs.calls
	c := *j
	c.calls = slices.Clone(j.calls)
	c.failed = obs.failed
	known := map[string]bool{}
	for i := range c.calls {
		if c.calls[i].newPublish() {
			for _, id := range c.calls[i].ids {
				known[id] = true
			}
		}
	}
	for _, cl := range calls {
		if cl.op == opKeyed {
			cl.dup = known[cl.ids[0]]
			known[cl.ids[0]] = true
		}
		c.calls = append(c.calls, cl)
	}
	return &c
}

// failureClasses gathers failures by class, so that a run reports each
// kind once, with a count and its first example.
type failureClasses map[string]*failureClass

type failureClass struct {
	n       int
	example string
	j       *journal
}

func (f failureClasses) add(class, example string, j *journal) {
	if f[class] == nil {
		f[class] = &failureClass{example: example, j: j}
	}
	f[class].n++
}

func (f failureClasses) report(t *testing.T) {
	t.Helper()
	for _, class := range sortedKeys(f) {
		fc := f[class]
		t.Errorf("%s: %d damaged copies; the first: %s\n%v", class, fc.n, fc.example, fc.j)
	}
}

// checkSyncedDamage checks a store whose synced log bytes were damaged.
// It returns what failed, if anything: a class (a short phrase, to count
// failures of one kind together) and the details.
func checkSyncedDamage(dir string, j *journal, d damage, frames []frame, size int, c *damageCounts) (class, details string) {
	at := j.end.Add(checkDelay)
	obs, err := observe(dir, at, j.keys, broker.Options{})
	switch {
	case err == nil:
		// Nothing read the damaged bytes: the store must be exactly what
		// the journal says.
		c.unnoticed++
		if n, dd := match(j, obs, len(j.calls)); n < 0 {
			return "damage unnoticed, state wrong", fmt.Sprintf("the damage went unnoticed, and the store is not what the calls made:\n%s", dd)
		}
		return "", ""
	case !errors.Is(err, broker.Corrupt):
		return "not Corrupt", fmt.Sprintf("%v, want an error wrapping broker.Corrupt", err)
	case !strings.Contains(err.Error(), d.file):
		return "file not named", fmt.Sprintf("the error does not name the damaged file %s: %v", d.file, err)
	case obs == nil:
		c.refusedAtOpen++
		if msg := checkNamedOffset(err, d, frames); msg != "" {
			return "wrong offset named", msg
		}
	default:
		c.foundOnRead++
		if obs.afterFailure == nil || !errors.Is(obs.afterFailure, broker.Corrupt) {
			return "not stopped", fmt.Sprintf("after a read found the damage (%v), the next call returned %v, want the store stopped with Corrupt", err, obs.afterFailure)
		}
		firstErr := err
		_, err := broker.Open(dir, broker.Options{Now: newClock(at).Now, SegmentBytes: broker.MinSegmentBytes})
		if !errors.Is(err, broker.Corrupt) || !strings.Contains(err.Error(), d.file) {
			return "next Open not refused", fmt.Sprintf("a read found the damage (%v); the next Open returned %v, want Corrupt naming %s and the offset", firstErr, err, d.file)
		}
		if msg := checkNamedOffset(err, d, frames); msg != "" {
			return "wrong offset named", msg
		}
		j = continued(j, obs)
		at = at.Add(checkDelay)
	}

	// Salvage.
	sobs, err := observe(dir, at, j.keys, broker.Options{Salvage: true})
	if err != nil {
		class := "Salvage fails"
		switch msg := err.Error(); {
		case strings.Contains(msg, "bad file header"):
			class = "Salvage refuses a damaged segment header"
		case strings.Contains(msg, "outside ["):
			class = "Salvage cannot seal a segment cut short"
		case strings.Contains(msg, "too short to pad"):
			class = "Salvage cannot pad a short damaged span"
		}
		return class, fmt.Sprintf("Open with Salvage: %v", err)
	}
	c.salvaged++
	rec := sobs.recovery
	if rec.SalvagedSpans == 0 || len(rec.SalvageCopies) == 0 {
		return "Salvage reports nothing", fmt.Sprintf("Salvage reports %d spans and copies %v", rec.SalvagedSpans, rec.SalvageCopies)
	}
	for _, cp := range rec.SalvageCopies {
		if _, err := os.Stat(cp); err != nil {
			if _, err2 := os.Stat(filepath.Join(dir, cp)); err2 != nil {
				return "no salvage copy", fmt.Sprintf("the salvage copy %s is not there: %v", cp, err)
			}
		}
	}
	touched := d.touched(frames, size)
	if class, msg := checkSalvaged(sobs, j, touched); msg != "" {
		return class, fmt.Sprintf("after Salvage (LostMessages %v; records damaged for %v):\n%s", rec.LostMessages, sortedKeys(touched), msg)
	}
	if len(rec.LostMessages) > 0 {
		c.lostNamed++
	}
	// The salvaged log opens without Salvage.
	s, err := broker.Open(dir, broker.Options{Now: newClock(at).Now, SegmentBytes: broker.MinSegmentBytes})
	if err != nil {
		return "salvaged log refused", fmt.Sprintf("the salvaged log does not open without Salvage: %v", err)
	}
	_ = s.Close()
	return "", ""
}

var offsetRE = regexp.MustCompile(`at offset ([0-9]+)`)

// checkNamedOffset checks that an Open that refused a damaged log named
// the offset of the damage: at most the first damaged byte, and no
// earlier than the start of the frame (or the group of frames) that holds
// it. It returns what is wrong, or "".
func checkNamedOffset(err error, d damage, frames []frame) string {
	m := offsetRE.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Sprintf("Open refused the log without naming the offset: %v", err)
	}
	named, _ := strconv.Atoi(m[1])
	lowest := 0 // damage to the header, or before the first frame
	for _, f := range frames {
		if f.off > d.off {
			break
		}
		lowest = f.off
		if d.off < f.end {
			for _, g := range frames { // the start of its group
				if g.group == f.group {
					lowest = g.off
					break
				}
			}
			break
		}
		lowest = f.end // past this frame: the damage is after it
	}
	if named > d.off || named < lowest {
		return fmt.Sprintf("Open named offset %d, but the damage begins at %d (in the frame or group from %d): %v", named, d.off, lowest, err)
	}
	return ""
}

// checkSalvaged compares a salvaged store with the journal: every message
// the journal has present is there with its payload unless a record of it
// was damaged (and then LostMessages may name it); every message there was
// published with that payload, and is one the journal has present unless a
// record of it (its ack, say) was damaged; LostMessages names only messages
// that had a damaged record and are not there, and LostByQueue names each
// of them once, under the queue it was published to (or, its declaration
// lost too, "queue #<number>").
func checkSalvaged(obs *observation, j *journal, touched map[string]bool) (class, details string) {
	var out []string
	want := project(j, len(j.calls))
	published := map[string]string{}
	publishedTo := map[string]string{}
	for i := range j.calls {
		if j.calls[i].newPublish() {
			for k, id := range j.calls[i].ids {
				published[id] = j.calls[i].payloads[k]
				publishedTo[id] = j.calls[i].queue
			}
		}
	}
	lostIn := map[string][]string{}
	for name, ids := range obs.recovery.LostByQueue {
		for _, id := range ids {
			lostIn[id] = append(lostIn[id], name)
		}
	}
	for _, id := range sortedKeys(lostIn) {
		if !slices.Contains(obs.recovery.LostMessages, id) {
			class = "LostByQueue does not match LostMessages"
			out = append(out, fmt.Sprintf("LostByQueue names %s under %v, which LostMessages does not", id, lostIn[id]))
		}
	}
	lost := map[string]bool{}
	for _, id := range obs.recovery.LostMessages {
		lost[id] = true
		if in := lostIn[id]; len(in) != 1 {
			class = "LostByQueue does not match LostMessages"
			out = append(out, fmt.Sprintf("LostByQueue names %s under %d queues %v, want one", id, len(in), in))
		} else if q, ok := publishedTo[id]; ok && in[0] != q && !strings.HasPrefix(in[0], "queue #") {
			class = "LostByQueue names the wrong queue"
			out = append(out, fmt.Sprintf("LostByQueue names %s under %q; it was published to %q", id, in[0], q))
		}
		if !touched[id] {
			class = "LostMessages names messages with no damaged record"
			out = append(out, fmt.Sprintf("LostMessages names %s, which had no record in the damaged span", id))
		}
		if o, ok := obs.msgs[id]; ok {
			class = "LostMessages names messages that are there"
			out = append(out, fmt.Sprintf("LostMessages names %s, which is there (%v)", id, o))
		}
	}
	intactLost := false
	for _, id := range sortedKeys(want.msgs) {
		o, ok := obs.msgs[id]
		switch {
		case !ok && !touched[id]:
			intactLost = true
			out = append(out, fmt.Sprintf("message %s lost, though none of its records was damaged (want %v)", id, want.msgs[id]))
		case ok && (o.payload != want.msgs[id].payload || o.queue != want.msgs[id].queue):
			out = append(out, fmt.Sprintf("message %s is %v, want %v", id, o, want.msgs[id]))
		}
	}
	for _, id := range sortedKeys(obs.msgs) {
		o := obs.msgs[id]
		if _, ok := want.msgs[id]; ok {
			continue
		}
		p, ok := published[id]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("message %s (%v) was never published", id, o))
		case p != o.payload:
			out = append(out, fmt.Sprintf("message %s has payload %q, published with %q", id, o.payload, p))
		case !touched[id]:
			out = append(out, fmt.Sprintf("message %s (%v) came back, though none of its records was damaged", id, o))
		}
	}
	switch {
	case intactLost:
		class = "Salvage loses messages whose records are intact"
	case len(out) > 0 && class == "":
		class = "Salvage invents messages"
	}
	return class, strings.Join(out, "\n")
}

// crashRun is a run of the workload whose process died before Close.
type crashRun struct {
	dir string       // where it ran
	cfs *vfs.CrashFS // what it ran on, for more clones
	j   *journal     // its calls, with the fdatasyncs a syncWatchFS saw
	all string       // a clone keeping every byte written, as a process crash keeps them
}

// runToCrash runs w in root/run-i on a CrashFS that crashes before Close,
// and fails the test unless the workload ran.
func runToCrash(t *testing.T, root string, i int, w workload) crashRun {
	t.Helper()
	run := crashRun{dir: filepath.Join(root, fmt.Sprintf("run-%d", i)), cfs: vfs.NewCrashFS(vfs.Default)}
	watch := newSyncWatchFS(run.cfs)
	w.beforeClose = run.cfs.Crash
	run.j = w.run(run.dir, watch, watch)
	if run.j.failed != nil || run.j.openErr != nil {
		t.Fatalf("the workload failed: %v", run.j)
	}
	run.all = run.dir + "-all"
	if err := run.cfs.CrashClone(run.all, vfs.CrashOptions{Root: run.dir, KeepUnsyncedFraction: 1}); err != nil {
		t.Fatal(err)
	}
	return run
}

// TestDamageSyncedTailOfACrashedStore damages synced bytes of the last
// segment of a store that crashed: no clean mark vouches for where its log
// ends, so the synced offsets of the frames after the damage are all that
// tells it from a torn tail. The workload runs under SyncAll and the
// process dies before Close; every written byte is kept, as a process
// crash keeps them. A bit is flipped or a range zeroed before the last
// offset a frame of that segment records as synced: records a completed
// fdatasync covered. Open must refuse the log with Corrupt naming the file
// and offset (or, for records the last checkpoint vouched for, the first
// read of a damaged record must, and then the next Open), as for a closed
// store (TestDamageSyncedLog); repaired as a torn tail, the log would lose
// acknowledged records without a word.
func TestDamageSyncedTailOfACrashedStore(t *testing.T) {
	seed := testSeed(t)
	root := fastDir(t)
	rng := rand.New(rand.NewPCG(seed, 0xc7a5))
	type crashed struct {
		dir    string
		j      *journal
		last   string
		frames []frame
		size   int
		synced int // the last offset a frame of the last segment records as synced
	}
	var tpls []crashed
	for i := 0; len(tpls) < 3 && i < 20; i++ {
		run := runToCrash(t, root, i, workload{seed: seed + uint64(i), steps: 200, mode: broker.SyncAll})
		j, all := run.j, run.all
		last, data, frames := segmentAt(t, all, -1)
		synced := lastSynced(frames)
		if synced <= segHeader {
			continue // the last segment holds one batch at most: nothing to vouch for
		}
		tpls = append(tpls, crashed{dir: all, j: j, last: last, frames: frames, size: len(data), synced: synced})
	}
	if len(tpls) == 0 {
		t.Fatal("no run left a last segment with a synced batch followed by another")
	}
	var c damageCounts
	fails := failureClasses{}
	start := time.Now()
	for it := range damageIterations(300) {
		tpl := tpls[it%len(tpls)]
		d := randomDamage(rng, tpl.last, 0, tpl.synced)
		if d.kind == "cut" {
			// A cut takes the frames that vouch for what it cut: nothing
			// can tell it from a torn tail (TestDamageCutLastSegment).
			d.kind, d.bit = "flip", byte(rng.IntN(8))
		}
		dir := filepath.Join(root, fmt.Sprintf("damaged-%d", it))
		c.damagedCopy(t, tpl.dir, dir, &d)
		what := fmt.Sprintf("iteration %d (seed %d, workload seed %d, synced to %d): %v", it, seed, tpl.j.seed, tpl.synced, d)
		if class, details := checkSyncedDamage(dir, tpl.j, d, tpl.frames, tpl.size, &c); class != "" {
			fails.add(class, what+": "+details, tpl.j)
		}
		_ = os.RemoveAll(dir)
	}
	fails.report(t)
	c.logSynced(t, start)
}

// TestDamageUnsyncedTail damages the tail of the last segment that no
// fdatasync covered, as a crash leaves it (every written byte kept, as a
// process crash would): cut inside its last records, zeroed, or a bit
// flipped. Open repairs it silently: a torn tail, and the store holds
// everything the last fdatasync covered.
func TestDamageUnsyncedTail(t *testing.T) {
	seed := testSeed(t)
	root := fastDir(t)
	rng := rand.New(rand.NewPCG(seed, 0x7a11))
	type crashed struct {
		dir      string
		j        *journal
		last     string
		frames   []frame
		from, to int // the unsynced frames of the last segment
	}
	var tpls []crashed
	for i := 0; len(tpls) < 3 && i < 20; i++ {
		// Under SyncNone, with no background fdatasync within the run,
		// only rotations sync: the tail of the last segment is unsynced.
		run := runToCrash(t, root, i, workload{seed: seed + uint64(i), steps: 200, mode: broker.SyncNone, syncInterval: time.Hour})
		j, all, synced := run.j, run.all, run.dir+"-synced"
		if err := run.cfs.CrashClone(synced, vfs.CrashOptions{Root: run.dir}); err != nil {
			t.Fatal(err)
		}
		last, a, frames := segmentAt(t, all, -1)
		s, err := os.ReadFile(filepath.Join(synced, last))
		if err != nil {
			t.Fatal(err)
		}
		from := 0
		for from < min(len(a), len(s)) && a[from] == s[from] {
			from++
		}
		if len(frames) == 0 || from >= frames[len(frames)-1].end {
			continue // everything was synced: no tail to damage
		}
		tpls = append(tpls, crashed{dir: all, j: j, last: last, frames: frames, from: from, to: frames[len(frames)-1].end})
	}
	if len(tpls) == 0 {
		t.Fatal("no run left an unsynced tail")
	}
	var c damageCounts
	start := time.Now()
	for it := range damageIterations(600) {
		tpl := tpls[it%len(tpls)]
		d := randomDamage(rng, tpl.last, tpl.from, tpl.to)
		if d.kind == "zero" && rng.IntN(2) == 0 {
			d.end = tpl.to // the rest of the tail
		}
		dir := filepath.Join(root, fmt.Sprintf("damaged-%d", it))
		changed := c.damagedCopy(t, tpl.dir, dir, &d)
		what := fmt.Sprintf("iteration %d (seed %d, workload seed %d, unsynced tail [%d, %d)): %v", it, seed, tpl.j.seed, tpl.from, tpl.to, d)
		obs, err := observe(dir, tpl.j.end.Add(checkDelay), tpl.j.keys, broker.Options{})
		if err != nil {
			t.Fatalf("%s: damage to bytes never synced is a torn tail, yet: %v\n%v", what, err, tpl.j)
		}
		// A scan recognises a torn frame by its header: the damage must
		// leave the frame's checksum, length and sequence (for a cut, its
		// whole header). Damage before that reads as the log's clean end
		// (segment/doc.go), which is right too: those bytes never counted.
		recognisable := false
		if !changed {
			tpl.frames = nil // nothing to recognise
		}
		for _, f := range tpl.frames {
			keep := 12
			if d.kind == "cut" {
				keep = frameHeader
			}
			recognisable = recognisable || f.off+keep <= d.off && d.off < f.end
		}
		switch {
		case obs.recovery.TornTail:
			c.tornTails++
		case recognisable:
			t.Fatalf("%s: Recovery().TornTail is false, yet the damage cut a frame short", what)
		default:
			c.unnoticed++
		}
		if n, dd := match(tpl.j, obs, lowerBound(tpl.j, false)); n < 0 {
			t.Fatalf("%s: the store lost what the last fdatasync covered (%d calls), or holds what no call made:\n%s\n%v", what, tpl.j.synced, dd, tpl.j)
		}
		_ = os.RemoveAll(dir)
	}
	t.Logf("%d damaged unsynced tails repaired silently in %v: %d reported as a torn tail, %d (damage before a frame's sequence, or none: %d unchanged) as the log's end",
		c.iterations, time.Since(start).Round(time.Millisecond), c.tornTails, c.unnoticed, c.unchanged)
}

// TestDamageIndexFiles damages the checkpoint or a table file of a closed
// store. The store never loses or invents a message: it rebuilds its
// index from the log, or stops with Corrupt where it meets the damage and
// rebuilds at the next Open.
func TestDamageIndexFiles(t *testing.T) {
	seed := testSeed(t)
	root := fastDir(t)
	tpls := buildTemplates(t, root, seed, 3, broker.SyncPublish)
	rng := rand.New(rand.NewPCG(seed, 0x1d))
	var c damageCounts
	start := time.Now()
	for it := range damageIterations(600) {
		tpl := tpls[it%len(tpls)]
		files, _ := filepath.Glob(filepath.Join(tpl.dir, "index", "tbl-*.idx"))
		files = append(files, filepath.Join(tpl.dir, "index", "checkpoint"))
		path := files[rng.IntN(len(files))]
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		to := int(info.Size())
		if strings.Contains(path, "tbl-") && rng.IntN(4) != 0 {
			to = min(to, 32*256) // mostly among the entries in use (32 bytes per message)
		}
		rel, _ := filepath.Rel(tpl.dir, path)
		d := randomDamage(rng, rel, 0, to)
		dir := filepath.Join(root, fmt.Sprintf("damaged-%d", it))
		changed := c.damagedCopy(t, tpl.dir, dir, &d)
		what := fmt.Sprintf("iteration %d (seed %d, workload seed %d): %v", it, seed, tpl.j.seed, d)
		at := tpl.j.end.Add(checkDelay)
		obs, err := observe(dir, at, tpl.j.keys, broker.Options{})
		if err != nil && laterVersion(rel, d) {
			// The checkpoint's version, outside its checksum, now names a
			// later one: refused as a later build's index, not rebuilt
			// over (the error says to remove the index directory if no
			// later build wrote it, and Open then rebuilds).
			if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "remove the directory") {
				t.Fatalf("%s: %v, want a later build's checkpoint refused, saying what to do", what, err)
			}
			c.refusedAtOpen++
			if err := os.RemoveAll(filepath.Join(dir, "index")); err != nil {
				t.Fatal(err)
			}
			if obs, err = observe(dir, at, tpl.j.keys, broker.Options{}); err != nil {
				t.Fatalf("%s: with the index directory removed, Open failed: %v", what, err)
			}
			if !obs.recovery.IndexRebuilt {
				t.Fatalf("%s: with the index directory removed, Open did not rebuild", what)
			}
		}
		j := tpl.j
		switch {
		case err == nil:
			if changed && rel == filepath.Join("index", "checkpoint") && !obs.recovery.IndexRebuilt && !laterVersion(rel, d) {
				t.Fatalf("%s: a damaged checkpoint was loaded, not rebuilt", what)
			}
			if obs.recovery.IndexRebuilt {
				c.rebuilt++
			} else {
				c.unnoticed++
			}
		case obs == nil:
			t.Fatalf("%s: a damaged index stops Open: %v", what, err)
		case !errors.Is(err, broker.Corrupt):
			t.Fatalf("%s: %v, want the store stopped with Corrupt", what, err)
		default:
			c.foundOnRead++
			if obs.afterFailure == nil {
				t.Fatalf("%s: a call succeeded after the store found its index damaged (%v)", what, err)
			}
			j = continued(tpl.j, obs)
			if obs, err = observe(dir, at.Add(checkDelay), j.keys, broker.Options{}); err != nil {
				t.Fatalf("%s: the store found its index damaged, then the next Open failed: %v", what, err)
			}
			if !obs.recovery.IndexRebuilt {
				t.Fatalf("%s: the store found its index damaged, and the next Open did not rebuild it", what)
			}
		}
		if n, dd := match(j, obs, len(j.calls)); n < 0 {
			t.Fatalf("%s: with a damaged index file the store is not what the calls made:\n%s\n%v", what, dd, j)
		}
		_ = os.RemoveAll(dir)
	}
	t.Logf("%d damaged index files in %v: %d unchanged by the damage, %d rebuilt at open, %d stopped at a read and rebuilt at the next open, %d refused as a later build's (version field) and rebuilt once index/ was removed, %d unnoticed",
		c.iterations, time.Since(start).Round(time.Millisecond), c.unchanged, c.rebuilt, c.foundOnRead, c.refusedAtOpen, c.unnoticed)
}

// laterVersion reports whether d, to the file rel, left the checkpoint's
// version field (bytes 8 to 11, little-endian, holding 1) naming a later
// version: a flip of any bit there but the lowest (which gives 0, damage).
// A zeroing only lowers it, and a cut leaves no header.
func laterVersion(rel string, d damage) bool {
	return rel == filepath.Join("index", "checkpoint") && d.kind == "flip" &&
		d.off >= 8 && d.off < 12 && (d.off != 8 || d.bit != 0)
}

// reclaimedTemplate builds closed stores with fixed workload seeds until
// one has at least two segments and has removed its first: the log then
// starts at a segment whose preamble declares the queues, and holds
// events about messages whose publish records went with the removed
// segments.
func reclaimedTemplate(t *testing.T, root string) template {
	t.Helper()
	for seed := uint64(1); seed <= 40; seed++ {
		tpl := buildTemplates(t, filepath.Join(root, fmt.Sprint(seed)), seed, 1, broker.SyncAll)[0]
		segs := segmentFiles(t, tpl.dir)
		if len(segs) >= 2 && segs[0] != "0000000001.seg" {
			return tpl
		}
	}
	t.Fatal("no workload seed left a log of two segments or more with its first removed")
	return template{}
}

// salvageDamaged copies tpl, damages the copy, removes its index (so that
// Open scans the whole log, as it does after damage was found on a read),
// checks that Open refuses it with Corrupt naming the file, and opens it
// with Salvage. It returns the inspection of the salvaged store, and the
// messages whose records (and their groups) the damage touched.
func salvageDamaged(t *testing.T, root string, tpl template, d damage) (*observation, map[string]bool) {
	t.Helper()
	orig, err := os.ReadFile(filepath.Join(tpl.dir, d.file))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "damaged")
	damagedCopy(t, tpl.dir, dir, &d)
	if err := errors.Join(os.RemoveAll(filepath.Join(dir, "index")), os.Remove(filepath.Join(dir, "CLEAN"))); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	at := tpl.j.end.Add(checkDelay)
	_, err = broker.Open(dir, broker.Options{Now: newClock(at).Now, SegmentBytes: broker.MinSegmentBytes})
	if !errors.Is(err, broker.Corrupt) || !strings.Contains(err.Error(), d.file) || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("%v: Open returned %v, want Corrupt naming %s and the offset", d, err, d.file)
	}
	obs, err := observe(dir, at, tpl.j.keys, broker.Options{Salvage: true})
	if err != nil {
		t.Fatalf("%v: Open with Salvage: %v", d, err)
	}
	return obs, d.touched(parseFrames(orig), len(orig))
}

// A damaged record in the preamble of the first segment of the log (the
// queue declarations every segment starts with) must not cost the
// messages whose records are intact: Salvage keeps every intact record
// after a damaged span (API.md §5.12).
func TestDamageSalvageKeepsMessagesAfterADamagedPreamble(t *testing.T) {
	root := fastDir(t)
	tpl := reclaimedTemplate(t, root)
	first, _, frames := segmentAt(t, tpl.dir, 0)
	var decl *frame
	for i := range frames {
		if i < preambleLen(frames) && frames[i].body[0] == 2 { // a declare event of the preamble
			decl = &frames[i]
			break
		}
	}
	if decl == nil {
		t.Fatalf("no queue declaration in the preamble of %s", first)
	}
	name := "?"
	if _, n := binary.Uvarint(decl.body[1:]); n > 0 {
		if l, m := binary.Uvarint(decl.body[1+n:]); m > 0 && 1+n+m+int(l) <= len(decl.body) {
			name = string(decl.body[1+n+m : 1+n+m+int(l)])
		}
	}
	d := damage{file: first, kind: "flip", off: decl.end - 1, bit: 0}
	obs, touched := salvageDamaged(t, root, tpl, d)
	if class, msg := checkSalvaged(obs, tpl.j, touched); msg != "" {
		t.Errorf("workload seed %d, segments %v, %v (the declaration of queue %q in the preamble): %s:\n%s",
			tpl.j.seed, segmentFiles(t, tpl.dir), d, name, class, msg)
	}
}

// Recovery().LostMessages names only messages that had a record in the
// damaged span and are not there; not messages acknowledged long ago whose
// publish records went with segments removed before the damage.
func TestDamageSalvageNamesOnlyLostMessages(t *testing.T) {
	root := fastDir(t)
	tpl := reclaimedTemplate(t, root)
	first, _, frames := segmentAt(t, tpl.dir, 0)
	var target *frame
	for i := range frames {
		if i >= preambleLen(frames) && frames[i].kind == kindRecord { // the first record after the preamble
			target = &frames[i]
			break
		}
	}
	if target == nil {
		t.Fatalf("%s holds no record after its preamble", first)
	}
	d := damage{file: first, kind: "flip", off: target.end - 1, bit: 3}
	obs, touched := salvageDamaged(t, root, tpl, d)
	var unfounded []string
	for _, id := range obs.recovery.LostMessages {
		if !touched[id] {
			unfounded = append(unfounded, id)
		}
	}
	if len(unfounded) > 0 {
		t.Errorf("workload seed %d, %v (the first record after the preamble, of messages %v): LostMessages %v names %d messages that had no record in the damaged span: %v",
			tpl.j.seed, d, sortedKeys(touched), obs.recovery.LostMessages, len(unfounded), unfounded)
	}
	if class, msg := checkSalvaged(obs, tpl.j, touched); msg != "" {
		t.Logf("also: %s:\n%s", class, msg)
	}
}

// A sealed segment cut short a few bytes after one of its records (so
// that no frame fits between that record and the cut) is salvaged like any
// other: the records before the cut, and every later segment, are kept.
func TestDamageSalvageCutSealedSegment(t *testing.T) {
	root := fastDir(t)
	tpl := reclaimedTemplate(t, root)
	sealed, _, frames := segmentAt(t, tpl.dir, -2)
	if len(frames) < 4 {
		t.Fatalf("%s has %d frames", sealed, len(frames))
	}
	// Cut 6 bytes after the end of a group of frames (one append) in the
	// middle: the records before it are whole, and no frame fits between
	// them and the cut.
	i := len(frames) / 2
	for i+1 < len(frames) && frames[i+1].group == frames[i].group {
		i++
	}
	d := damage{file: sealed, kind: "cut", off: frames[i].end + 6}
	obs, touched := salvageDamaged(t, root, tpl, d)
	if class, msg := checkSalvaged(obs, tpl.j, touched); msg != "" {
		t.Errorf("workload seed %d, %v: %s:\n%s", tpl.j.seed, d, class, msg)
	}
}

// A flipped bit in the header of a sealed segment costs none of its
// records: Salvage keeps them all (the header's fields are known from the
// file's name and its frames).
func TestDamageSalvageDamagedSegmentHeader(t *testing.T) {
	root := fastDir(t)
	tpl := reclaimedTemplate(t, root)
	segs := segmentFiles(t, tpl.dir)
	d := damage{file: segs[len(segs)-2], kind: "flip", off: 1, bit: 5} // the magic
	obs, touched := salvageDamaged(t, root, tpl, d)
	if class, msg := checkSalvaged(obs, tpl.j, touched); msg != "" {
		t.Errorf("workload seed %d, %v: %s:\n%s", tpl.j.seed, d, class, msg)
	}
}

// TestDamageLastBatchOfACleanlyClosedLog damages the last batch of the
// last segment of a store closed cleanly, and removes its index, so that
// Open reads the whole log. No later frame vouches for that batch (the
// blind spot segment/doc.go describes), but the clean mark Close left says
// the log was durable to its end: the damage is to synced records, and
// Open must refuse it with Corrupt naming the file, not cut it off as a
// torn tail and drop the last acknowledged calls.
func TestDamageLastBatchOfACleanlyClosedLog(t *testing.T) {
	root := fastDir(t)
	tpl := buildTemplates(t, root, 78, 1, broker.SyncAll)[0]
	last, _, frames := segmentAt(t, tpl.dir, -1)
	if len(frames) == 0 {
		t.Fatalf("%s has no frame", last)
	}
	f := frames[len(frames)-1]
	for i, d := range []damage{
		{file: last, kind: "flip", off: f.end - 1, bit: 3},               // its body
		{file: last, kind: "flip", off: f.off + 5, bit: 0},               // its length
		{file: last, kind: "zero", off: f.off, end: f.end},               // all of it
		{file: last, kind: "zero", off: f.off + frameHeader, end: f.end}, // its body
	} {
		dir := filepath.Join(root, fmt.Sprintf("damaged-%d", i))
		if !damagedCopy(t, tpl.dir, dir, &d) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, "index")); err != nil {
			t.Fatal(err)
		}
		_, err := observe(dir, tpl.j.end.Add(checkDelay), tpl.j.keys, broker.Options{})
		if !errors.Is(err, broker.Corrupt) || !strings.Contains(err.Error(), last) {
			t.Errorf("workload seed %d, %v (the last frame, at %d to %d), index removed: %v; want Corrupt naming %s",
				tpl.j.seed, d, f.off, f.end, err, last)
		}
	}
}

// A last segment cut short well before its last batch has lost records a
// completed fdatasync covered: a crash cannot do that (a segment has its
// full size from the moment it is renamed into place), and the clean mark
// and the checkpoint both say where the log ended. Open must refuse it
// with Corrupt rather than read it as a torn tail and silently drop
// acknowledged calls.
func TestDamageCutLastSegment(t *testing.T) {
	root := fastDir(t)
	tpl := buildTemplates(t, root, 77, 1, broker.SyncAll)[0]
	last, data, frames := segmentAt(t, tpl.dir, -1)
	if len(frames) < 8 {
		t.Fatalf("%s has %d frames", last, len(frames))
	}
	for _, cut := range []int{frames[len(frames)/2].off, frames[len(frames)-4].off} {
		d := damage{file: last, kind: "cut", off: cut}
		dir := filepath.Join(root, fmt.Sprintf("cut-%d", cut))
		damagedCopy(t, tpl.dir, dir, &d)
		obs, err := observe(dir, tpl.j.end.Add(checkDelay), tpl.j.keys, broker.Options{})
		switch {
		case err == nil:
			if n, dd := match(tpl.j, obs, len(tpl.j.calls)); n < 0 {
				t.Errorf("workload seed %d, %v (of %d bytes, the last batch at %d): Open accepted it (torn tail %v) and acknowledged calls are gone:\n%s",
					tpl.j.seed, d, len(data), frames[len(frames)-1].off, obs.recovery.TornTail, dd)
			}
		case !errors.Is(err, broker.Corrupt) || !strings.Contains(err.Error(), last):
			t.Errorf("%v: %v, want Corrupt naming %s", d, err, last)
		}
	}
}

// TestDamageSalvageZeroedHeaderAndFirstFrame zeroes a segment's header
// and the start of its first frame, from byte 1 to every byte across the
// first frame's header and into its body, in the last sealed segment and
// in the last one: Salvage keeps every message whose records are intact
// (the frames after the damage give back the salt the header held), and
// names only messages that had a record in the damage. Zeros that
// stopped in the first frame's length field (bytes 1 to 37) once cost
// every message of the segment.
func TestDamageSalvageZeroedHeaderAndFirstFrame(t *testing.T) {
	root := fastDir(t)
	tpl := reclaimedTemplate(t, root)
	segs := segmentFiles(t, tpl.dir)
	for _, file := range segs[len(segs)-2:] {
		for end := 2; end <= 32+17+8; end++ {
			d := damage{file: file, kind: "zero", off: 1, end: end}
			obs, touched := salvageDamaged(t, root, tpl, d)
			if class, msg := checkSalvaged(obs, tpl.j, touched); msg != "" {
				t.Errorf("workload seed %d, %v: %s:\n%s", tpl.j.seed, d, class, msg)
			}
		}
	}
}
