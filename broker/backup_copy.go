package broker

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
)

// copyMark names the file, at the root of a backup's copy, that says the
// copy has not been opened yet: its first Open moves the next message
// sequence on by copyJump, makes that durable as a mark in the log, and
// only then removes the file (see raiseCopySeq). Backup writes it, durably,
// in the partial copy before the copy takes its name, so a finished copy
// always holds it. No other file of a store has this name, and the log's
// Open passes over names it does not know.
const copyMark = "BACKUP-COPY"

// copyMarkText is what the mark holds: a word to whoever lists the copy.
// Open looks only at whether the file is there.
const copyMarkText = "This directory is a copy written by Store.Backup and not opened since.\n" +
	"Its first Open moves the message IDs on past any the original handed out after the backup, then removes this file.\n"

// copyJump is how far the first Open of a backup's copy moves the next
// message sequence on: 2^48, far beyond what any store publishes between
// a backup and its restore (a million messages a second for nine years),
// so that the copy never hands out an ID the original gave after the
// backup. The table and every walk of the sequences step over the gap by
// what they hold, never by its length (see docs/DESIGN.md, "Message IDs").
const copyJump = 1 << 48

// jumpedSeq returns next moved on by copyJump or, when fewer than twice
// copyJump sequences remain above next, by half of those that remain: a
// copy of a copy of ... near the end of the sequences keeps some to hand
// out rather than jumping past the last one (a jump there, past the IDs
// the original gave, is only as far as there is room for).
func jumpedSeq(next uint64) uint64 {
	if next >= index.LastSeq {
		return next
	}
	return next + min(copyJump, (index.LastSeq-next)/2)
}

// markCopy writes, durably, the mark of the partial copy dir: the file
// fdatasynced and dir synced, before the copy takes its name.
func markCopy(fs vfs.FS, dir string) error {
	path := filepath.Join(dir, copyMark)
	if err := vfs.WriteFile(fs, path, []byte(copyMarkText)); err != nil {
		return fmt.Errorf("mark the copy (%s): %w", path, err)
	}
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("mark the copy (%s): sync %s: %w", path, dir, err)
	}
	return nil
}

// raiseCopySeq reports whether the store is a backup's copy not yet opened
// (its copyMark is there) and, if it is, moves the index's next message
// sequence on (jumpedSeq) and sets seqRaised, so that Open makes the new
// sequence durable (markRaisedSeq) before it removes the mark
// (forgetCopyMark). An Open that fails, or a crash, in between leaves the
// mark, and the next Open jumps again: harmless, the sequences skipped
// are never handed out. The mark is looked for once the index is loaded,
// whether or not the Open salvages, and before Open writes records of
// its own (a preamble restored carries the raised sequence). An error
// looking for it, other than its absence, is returned: taken for its
// absence, the copy would hand out the original's IDs again.
func (s *Store) raiseCopySeq() (bool, error) {
	path := filepath.Join(s.dir, copyMark)
	f, err := s.opts.fs().OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, iofs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look for the mark of a backup's copy %s: %w", path, err)
	}
	_ = f.Close() // only read-only, and only its presence counts
	next := s.idx.PeekNextSeq()
	if to := jumpedSeq(next); to > next {
		if err := s.idx.Apply(0, &index.Event{Kind: index.KindMark, Seq: to}); err != nil {
			return false, err
		}
		s.seqRaised = true
	}
	return true, nil
}

// forgetCopyMark removes the copy's mark durably, once the sequence
// raiseCopySeq raised is durable in the log.
func (s *Store) forgetCopyMark() error {
	fs := s.opts.fs()
	path := filepath.Join(s.dir, copyMark)
	if err := fs.Remove(path); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("remove the mark of a backup's copy %s (the next message sequence is recorded; the next Open moves it on again): %w", path, err)
	}
	if err := fs.SyncDir(s.dir); err != nil {
		return fmt.Errorf("remove the mark of a backup's copy %s: sync %s (the next message sequence is recorded; the next Open moves it on again): %w", path, s.dir, err)
	}
	return nil
}
