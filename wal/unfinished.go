package wal

import (
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"
	"slices"

	"github.com/walbroker/walbroker/vfs"
)

// A salvage repairs segments in place, one after another, and reports what
// it skipped only when the Open that does it succeeds. An Open that fails
// part way (an I/O error, a crash) can leave spans already overwritten with
// padding: they read as intact afterwards, and without a record of them a
// later Open would report nothing of what they held. So before a salvage
// changes a segment, it lists durably every span this Open salvages, in
// salvage/unfinished.json; the Open that finishes removes the list. While
// the list is there, an Open without Salvage refuses the log, and one with
// Salvage reports the listed spans with those it finds itself.

// salvageDirName is the subdirectory of the copies a salvage keeps;
// unfinishedName, in it, the list of a salvage in progress.
const (
	salvageDirName = "salvage"
	unfinishedName = "unfinished.json"
)

// unfinishedSpan is one Damage as the list holds it.
type unfinishedSpan struct {
	File     string `json:"file"`
	Segment  uint32 `json:"segment"`
	Offset   int    `json:"offset"`
	Length   int    `json:"length"`
	Cause    string `json:"cause"`
	CopiedTo string `json:"copied_to"`
}

type unfinishedList struct {
	Spans []unfinishedSpan `json:"spans"`
}

func (l *Log) unfinishedPath() string {
	return filepath.Join(l.dir, salvageDirName, unfinishedName)
}

// readUnfinished returns the spans an earlier salvage listed and did not
// finish, if it left its list.
func (l *Log) readUnfinished() ([]Damage, bool, error) {
	path := l.unfinishedPath()
	data, err := vfs.ReadFile(l.opts.FS, path, 64<<20)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("wal: open: %w", err)
	}
	var list unfinishedList
	err = json.Unmarshal(data, &list)
	ds := make([]Damage, len(list.Spans))
	for i, sp := range list.Spans {
		if err != nil {
			break
		}
		if sp.Segment == 0 || sp.Offset < 0 || sp.Length < 0 || sp.Offset > MaxSegmentBytes || sp.Length > MaxSegmentBytes-sp.Offset {
			err = fmt.Errorf("span %d: %d bytes at offset %d of segment %d is no span of a segment", i, sp.Length, sp.Offset, sp.Segment)
			break
		}
		// The names are this directory's: it may have been moved since.
		ds[i] = Damage{File: l.segPath(sp.Segment), Segment: sp.Segment, Offset: sp.Offset, Length: sp.Length, Cause: errors.New(sp.Cause)}
		if sp.CopiedTo != "" {
			ds[i].CopiedTo = filepath.Join(filepath.Dir(path), filepath.Base(sp.CopiedTo))
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("wal: open: %s, the list of the spans an unfinished salvage repaired, does not read (%w); the damaged files it copied are in %s, and each span was logged at ERROR as it was repaired; remove the list to open the log without them",
			path, err, filepath.Dir(path))
	}
	return ds, true, nil
}

// unfinishedError is Open's refusal of a log an unfinished salvage left,
// when Salvage is not set. Its cause matches ErrUnfinishedSalvage.
func (l *Log) unfinishedError(prior []Damage) error {
	cause := &unfinishedCause{text: fmt.Sprintf("an Open with Salvage began repairing the log and did not finish (its list of %d damaged spans is %s): open with Salvage to finish and report them", len(prior), l.unfinishedPath())}
	if len(prior) == 0 {
		return &CorruptionError{File: l.unfinishedPath(), Cause: cause}
	}
	return &CorruptionError{File: prior[0].File, Offset: prior[0].Offset, Cause: cause}
}

// unfinishedCause is the cause of unfinishedError: its text, which says
// what to do, and ErrUnfinishedSalvage to errors.Is.
type unfinishedCause struct{ text string }

func (e *unfinishedCause) Error() string { return e.text }

// Is reports whether target is ErrUnfinishedSalvage.
func (e *unfinishedCause) Is(target error) bool { return target == ErrUnfinishedSalvage }

// noteSalvage lists durably every span this Open has salvaged and ds,
// which it is about to: call it before a salvage changes a segment.
func (l *Log) noteSalvage(ds ...Damage) error {
	var list unfinishedList
	for _, d := range mergeDamage(l.recovery.Salvaged, ds) {
		cause := ""
		if d.Cause != nil {
			cause = d.Cause.Error()
		}
		list.Spans = append(list.Spans, unfinishedSpan{File: d.File, Segment: d.Segment, Offset: d.Offset, Length: d.Length, Cause: cause, CopiedTo: d.CopiedTo})
	}
	data, err := json.MarshalIndent(list, "", "\t")
	if err != nil {
		return fmt.Errorf("wal: salvage: %w", err)
	}
	fs, path := l.opts.FS, l.unfinishedPath()
	err = vfs.MkdirAllDurable(fs, filepath.Dir(path), 0o700)
	if err == nil {
		err = vfs.ReplaceFile(fs, path, append(data, '\n'))
	}
	if err != nil {
		return fmt.Errorf("wal: salvage: list the spans it repairs in %s: %w", path, err)
	}
	l.unfinished = true
	return nil
}

// salvaged adds ds to what this Open reports it salvaged.
func (l *Log) salvaged(ds ...Damage) {
	l.recovery.Salvaged = mergeDamage(l.recovery.Salvaged, ds)
}

// mergeDamage returns a copy of base with the spans of ds it does not
// list: a span an unfinished salvage listed, and whose repair did not
// reach the file, is found again (at the same offset); and one inside a
// span already listed adds no byte to the loss. The early seal of a
// segment salvage put in the place of a missing file, or whose header it
// could not read (a span of the whole file), is such a span: listed, it
// counted one loss twice, the first time as zero bytes.
func mergeDamage(base, ds []Damage) []Damage {
	out := slices.Clone(base)
	for _, d := range ds {
		if !slices.ContainsFunc(out, func(p Damage) bool { return p.Segment == d.Segment && (p.Offset == d.Offset || within(d, p)) }) {
			out = append(out, d)
		}
	}
	return out
}

// within reports whether the bytes of span d are all bytes of span p (of
// the same segment).
func within(d, p Damage) bool {
	return p.Offset <= d.Offset && int64(d.Offset)+int64(d.Length) <= int64(p.Offset)+int64(p.Length)
}

// SalvageDone removes the list of the spans this log's Open salvaged,
// which Options.KeepSalvageList kept: call it once the report built from
// Recovery is handed on. From then on an Open without Salvage opens the
// repaired log. It does nothing when there is no list, and only one call
// removes it. On a closed Log it is ErrClosed and removes nothing: another
// Log may have the directory, and its own report may need the list.
func (l *Log) SalvageDone() error {
	if l == nil {
		return errNilLog
	}
	l.removeMu.Lock() // Close marks the log closed before it takes removeMu
	defer l.removeMu.Unlock()
	if l.isClosed() {
		return ErrClosed
	}
	l.salvageMu.Lock()
	defer l.salvageMu.Unlock()
	return l.finishSalvage()
}

// finishSalvage removes the list once every repair of this Open is
// durable.
func (l *Log) finishSalvage() error {
	if !l.unfinished {
		return nil
	}
	fs, path := l.opts.FS, l.unfinishedPath()
	if err := fs.Remove(path + tmpSuffix); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("wal: open: salvage done, but %s stays: %w", path+tmpSuffix, err)
	}
	if err := fs.Remove(path); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("wal: open: salvage done, but its list %s stays: %w", path, err)
	}
	if err := fs.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("wal: open: salvage done, but the removal of its list %s: %w", path, err)
	}
	l.unfinished = false
	return nil
}
