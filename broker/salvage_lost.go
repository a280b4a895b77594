package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// The messages a salvage lost are named from the last checkpoint, which
// the salvaging Open then drops to rebuild the index. An Open that fails
// after that (an I/O error, a power loss) leaves the log's list of the
// spans it repaired (wal.Options.KeepSalvageList), but no checkpoint to
// name the messages from: so before the index is rebuilt, the messages
// the checkpoint places in the spans are written durably to
// salvage/lost.json, and the Open that finishes an unfinished salvage
// (wal.Recovery.Unfinished) names them too; one that cannot read the
// file fails, and leaves it as it is (keptLost). The file keeps the
// checkpoint's next sequence as well: the records of the last IDs handed
// out may be among those skipped (their messages settled before the
// checkpoint, so that none is named), and without it the Open that
// finishes the salvage, the checkpoint gone, drew the next sequence from
// the log again and handed those IDs out a second time. And it keeps the
// queues' declarations and the store's secret the checkpoint held, which
// the salvage may have skipped with the log's only records of them:
// without them the finishing Open knew no queue of the messages the log
// kept, and held none of them. The store removes the
// file once the log forgot its list (finishSalvage: the first maintenance
// round or Close, once Open has returned its report), and a salvage that
// finishes no earlier one removes any it finds before it begins.

const lostName = "lost.json"

// lostMessage is an entry of lostName: a message lost (Seq, Queue), or,
// with Seq 0 (no message has it: sequences start at 1), the next sequence
// of the checkpoint consulted (Next) or an event it knew (Event, as the
// log records it: a queue's declaration or the store's secret).
type lostMessage struct {
	Seq   uint64 `json:"seq"`
	Queue uint32 `json:"queue"`
	Next  uint64 `json:"next,omitempty"`
	Event []byte `json:"event,omitempty"`
}

func (s *Store) lostPath() string { return filepath.Join(s.dir, "salvage", lostName) }

// keepLost writes lost (sequence → queue number) durably to lostPath,
// with next, the lowest next sequence the consulted checkpoint allows (0
// when none was consulted), and known, the declarations and secret it
// held.
func (s *Store) keepLost(lost map[uint64]uint32, next uint64, known []index.Event) error {
	list := make([]lostMessage, 0, len(lost)+1+len(known))
	for seq, q := range lost {
		list = append(list, lostMessage{Seq: seq, Queue: q})
	}
	if next > 0 {
		list = append(list, lostMessage{Next: next})
	}
	for i := range known {
		list = append(list, lostMessage{Event: known[i].Append(nil)})
	}
	data, err := json.Marshal(list)
	if err != nil {
		return err
	}
	fs, path := s.opts.fs(), s.lostPath()
	err = vfs.MkdirAllDurable(fs, filepath.Dir(path), 0o700)
	if err == nil {
		err = vfs.ReplaceFile(fs, path, data)
	}
	if err != nil {
		return fmt.Errorf("keep the messages the salvage lost in %s: %w", path, err)
	}
	return nil
}

// keptLost returns what keepLost wrote, if it did (nothing when it did
// not). A list that cannot be read is an error, and Open fails: it may be
// the only record of the messages (the checkpoint that named them is
// gone), and the Open that went on without it would replace it
// (keepLost) with a list naming none of them. An I/O error leaves it for
// the next Open; one that does not parse (damage: it is replaced whole
// or not at all) is named, and the error says what removing it costs.
func (s *Store) keptLost() (lost map[uint64]uint32, next uint64, known []index.Event, err error) {
	path := s.lostPath()
	data, err := vfs.ReadFile(s.opts.fs(), path, 256<<20)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil, 0, nil, nil
	}
	if err != nil {
		return nil, 0, nil, ioError(fmt.Errorf("read %s, the list of the messages an unfinished salvage lost: %w", path, err))
	}
	var list []lostMessage
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, 0, nil, fmt.Errorf("%s, the list of the messages an unfinished salvage lost, does not read (%w): remove it to open the store naming none of them lost (the spans are still reported, and each was logged at ERROR as it was skipped)", path, err)
	}
	lost = make(map[uint64]uint32, len(list))
	for _, m := range list {
		if m.Seq != 0 { // sequences start at 1
			lost[m.Seq] = m.Queue
		}
		next = max(next, m.Next)
		if len(m.Event) > 0 {
			e, err := index.Decode(m.Event)
			if err != nil || (e.Kind != index.KindDeclare && e.Kind != index.KindMeta) {
				return nil, 0, nil, fmt.Errorf("%s, the list of the messages an unfinished salvage lost, holds an entry that is neither a queue's declaration nor the store's secret (%v): it is damaged", path, err)
			}
			known = append(known, e)
		}
	}
	return lost, next, known, nil
}

// forgetLost removes what keepLost wrote: once the log forgot its list,
// and before a salvage that finishes no earlier one writes its own. A
// file left behind is read only by the Open that finishes a salvage
// begun after it (which a failure to remove it here may leave naming
// messages an earlier salvage already reported), so a failure is only
// logged (lostListStays), by the caller, once it holds no lock.
func (s *Store) forgetLost() error { return removeDurable(s.opts.fs(), s.lostPath()) }

// removeDurable removes path, if it is there, and syncs its directory.
func removeDurable(fs vfs.FS, path string) error {
	err := fs.Remove(path)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = fs.SyncDir(filepath.Dir(path))
	}
	return err
}

// lostListStays logs the failure of forgetLost.
func (s *Store) lostListStays(err error) {
	s.opts.Logger.Warn("broker: could not remove the list of the messages a salvage lost", "file", s.lostPath(), "err", err)
}

// salvageLeft is what finishSalvage could not remove: the log's list of
// the spans a salvage repaired (spans), and the store's of the messages
// they held (lost).
type salvageLeft struct{ spans, lost error }

// finishSalvage removes, once Open has returned the report of a salvage,
// the lists it leaves until then: the log's of the spans it repaired, and
// the store's of the messages they held (forgetLost). It runs once, in the
// first maintenance round or at Close, whichever comes first; a failure
// is returned for the caller to log once it holds no lock (see
// salvageListStays: Close holds closeMu here), not to stop anything: the
// report was given, and a list that stays only makes the next Open
// without Salvage refuse the store until one with it gives the report
// again.
func (s *Store) finishSalvage() salvageLeft {
	if !s.salvagePending.Swap(false) {
		return salvageLeft{}
	}
	if err := s.log.SalvageDone(); err != nil {
		return salvageLeft{spans: err}
	}
	if len(s.log.Recovery().Salvaged) > 0 {
		return salvageLeft{lost: errors.Join(s.forgetLost(), s.forgetLaterBuild())}
	}
	return salvageLeft{}
}

// salvageListStays logs what finishSalvage could not remove.
func (s *Store) salvageListStays(left salvageLeft) {
	if left.spans != nil {
		s.opts.Logger.Warn("broker: the list of what a salvage repaired could not be removed; the next open without Salvage refuses the store until one with it reports the repair again", "dir", s.dir, "err", left.spans)
	}
	if left.lost != nil {
		s.lostListStays(left.lost)
	}
}

// A salvage that repaired damage in the log, then met a record a later
// build wrote (index.ErrLaterKind), leaves the log's list of the spans it
// repaired, and an Open without Salvage refuses the store until an Open
// with it finishes: which this build's cannot, since its replay meets the
// same record. So the refusing Open writes its error to
// salvage/later-build.txt, and an Open without Salvage that finds the log
// refused as damaged says what the note says, and that a build that
// reads the record must open it, instead of offering Salvage. The note is
// removed with the list of lost messages (finishSalvage), and, like it, by
// a salvage that finishes no earlier one, before it begins.

const laterBuildName = "later-build.txt"

func (s *Store) laterBuildPath() string { return filepath.Join(s.dir, "salvage", laterBuildName) }

// noteLaterBuild writes refusal, the error of a salvaging Open that met
// a later build's record after the log's salvage repaired damage, to
// laterBuildPath. A failure only loses the advice, so it is returned for
// the caller to join to the refusal.
func (s *Store) noteLaterBuild(refusal error) error {
	fs, path := s.opts.fs(), s.laterBuildPath()
	err := vfs.MkdirAllDurable(fs, filepath.Dir(path), 0o700)
	if err == nil {
		err = vfs.ReplaceFile(fs, path, []byte(refusal.Error()))
	}
	if err != nil {
		return fmt.Errorf("note in %s that the store holds a later build's record: %w", path, err)
	}
	return nil
}

// laterBuildNoted returns, for err, the log's refusal of the store at
// where (dir as the caller named it), the error of an Open without
// Salvage when noteLaterBuild wrote there and err refuses the log as
// damaged: Corrupt, and err, to errors.Is and As, in a laterBuildRefusal
// whose text says first what to do, open it with Salvage in a build that
// reads the later build's record, and then why, without the log's own
// advice to open it with Salvage when the refusal is of the salvage left
// unfinished (wal.ErrUnfinishedSalvage): this build's Salvage refuses it.
// It returns nil otherwise (openError's error applies).
func laterBuildNoted(opts Options, where, dir string, err error) error {
	if opts.Salvage || !errors.Is(err, wal.ErrCorrupt) {
		return nil
	}
	note, rerr := vfs.ReadFile(opts.fs(), filepath.Join(where, "salvage", laterBuildName), 64<<10)
	if rerr != nil || len(note) == 0 {
		return nil
	}
	why := err.Error()
	var ce *wal.CorruptionError
	if errors.Is(err, wal.ErrUnfinishedSalvage) && errors.As(err, &ce) {
		why = fmt.Sprintf("a salvage began repairing the log, from %s at offset %d, and stopped at that record; the spans it repaired are listed in %s",
			ce.File, ce.Offset, filepath.Join(dir, "salvage"))
	}
	return &laterBuildRefusal{
		text: fmt.Sprintf("broker: open %s: open it with Salvage in a build that reads the record a later build wrote, which this build's Salvage refuses (%s); until then an Open without Salvage refuses the store: %v: %s",
			dir, note, Corrupt, why),
		err: err,
	}
}

// laterBuildRefusal is laterBuildNoted's error: its text, and Corrupt and
// the log's refusal to errors.Is and As.
type laterBuildRefusal struct {
	text string
	err  error
}

func (e *laterBuildRefusal) Error() string { return e.text }

// Unwrap returns Corrupt and the log's refusal.
func (e *laterBuildRefusal) Unwrap() []error { return []error{Corrupt, e.err} }

// forgetLaterBuild removes what noteLaterBuild wrote (see forgetLost).
func (s *Store) forgetLaterBuild() error { return removeDurable(s.opts.fs(), s.laterBuildPath()) }
