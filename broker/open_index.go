package broker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// replaySpill bounds the table entries a replay holds in memory.
const replaySpill = 1 << 16

// openHints sets in wo what the last checkpoint vouches for in the log
// (see index.LogHints), and sets s.logSecret. The hints are true only of
// the log the checkpoint was taken of: when the secret the log carries is
// another than the checkpoint's (an index directory copied in from
// another store), there are none, and loadCheckpoint refuses the
// checkpoint. A wrong Verified would have the log refused as having lost
// synced records, a wrong Sealed every read near a seal.
//
// A checkpoint marked suspect vouches for nothing the log holds: the log
// is verified whole (no Sealed, no Verified to scan from). But its
// position was durable all the same (its barrier synced it before the
// checkpoint was written, and a checkpoint whose file fails its checks
// gives none), so it is given as Durable: damage before it is refused,
// never zeroed as a torn tail.
//
// So is the position of a checkpoint when no segment tells the log's
// secret (see peekLogSecret): Open cannot tell this store's checkpoint
// from another's. Sealed and Verified describe the log the checkpoint was
// taken of, and are not given; the position is, as the one thing that
// keeps damage before it from being zeroed if the checkpoint is this
// store's. If it is another's, the log is refused as having lost synced
// records, as it would be if it were this store's and had: a log whose
// every segment has lost its first record is damaged anyway (each starts
// with the meta event), and Salvage opens it.
//
// A checkpoint that is not there or fails its checks gives no hints (and
// loadCheckpoint rebuilds), but an error reading the checkpoint, a
// segment's first record or a marker (an I/O error) is returned: it says
// nothing of what they hold, and Open without the hints would zero, as a
// torn tail, damage to records the checkpoint knew synced.
func (s *Store) openHints(wo *wal.Options) error {
	fs := s.opts.fs()
	cl, err := index.LoadCheckpointLog(fs, s.indexDir())
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, index.ErrDamaged) {
		return nil
	}
	if err != nil {
		return ioError(err)
	}
	if s.logSecret, err = peekLogSecret(fs, s.dir, cl.Pos.Segment()); err != nil {
		return ioError(err)
	}
	if s.logSecret != nil && !bytes.Equal(s.logSecret, cl.Secret) {
		return nil
	}
	why, err := index.SuspectCheck(fs, s.indexDir())
	if err != nil {
		return ioError(err)
	}
	if why != "" || s.logSecret == nil {
		wo.Durable = cl.Pos
		return nil
	}
	// Salvage reads every segment whole and ignores Sealed; it takes
	// Verified as durable only, which a checkpoint's position stays
	// even after a salvage it predates (see "The index on disk" in
	// DESIGN.md).
	wo.Sealed, wo.Verified = cl.Sealed, cl.Pos
	s.hinted = !wo.Salvage
	return nil
}

// errStaleHints is openIndex's refusal of the checkpoint whose hints
// (Options.Sealed and Verified: see openHints) the log was opened with,
// when nothing has shown them still true of the log: Open opens the log
// again without them (reopenLog), then rebuilds. The checkpoint file that
// gave them passed its checks, but a salvage since may have changed the
// log it was taken of, and only a replay from the checkpoint's position
// tells: it meets the salvaged event the salvage wrote (errSalvagedSince).
// A checkpoint loadCheckpoint refuses (its table files damaged, its
// position outside the log) is replayed from nowhere, and its hints are
// dropped with it. So are they after a checkpoint a replay from it
// refused for damage (its table found damaged on the way: Index.Damaged),
// salvaged event or not: the rebuild that follows finds no checkpoint,
// and the refusal does not say whether the replay went to the end of the
// log (a meta record of another store's secret stops it early, having
// shown nothing of the hints). The cost is one more scan of the log, on
// a path that damage alone takes.
var errStaleHints = errors.New("the log was opened with the hints of a checkpoint it then refused")

// reopenLog closes the log, which Open opened with the hints of a
// checkpoint it then refused (errStaleHints), and opens it again without
// them. They are true of the log the checkpoint was taken of, which may
// not be the one a salvage repaired since: a segment it sealed early
// ends before the end Options.Sealed gives, and a walk of it to there
// read on past its seal into the damage the salvage left behind, so that
// the rebuild failed with Corrupt, and an index put back from before the
// salvage kept the store from opening without Salvage. A rebuild reads
// every segment anyway: the scan the hints spared Open is the cost, paid
// only when the checkpoint is refused. On an error s.log is nil.
func (s *Store) reopenLog(dir string, wo wal.Options) error {
	err := s.log.Close()
	s.log = nil
	if err != nil {
		return err
	}
	wo.Sealed, wo.Verified = nil, 0
	l, err := wal.Open(dir, wo)
	if err != nil {
		return err
	}
	s.log, s.hinted = l, false
	return nil
}

// ioError is Open's error for err, met reading a file whose content
// decides what Open does (err names it). It says nothing of what the file
// holds: Open fails, having removed nothing, rather than take the file
// for missing or damaged and drop what it knows. A file someone else
// planted (vfs.ErrForeign) is returned as it is: not damage either, and
// rebuilding would carry on in a directory another user writes in. So is
// a checkpoint a later build wrote (index.ErrLaterVersion), which is for
// a build that reads it, not to be rebuilt over.
func ioError(err error) error {
	if errors.Is(err, vfs.ErrForeign) || errors.Is(err, index.ErrLaterVersion) {
		return err
	}
	return fmt.Errorf("%w (an error reading the store's files, not damage found in them: Open fails and removes nothing; open again once they read)", err)
}

// peekBytes bounds what peekLogSecret reads of a segment: its header and a
// preamble's first record, with room to spare.
const peekBytes = 4 << 10

// peekLogSecret returns the store secret the log in dir carries, read
// before the log is opened (nothing is locked, written or repaired): that
// of the meta event segment seq starts with, or, when that segment is not
// there or does not tell, that of the first other segment, from the last
// down, that does. The first segment's first record is the meta event,
// and every later segment's preamble starts with one; and every meta
// event of a log holds the same secret (a store draws one only when its
// log holds none), so any segment tells. Segment seq is read first since
// it alone is read at most opens. It returns nil when no segment tells:
// each is empty, damaged, or starts with another record (one whose meta
// event salvage skipped, or a rotation's whose preamble a power loss tore
// before it was synced). An error opening, reading or listing (other than
// a file or directory not there) is returned, naming the file.
func peekLogSecret(fs vfs.FS, dir string, seq uint32) ([]byte, error) {
	secret, _, err := peekSegmentSecret(fs, dir, seq)
	if err != nil || secret != nil {
		return secret, err
	}
	names, err := fs.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var seqs []uint32
	for _, n := range names {
		digits, ok := strings.CutSuffix(n, ".seg")
		if v, err := strconv.ParseUint(digits, 10, 32); ok && len(digits) == 10 && err == nil && uint32(v) != seq {
			seqs = append(seqs, uint32(v))
		}
	}
	slices.Sort(seqs)
	for _, other := range slices.Backward(seqs) {
		if secret, _, err := peekSegmentSecret(fs, dir, other); err != nil || secret != nil {
			return secret, err
		}
	}
	return nil, nil
}

// peekSegmentSecret returns the secret of the meta event segment seq of
// the log in dir starts with (past any padding), or nil; missing says the
// file is not there.
func peekSegmentSecret(fs vfs.FS, dir string, seq uint32) (secret []byte, missing bool, err error) {
	if seq == 0 {
		return nil, true, nil
	}
	path := filepath.Join(dir, fmt.Sprintf("%010d.seg", seq))
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	data := make([]byte, min(size, peekBytes))
	if n, err := f.ReadAt(data, 0); n != len(data) && err != nil {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	if got, err := segment.DecodeHeader(data); err != nil || got != seq {
		return nil, false, nil
	}
	for off := segment.HeaderSize; ; {
		fr, err := segment.Decode(data, off, seq)
		if err != nil || fr.Kind == segment.KindSeal {
			return nil, false, nil
		}
		if fr.Kind == segment.KindRecord {
			e, err := index.Decode(fr.Body)
			if err != nil || e.Kind != index.KindMeta {
				return nil, false, nil
			}
			return append([]byte(nil), e.Secret...), false, nil
		}
		off = fr.End()
	}
}

// openIndex loads the last checkpoint, or rebuilds, and replays the log
// after it. It returns how many records it replayed.
func (s *Store) openIndex() (int, error) {
	fs := s.opts.fs()
	loss := newLossTracker(s.log.Recovery().Salvaged)
	x, from, known, err := s.loadCheckpoint(loss)
	if err != nil {
		return 0, err
	}
	if from == 0 && s.hinted {
		// The checkpoint whose hints opened the log was refused before
		// any replay (its table files damaged, its position outside the
		// log): nothing has shown its hints true of the log since (see
		// errStaleHints). loadCheckpoint removed it: the pass after
		// reopenLog rebuilds.
		_ = x.Table.Close()
		return 0, fmt.Errorf("%w: the last checkpoint was refused", errStaleHints)
	}
	s.idx = x
	s.maint.lastCheckpoint.Store(uint64(from))
	// The checkpoint Open loaded stays on disk until the next one
	// replaces it: StoreStats.IndexBytes counts it. A rebuild removed it
	// (one an earlier pass of this open loaded, then met damage in, too).
	checkpointBytes := int64(0)
	if from != 0 {
		checkpointBytes = x.CheckpointBytes
	}
	s.maint.checkpointBytes.Store(checkpointBytes)
	s.recovery.IndexRebuilt = from == 0
	loss.watch(x)
	if from == 0 {
		for i := range known {
			_ = x.Apply(0, &known[i])
		}
		if loss.salvaging() {
			// Salvage may have cut a queue's declaration out of the
			// preamble that preceded its events (older segments
			// removed): declare every queue the log still declares
			// anywhere, first.
			if err := s.log.Iterate(0, func(pos wal.Position, rec []byte) error {
				if len(rec) > 0 && (index.Kind(rec[0]) == index.KindDeclare || index.Kind(rec[0]) == index.KindMeta) {
					return s.badRecord(pos, x.ApplyRecord(pos, rec))
				}
				return nil
			}); err != nil {
				_ = x.Table.Close()
				return 0, err
			}
		}
	}
	n, err := s.replay(x, from, loss)
	if from != 0 && errors.Is(err, wal.ErrNotFound) && s.salvagedAfter(from) {
		// The checkpoint's position is inside a span a salvage padded
		// over since: the replay cannot start there, nor reach the
		// salvaged event after it.
		err = fmt.Errorf("%w (no record starts at its position %v: the salvage padded over it)", errSalvagedSince, from)
	}
	if err == nil {
		err = x.Damaged()
	}
	x.OnOrphan = nil
	if err != nil {
		_ = x.Table.Close()
		if (errors.Is(err, index.ErrDamaged) || errors.Is(err, errSalvagedSince)) && from != 0 {
			// The checkpoint's table is damaged, or the checkpoint is
			// older than a salvage: start again from the log.
			s.opts.Logger.Warn("broker: rebuilding the index from the log", "dir", s.dir, "reason", err)
			if err := index.RemoveCheckpoint(fs, s.indexDir()); err != nil {
				return 0, err
			}
			// A replay stopped by a salvaged event (or by a position a
			// salvage padded over) found the hints untrue. After one
			// that met table damage the rebuild below finds no
			// checkpoint and drops them too (see errStaleHints).
			if s.hinted && errors.Is(err, errSalvagedSince) {
				return 0, fmt.Errorf("%w: %w", errStaleHints, err)
			}
			return s.openIndex()
		}
		return 0, err
	}
	if loss.salvaging() {
		s.recovery.LostMessages, s.recovery.LostByQueue = loss.lostMessages(x)
	}
	if next := loss.nextSeq(); next > x.PeekNextSeq() {
		// The publishes of the last sequences handed out are gone with
		// the damage: their IDs are never handed out again.
		if err := x.Apply(0, &index.Event{Kind: index.KindMark, Seq: next}); err != nil {
			_ = x.Table.Close()
			return 0, err
		}
		s.seqRaised = true
	}
	s.recovery.Replayed = n
	return n, nil
}

// loadCheckpoint loads the last checkpoint and returns it with the log
// position it reflects, or, when there is none or it cannot be used, a new
// index to rebuild from the whole log (position 0) with the declarations
// the refused checkpoint knew. An error reading it, or the markers, or
// the list a salvage kept (an I/O error) is returned before anything is
// removed: see ioError. A log that ends before the checkpoint's position
// lost synced records (Corrupt), whether or not the checkpoint is marked
// suspect; otherwise a checkpoint is consulted, not used, after salvage
// changed the log or when the store marked it suspect.
func (s *Store) loadCheckpoint(loss *lossTracker) (x *index.Index, from wal.Position, known []index.Event, err error) {
	fs := s.opts.fs()
	// A store that found damage while running marked its checkpoint
	// suspect: it is consulted, never trusted, and the state rebuilt. A
	// mark that cannot be looked for (an I/O error) fails Open: taken for
	// one, the rebuild would drop a checkpoint that may be sound.
	why, err := index.SuspectCheck(fs, s.indexDir())
	if err != nil {
		return nil, 0, nil, ioError(err)
	}
	// Only a checkpoint that is not there, or that fails its checks, is
	// rebuilt from the log (which removes it and its table files). Any
	// other error loading it (an I/O error reading, mapping or listing its
	// files) fails Open with nothing removed: the checkpoint may be whole,
	// and it alone may know which messages the damage a later Salvage
	// skips held, so an Open that dropped it, then met that damage (its
	// rebuild replaying the whole log), would leave the Salvage its
	// Corrupt error asks for nothing to name them from.
	x, from, err = index.Load(fs, s.indexDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, index.ErrDamaged) {
		return nil, 0, nil, ioError(err)
	}
	if loss.salvaging() {
		// What an earlier salvage that did not finish knew of its lost
		// messages (see salvage_lost.go).
		if s.log.Recovery().Unfinished {
			kept, next, keptKnown, kerr := s.keptLost()
			if kerr != nil {
				if err == nil {
					_ = x.Table.Close()
				}
				return nil, 0, nil, kerr
			}
			loss.add(kept)
			loss.checkpointNext = max(loss.checkpointNext, next)
			// The declarations and secret of the checkpoint it consulted,
			// which its rebuild may have removed.
			for _, e := range keptKnown {
				if e.Kind == index.KindMeta && len(e.Secret) == index.SecretSize {
					s.secretConsulted = true
				}
			}
			known = append(known, keptKnown...)
		} else if ferr := errors.Join(s.forgetLost(), s.forgetLaterBuild()); ferr != nil {
			s.lostListStays(ferr)
		}
	}
	if err == nil {
		st := s.log.Stats()
		if s.logSecret != nil && !bytes.Equal(x.Secret, s.logSecret) {
			// Not a projection of this log: its queues, messages and
			// positions are another store's (an index directory copied
			// from one), and not even consulted.
			_ = x.Table.Close()
			err = errors.New("the last checkpoint was taken of another store's log: the store secret it holds is not the one the log carries")
		} else if end := s.log.End(); from > end && !s.opts.Salvage {
			// The checkpoint's position was durable (its barrier synced
			// it), suspect or not: a log that ends before it lost synced
			// records.
			_ = x.Table.Close()
			return nil, 0, nil, &wal.CorruptionError{File: s.log.SegmentPath(end.Segment()), Offset: end.Offset(),
				Cause: fmt.Errorf("the log ends at %v, before %v, which the last checkpoint recorded as durable: synced records are gone (Options.Salvage opens what is left)", end, from)}
		} else if loss.salvaging() || why != "" {
			// The checkpoint knows which live messages had their
			// records in the spans salvage skipped, and the next
			// sequence: the publishes of those before it may be gone.
			loss.fromCheckpoint(x)
			// And every queue's declaration, which salvage may have cut
			// from the only preamble that still held it.
			for _, name := range x.Queues() {
				q := x.Queue(name)
				known = append(known, index.Event{Kind: index.KindDeclare, Queue: q.ID, Name: name, Policy: q.Policy})
			}
			// And the store's secret, which salvage may have cut with
			// the log's only meta event: the receipts of the leases it
			// kept must still count. (A meta event the replay meets
			// later holds the same secret, or the checkpoint is
			// another store's, refused above when the log says so.)
			if len(x.Secret) == index.SecretSize {
				known = append(known, index.Event{Kind: index.KindMeta, Secret: x.Secret})
				s.secretConsulted = true
			}
			_ = x.Table.Close()
			if loss.salvaging() {
				why = "salvage changed the log the checkpoint reflects"
			}
			err = fmt.Errorf("the last checkpoint is not trusted: %s", why)
		} else if from.Segment() < st.FirstSegment || from > s.log.End() {
			_ = x.Table.Close()
			err = fmt.Errorf("%w: checkpoint at %v, the log holds segments %d to %d and ends at %v",
				index.ErrDamaged, from, st.FirstSegment, st.LastSegment, s.log.End())
		}
	}
	if loss.salvaging() {
		// Before the rebuild drops the checkpoint that named them (a
		// salvage never uses the checkpoint: it is closed, or none was
		// loaded).
		if err := s.keepLost(loss.lost, loss.checkpointNext, known); err != nil {
			return nil, 0, nil, err
		}
	}
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.opts.Logger.Warn("broker: rebuilding the index from the log", "dir", s.dir, "reason", err)
		}
		if x, err = index.Rebuild(fs, s.indexDir()); err != nil {
			return nil, 0, nil, err
		}
		from = 0
	}
	return x, from, known, nil
}

// errSalvagedSince is replay's refusal of a checkpoint taken before a
// salvage repaired the log (see markSalvaged); openIndex then rebuilds
// from the whole log.
var errSalvagedSince = errors.New("a salvage repaired the log after the last checkpoint was taken")

// errFoundSalvaged stops salvagedAfter's walk.
var errFoundSalvaged = errors.New("salvaged event found")

// salvagedAfter reports whether the log holds a salvaged event at or
// after from: walked from the start of from's segment, for a from where
// no record starts. It is false when the walk fails.
func (s *Store) salvagedAfter(from wal.Position) bool {
	err := s.log.Iterate(wal.MakePosition(from.Segment(), 0), func(pos wal.Position, rec []byte) error {
		if pos >= from && len(rec) > 0 && index.Kind(rec[0]) == index.KindSalvaged {
			return errFoundSalvaged
		}
		return nil
	})
	return errors.Is(err, errFoundSalvaged)
}

// replay applies every record of the log from from to x, and returns how
// many it applied. A long replay writes table entries out as it goes. A
// replay from a checkpoint (from not 0) that meets a salvaged event fails
// with errSalvagedSince.
func (s *Store) replay(x *index.Index, from wal.Position, loss *lossTracker) (int, error) {
	fs := s.opts.fs()
	n := 0
	spilled := false // the replay rewrote table entries (see below)
	spill := replaySpill
	if s.opts.replaySpill > 0 {
		spill = s.opts.replaySpill
	}
	err := s.log.Iterate(from, func(pos wal.Position, rec []byte) error {
		n++
		loss.see(pos, rec)
		if from != 0 && x.Secret != nil && len(rec) > 0 && index.Kind(rec[0]) == index.KindMeta {
			// Every meta event of a log holds the secret its checkpoints
			// hold (see peekLogSecret): another says that the checkpoint
			// was taken of another log, which Open could not tell from
			// the segment the checkpoint's position is in.
			if e, err := index.Decode(rec); err == nil && !bytes.Equal(e.Secret, x.Secret) {
				return fmt.Errorf("%w: the meta record at %v holds another store secret than the checkpoint: the checkpoint was taken of another store's log", index.ErrDamaged, pos)
			}
		}
		if err := x.ApplyRecord(pos, rec); err != nil {
			if n == 1 && from == 0 && (errors.Is(err, index.ErrBadEvent) || errors.Is(err, index.ErrLaterKind)) {
				// The log's first record is one no store writes (its
				// secret, or a preamble's, which every build's log
				// begins with, a later build's too): most likely the
				// directory holds a log of something else.
				if errors.Is(err, index.ErrLaterKind) {
					err = fmt.Errorf("index: record at %v: %w: kind %d", pos, index.ErrBadEvent, rec[0])
				}
				err = fmt.Errorf("%w (the log's first record is not one a walbroker store writes: is %s a store's directory?)", err, s.dir)
			}
			return s.badRecord(pos, err)
		}
		if from != 0 && index.Kind(rec[0]) == index.KindSalvaged {
			// A salvage repaired the log after the checkpoint was taken
			// (see markSalvaged): the checkpoint may hold messages whose
			// records it padded over. A rebuild from the whole log
			// applies the event as the nothing it is, and a checkpoint
			// taken since is past it.
			return fmt.Errorf("%w (its salvaged record is at %v): the checkpoint may hold messages whose records the salvage skipped", errSalvagedSince, pos)
		}
		if x.Table.Unflushed() >= spill {
			// A rebuild of a long log keeps the heap small: entries go
			// to the table files as it goes (synced by the checkpoint
			// that ends the open).
			if !spilled {
				// The table stops matching the checkpoint loaded: until
				// the open's own checkpoint, a crash must rebuild.
				if err := index.BeginCheckpoint(fs, s.indexDir()); err != nil {
					return err
				}
				spilled = true
			}
			x.Table.Detach()
			if _, err := x.Table.Flush(false); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// badRecord names the segment file and byte offset of the record at pos
// when err says that it does not decode, or is not an event any store
// writes (index.ErrBadEvent): the frame verified, so only the broker can
// tell it is damage, and an error naming the position alone leaves the
// file to be guessed. Other errors (nil included) are returned as they
// are.
//
// A record of a kind a later build added (index.ErrLaterKind) is named the
// same way, but not as damage: like a segment of a later format version,
// it is refused, Salvage or not, and left as it is.
func (s *Store) badRecord(pos wal.Position, err error) error {
	switch {
	case errors.Is(err, index.ErrLaterKind):
		return fmt.Errorf("%s at offset %d: %w", s.log.SegmentPath(pos.Segment()), pos.Offset(), err)
	case err == nil || !errors.Is(err, index.ErrBadEvent):
		return err
	}
	return &wal.CorruptionError{File: s.log.SegmentPath(pos.Segment()), Offset: pos.Offset(), Cause: err}
}

// lossTracker names the live messages whose records salvage skipped: those
// the checkpoint placed in a skipped span, and those an event past the
// first skipped span names although the replay found no publish of them,
// each with the number of the queue that held it; but none that an
// acknowledgement or a deletion the log kept ended: that message was
// processed (or given up), and its producer has nothing to send again.
// Without salvage it does nothing but keep the next sequence of a
// checkpoint consulted (a suspect one).
type lossTracker struct {
	salvaged []wal.Damage
	lost     map[uint64]uint32 // sequence → queue number
	// damageAt is the first byte salvage skipped. An event past it about
	// a message nobody published (an orphan) names a message whose
	// publish was there — unless the message is older than every one
	// published before the damage (one whose segment was removed after
	// it was acknowledged): maxBefore is the highest sequence known taken
	// before damageAt, and bounded says that a record before damageAt
	// told (without one, there is no telling: see lostMessages).
	damageAt  wal.Position
	maxBefore uint64
	bounded   bool
	orphans   map[uint64]uint32 // sequence → queue number
	// ended holds the messages whose last event the replay met is an
	// acknowledgement or a deletion: no event follows one in a log this
	// code writes, so the message is not live, whatever salvage took of
	// its publish.
	ended map[uint64]struct{}
	// checkpointNext is the next sequence of the checkpoint consulted, or
	// of the one an unfinished salvage consulted (kept in lostName), 0
	// when none was: every sequence below it was handed out.
	checkpointNext uint64
}

// nextSeq is the lowest next sequence the index may hand out once
// replayed: above every sequence the consulted checkpoint had handed out,
// and above every message noted lost (an earlier salvage's list
// included), whose publishes the replay may not have met.
func (t *lossTracker) nextSeq() uint64 {
	next := t.checkpointNext
	for seq := range t.lost {
		next = max(next, seq+1)
	}
	return next
}

func newLossTracker(salvaged []wal.Damage) *lossTracker {
	t := &lossTracker{salvaged: salvaged, lost: map[uint64]uint32{}, orphans: map[uint64]uint32{}, ended: map[uint64]struct{}{}}
	if len(salvaged) > 0 {
		t.damageAt = wal.MakePosition(salvaged[0].Segment, salvaged[0].Offset)
		for _, d := range salvaged[1:] {
			t.damageAt = min(t.damageAt, wal.MakePosition(d.Segment, d.Offset))
		}
	}
	return t
}

// salvaging reports whether salvage skipped anything.
func (t *lossTracker) salvaging() bool { return len(t.salvaged) > 0 }

// add notes lost (sequence → queue number) as lost.
func (t *lossTracker) add(lost map[uint64]uint32) {
	for seq, q := range lost {
		t.lost[seq] = q
	}
}

// fromCheckpoint notes the live messages x places in the skipped spans,
// and the next sequence x holds.
func (t *lossTracker) fromCheckpoint(x *index.Index) {
	t.checkpointNext = max(t.checkpointNext, x.PeekNextSeq())
	for _, d := range t.salvaged {
		for q, seqs := range x.LiveInByQueue(d.Segment, d.Offset, d.Offset+d.Length) {
			for _, seq := range seqs {
				t.lost[seq] = q
			}
		}
	}
}

// watch has x report the orphans its replay finds past the damage.
func (t *lossTracker) watch(x *index.Index) {
	if !t.salvaging() {
		return
	}
	x.OnOrphan = func(pos wal.Position, e *index.Event) {
		if e.Seq == 0 {
			return
		}
		if e.Kind == index.KindAck || e.Kind == index.KindDelete {
			return // see has put it in t.ended
		}
		// An event after an end would make the message live again;
		// none follows one in a log this code writes, but the last
		// event is the one that tells.
		delete(t.ended, e.Seq)
		if pos >= t.damageAt {
			t.orphans[e.Seq] = e.Queue
		}
	}
}

// see notes, of each record the replay meets, the messages an
// acknowledgement or a deletion ends, and, of a record before the damage,
// the sequences it shows taken.
//
// A publish shows its own sequence taken. A mark shows less than its
// number says: under SyncNone a mark reserves sequences ahead of those
// handed out (reserveSeqs: the mark for a publish of sequence hi is
// hi+seqReserve; the one Open makes, the next sequence plus seqReserve;
// a preamble's carries the last of those), so only the sequences below
// its number less seqReserve are known taken. Under the other modes a
// mark (a preamble's, or the one Open writes when a salvage raised the
// next sequence or a backup's copy jumped it over sequences no message
// ever had: markRaisedSeq) is the next sequence exactly, and that
// bound is lower than it could be: an event about a message of the sequences
// between, removed with its segment, is no sign of loss, but it names one
// only if the acknowledgement or deletion that ended that message was
// lost too (see ended). Taking the mark's own number, every message lost
// within the reservation after it went unnamed.
func (t *lossTracker) see(pos wal.Position, rec []byte) {
	if !t.salvaging() || len(rec) == 0 {
		return
	}
	switch k := index.Kind(rec[0]); {
	case k == index.KindAck || k == index.KindDelete:
		if e, err := index.Decode(rec); err == nil && e.Seq != 0 {
			t.ended[e.Seq] = struct{}{}
		}
	case pos >= t.damageAt:
	case k == index.KindPublish:
		if e, err := index.Decode(rec); err == nil {
			t.maxBefore, t.bounded = max(t.maxBefore, e.Seq), true
		}
	case k == index.KindMark:
		if e, err := index.Decode(rec); err == nil {
			if e.Seq > seqReserve {
				t.maxBefore = max(t.maxBefore, e.Seq-seqReserve-1)
			}
			t.bounded = true
		}
	}
}

// lostMessages returns the IDs of the messages lost, in order: those noted
// that x, replayed, does not hold; and the same IDs by the name of the
// queue that held each (see RecoveryReport.LostByQueue), nil when none
// was lost.
func (t *lossTracker) lostMessages(x *index.Index) ([]string, map[string][]string) {
	// Without a publish or a mark before the damage there is no telling
	// an event about a lost message from one about a message whose
	// segment was removed: name none rather than guess.
	for seq, q := range t.orphans {
		if _, known := t.lost[seq]; !known && t.bounded && seq > t.maxBefore {
			t.lost[seq] = q
		}
	}
	var ids []string
	var byQueue map[string][]string
	for seq, q := range t.lost {
		if _, ended := t.ended[seq]; ended || x.Holds(seq) {
			// Held: its publish (or a copy of it) survived. Ended: an
			// acknowledgement or a deletion the log kept came after
			// whatever the checkpoint or a later event knew of it.
			continue
		}
		id := messageID(seq)
		ids = append(ids, id)
		if byQueue == nil {
			byQueue = map[string][]string{}
		}
		name := lostQueueName(x, q)
		byQueue[name] = append(byQueue[name], id)
	}
	slices.Sort(ids)
	for _, qids := range byQueue {
		slices.Sort(qids)
	}
	return ids, byQueue
}

// lostQueueName is the name of queue number id after the replay, or, when
// salvage took its declaration too, "queue #<id>": no queue can be named
// so (a name holds no space), and the number is the one its events carry.
func lostQueueName(x *index.Index, id uint32) string {
	if q := x.QueueByID(id); q != nil {
		return q.Name
	}
	return fmt.Sprintf("queue #%d", id)
}
