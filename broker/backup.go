package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// partialSuffix names the directory a backup is written in before it is
// renamed into place, and partialMark the file that says it is one. The
// mark ends in ".tmp", which an Open of the copy removes (wal.Open removes
// the .tmp files it does not keep): a crash between the rename and the
// mark's removal leaves a complete copy that cleans itself up.
const (
	partialSuffix = ".partial"
	partialMark   = "backup-in-progress.tmp"
)

// Backup writes a copy of the store into dir while the store runs. The copy
// holds the state of every queue as of one instant during the call — each
// message with its delivery count, lease and receipt, each dead letter,
// each dedup key, each policy — and Open opens it like a store closed at
// that instant (a new lock, its own background work from then on). Its
// message IDs go on from there, but far past it: the copy cannot know how
// far the original went, so it holds a mark file (BACKUP-COPY) that has
// its first Open move the next message sequence on by 2^48 (by half of
// the sequences left, when fewer than twice that are), far beyond what
// any store publishes between a backup and its restore, record it in the
// log, and only then remove the mark: the copy's new messages take no ID
// the original handed out after the backup. An Open that fails, or a
// crash, before the mark is removed leaves it, and the next Open jumps
// again, which skips IDs and harms nothing. Two stores opened from the
// same copy (one of them from a copy of its files) jump alike, and may
// give the same IDs to their new messages. The
// copy keeps the store's secret, so receipts issued by the original, before
// or after the backup, verify on it, which lets consumers of a restored
// store settle the leases it still holds: one naming no lease the copy
// holds is LeaseExpired. But a receipt names its queue by number, and
// queues are numbered in the order they are first declared, by the
// original and the copy each on its own after the backup: a receipt for a
// queue the original declared after the backup is UnknownReceipt on the
// copy, as another queue's receipt is, unless the copy gave that queue the
// same number (it does when it declares the queues the backup lacks in the
// order the original did).
//
// dir must not exist (its parents are made as needed, and stay if the
// Backup fails once it has begun its copy; an existing dir, or
// a file or a symbolic link to nothing in its place, is refused with an
// error that wraps fs.ErrExist, before anything is copied). dir is
// resolved once, as Open resolves a store's directory (a ".." after a
// link climbs out of the link's target, one after a name that does not
// exist undoes that name), and the place checked is the place written; a
// symbolic link as dir's last name is refused, a trailing "/" or not.
// dir must not lie inside the store's directory, nor dir+".partial" be or
// hold it, nor dir's last name end in ".partial" (in any case), nor dir
// lie inside another store's directory (one that holds a LOCK), a
// backup's copy (BACKUP-COPY) or a backup's partial copy (its mark, below;
// the copy would be renamed or removed with it): such a dir is refused,
// naming the place, before anything is made (a complete copy can keep its mark,
// below, and named "x.partial" it would look like an unfinished copy of a
// Backup to "x", which removes it).
// The copy is written, every file of it fdatasynced, in dir+".partial"
// (BACKUP-COPY last, before the directory's sync),
// which is then renamed to dir. The ".partial" holds a mark file, which
// the Backup writing it holds locked (an exclusive flock) until the copy
// has its name or is removed: a Backup to the same dir meanwhile, of
// another store or in another process, finds the mark locked and is
// refused, leaving the copy alone, with an error that wraps [Locked] and
// fs.ErrExist (wait for the other to end, or choose another dir). After a
// crash during Backup the lock is gone with the process, and there is
// either no dir, and the next Backup to dir removes the leftover
// ".partial" (it recognises its own by a mark no one holds locked, or by
// its being empty, and refuses to touch a directory of that name that
// holds anything else, or that is, or holds as "index", a symbolic link
// (to nothing too), or that cannot be listed, or a file of that name: the
// Backup then fails, making nothing), or a complete dir, whose first Open
// removes the mark. A Backup that fails never removes what it did not
// make: what stands at dir+".partial" when its own making of it fails (a
// file, a symbolic link, another Backup's copy) is left. And it leaves
// no dir, but in one case: when the copy, complete, has taken dir's name,
// the sync that makes the name durable fails, and the copy cannot be
// renamed back to be removed, it is left whole, marked, as dir (removed
// there, a removal failing part way would leave a short copy that opens
// as a store missing messages), and the error says so.
//
// The copy is a checkpoint and the log up to it: Backup first writes a
// checkpoint of the store in the store's own directory, so it needs room
// on the store's disk whatever disk dir is on, and one that fails there
// (a full disk) fails the Backup and stops the store's checkpoints, as any
// failed checkpoint does (StoreStats.MaintenanceStopped): free space and
// reopen the store before the next Backup.
//
// Every other call goes on meanwhile; the store's checkpoints wait while
// the queues' state is copied, and the removal of old segments, and other
// Backups of this store, until Backup returns; Close waits until the
// segments are copied. The copy takes about what
// reading and writing the log's segments takes (StoreStats.DiskBytes +
// IndexBytes).
// Every record copied is verified first (Open reads only what came after
// the last checkpoint, so this is where damage to older segments shows):
// damage fails the Backup with [Corrupt], naming the file and offset, and
// stops the store as a Receive that met it would (reopen it; see
// Options.Salvage). A ctx that has ended when Backup begins is refused
// with ctx's error itself, as by every call of a Queue: nothing is made.
// ctx ends the wait for another Backup of the store
// (which then makes nothing), and is checked between files, the index's
// and the log's; a Backup that fails or is canceled removes what it
// wrote and leaves no dir, but in the one case above. It fails with
// Closed after Close, like every call once the store stopped for good,
// and with the failure that stopped the checkpoints once one failed (they
// stop until the store is reopened; StoreStats.MaintenanceStopped),
// either of them found at the start, or once its wait for another Backup
// ends, making nothing where the copy would go.
func (s *Store) Backup(ctx context.Context, dir string) error {
	if s.unmade() {
		return nilReceiver("Store")
	}
	if ctx == nil {
		return fmt.Errorf("broker: backup of %s to %q: nil context: %w", s.dir, dir, QueueMisconfigured)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	fail := func(err error) error { return fmt.Errorf("broker: backup of %s to %q: %w", s.dir, dir, err) }
	if dir == "" {
		return fail(fmt.Errorf("the directory path is empty: %w", QueueMisconfigured))
	}
	if i := strings.IndexByte(dir, 0); i >= 0 {
		return fail(fmt.Errorf("the directory path holds a NUL byte at %d, which no file name can: %w", i, QueueMisconfigured))
	}
	if err := s.checkpointsStopped(); err != nil {
		return fail(err)
	}
	err, markErr := s.copyBackup(ctx, dir, fail)
	if markErr != nil {
		// Logged once reclaimMu is released: the handler is the caller's
		// code.
		s.opts.Logger.Warn("broker: backup: the copy is complete; its first Open removes the mark", "dir", dir, "err", markErr)
	}
	return err
}

// checkpointsStopped returns the failure that stopped the checkpoints,
// if one did: a Backup's copy is its checkpoint's, which cannot then be
// written, so a Backup is refused before it makes anything, its parents
// included, as after Close.
func (s *Store) checkpointsStopped() error {
	if p := s.maint.stopped.Load(); p != nil {
		return *p
	}
	return nil
}

// copyBackup is Backup's work, under reclaimMu. markErr is why the
// complete copy's mark could not be removed, for Backup to log.
func (s *Store) copyBackup(ctx context.Context, dir string, fail func(error) error) (err, markErr error) {
	fs := s.opts.fs()
	// One Backup of this store at a time, and no segment removal until it
	// ends (reclamation skips its rounds meanwhile, rather than hold the
	// maintenance goroutine, and with it the checkpoints: see reclaim).
	// Backups of other stores, or in other processes, are kept out of
	// this one's partial copy by the lock on its mark (startPartial).
	// The wait ends with ctx: another Backup's copy may take minutes.
	if err := s.maint.reclaimMu.Lock(ctx); err != nil {
		return fail(err), nil
	}
	defer s.maint.reclaimMu.Unlock()
	// The store may have closed, or its checkpoints stopped, while this
	// Backup waited for another: it is refused as at the start, before
	// anything is made where the copy would go.
	for _, err := range []error{ctx.Err(), s.usable(), s.checkpointsStopped()} {
		if err != nil {
			return fail(err), nil
		}
	}
	// From here on, the place dir names, resolved once: the check, the
	// partial copy, the rename, the sync of its parent and the mark are
	// all there (a ".." after a link in dir climbs out of the link's
	// target, which cleaning dir's text would not).
	dir, err = s.checkBackupDir(dir)
	if err != nil {
		return fail(err), nil
	}
	tmp := dir + partialSuffix
	lock, err := startPartial(fs, tmp)
	if err != nil {
		return fail(err), nil
	}
	// Held until the copy has its name and its mark is gone, or it is
	// removed: until then, another Backup to dir that finds the partial
	// copy leaves it alone. Once the copy is named dir (where a failed
	// sync may rename it back from, still locked), another Backup to dir
	// is refused as existing, or fails to rename its own copy over it.
	// Closing the lock's file releases it, whatever Close returns.
	defer func() { _ = lock.Close() }()
	if err := s.copyInto(ctx, tmp); err != nil {
		if errors.Is(err, wal.ErrCorrupt) {
			// Damage to synced records, found by the copy's check: the
			// store stops as when a read finds it (see damaged).
			err = s.damaged(err)
		}
		return fail(errors.Join(err, removePartial(fs, tmp))), nil
	}
	// Before the copy has its name, so that a finished copy always says it
	// is one: its first Open moves the message IDs on (raiseCopySeq).
	if err := markCopy(fs, tmp); err != nil {
		return fail(errors.Join(err, removePartial(fs, tmp))), nil
	}
	// Every file of the copy is durable: it takes its name, marked still,
	// so that a crash never leaves a complete copy without a name or a
	// mark.
	if err := fs.Rename(tmp, dir); err != nil {
		return fail(errors.Join(err, removePartial(fs, tmp))), nil
	}
	if err := fs.SyncDir(filepath.Dir(filepath.Clean(dir))); err != nil {
		// Its name may not be durable: a failed Backup leaves no dir,
		// so that the caller's retry to the same place is not refused.
		// It is renamed back before it is removed: a removal that
		// fails part way then leaves a partial copy, which the next
		// Backup recognises and removes, never a marked one under
		// dir's name, which would open as a store missing messages.
		if rerr := fs.Rename(dir, tmp); rerr != nil {
			// Removed under dir's name, file by file, it could be
			// left short there: the whole copy stays instead, marked
			// (so that a power loss that undoes the rename leaves a
			// leftover the next Backup removes; its first Open
			// removes the mark), and the error says where it is.
			return fail(fmt.Errorf("the copy's name could not be made durable (%w), nor could the copy be renamed back to be removed (%w): the copy is complete, and left as %s, but its name may not survive a power loss; a Backup to the same directory is refused while it is there (keep it, or remove it and back up again)", err, rerr, dir)), nil
		}
		rmErr := removePartial(fs, tmp)
		what := "the copy is removed"
		if rmErr != nil {
			what = "the copy could not be removed"
		}
		return fail(errors.Join(fmt.Errorf("the copy's name could not be made durable, and %s: %w", what, err), rmErr)), nil
	}
	if markErr = fs.Remove(filepath.Join(dir, partialMark)); markErr == nil {
		_ = fs.SyncDir(dir) // else the copy's first Open removes the mark
	}
	return nil, markErr
}

// checkBackupDir returns the place dir names, resolved as [vfs.Resolve]
// resolves it (as Open resolves a store's directory), after refusing one
// that exists (a directory, a file, a symbolic link, to nothing or not) or
// that lies inside the store's own directory, or whose partial copy
// (dir+".partial") would be, hold or lie inside it. What it checks is
// what Backup writes: the text of dir is not looked at again.
func (s *Store) checkBackupDir(dir string) (string, error) {
	place, err := backupPlace(dir)
	if err != nil {
		return "", fmt.Errorf("it cannot be resolved: %w", err)
	}
	store, err := vfs.Resolve(s.dir)
	if err != nil {
		return "", fmt.Errorf("the store's directory cannot be resolved: %w", err)
	}
	if within(place, store) {
		return "", fmt.Errorf("it lies inside the store's own directory %s", store)
	}
	// A complete copy can keep its mark (its removal failed, or the power
	// went first): under a name ending in ".partial" it would look like a
	// crashed Backup's partial copy, which a Backup to the name without
	// the suffix, of any store, removes. Any case: "x.PARTIAL" is
	// "x.partial" on a file system that folds case. (".partial" alone is
	// no other place's partial copy.)
	if n := len(place) - len(partialSuffix); n > 0 && strings.EqualFold(place[n:], partialSuffix) && place[n-1] != filepath.Separator {
		return "", fmt.Errorf("its name ends in %q, as a backup's unfinished copy is named: a Backup to %s would take this backup for an unfinished one and remove it; choose another name", place[n:], place[:n])
	}
	// The partial copy is written, and removed when the Backup fails, in
	// place+".partial": one that is the store's directory, or holds it,
	// would have the store's files taken for the copy's (a failure there
	// removed the live store's segments).
	if tmp := place + partialSuffix; within(store, tmp) || within(tmp, store) {
		how := "be"
		switch {
		case store != tmp && within(store, tmp):
			how = "hold"
		case store != tmp:
			how = "lie inside"
		}
		return "", fmt.Errorf("its partial copy %s would %s the store's own directory %s: choose another directory", tmp, how, store)
	}
	if holder, what := othersAbove(place); holder != "" {
		return "", fmt.Errorf("it lies inside %s, %s, which a backup must not be written into: choose a directory outside it", holder, what)
	}
	// A symbolic link, to nothing or not: the finished copy could never
	// take its name (a directory is not renamed over a link), so the
	// whole copy would be made, and removed, for nothing; and written
	// where the link points, it would not be where the caller looks.
	if link, err := vfs.IsLink(place); err != nil {
		return "", fmt.Errorf("%s cannot be made: %w", place, err)
	} else if link {
		to := "to a file or a directory"
		if _, err := s.opts.fs().ReadDir(place); errors.Is(err, iofs.ErrNotExist) {
			to = "to nothing"
		}
		return "", fmt.Errorf("%s already exists, as a symbolic link %s; a backup goes into a new directory: %w", place, to, iofs.ErrExist)
	}
	_, err = s.opts.fs().ReadDir(place)
	switch {
	case err == nil:
		return "", fmt.Errorf("%s already exists; a backup goes into a new directory: %w", place, iofs.ErrExist)
	case errors.Is(err, syscall.ENOTDIR):
		// place's parents resolved, so place itself is the file that
		// is not a directory.
		return "", fmt.Errorf("%s already exists, and is not a directory; a backup goes into a new directory: %w (%w)", place, iofs.ErrExist, err)
	case !errors.Is(err, iofs.ErrNotExist):
		return "", fmt.Errorf("%s cannot be made: %w", place, err)
	}
	return place, nil
}

// storeLockName is the file every store's directory holds once it has
// been opened (wal.Open locks it).
const storeLockName = "LOCK"

// othersAbove returns the nearest of place's parents that is another
// store's directory (it holds a LOCK), a backup's copy not yet opened (a
// BACKUP-COPY), or a backup's partial copy (its mark: a Backup writing
// it, or a crashed one's leftover), and says which; "" when none is. A
// copy written inside one of those would be lost or would harm it: the
// Backup writing the partial copy renames it, this copy inside, to its
// own name, or removes it on failure, this copy with it, and the next
// Backup to its name removes a leftover whole; a store's directory holds
// only files it made (see DESIGN.md "Files a store did not make"), and a
// backup's copy is one. Each parent is looked at with an lstat of each of
// the three names (not a listing of the directory, which may be large or
// not readable); a parent where those cannot be looked at (one that does
// not exist yet, or cannot be searched) holds none of them.
func othersAbove(place string) (holder, what string) {
	for dir := filepath.Dir(place); ; dir = filepath.Dir(dir) {
		for _, m := range []struct{ name, what string }{
			{partialMark, "the partial copy of a backup (written by a Backup now, or left by one that did not finish)"},
			{copyMark, "a backup's copy"},
			{storeLockName, "a store's directory"},
		} {
			if _, err := os.Lstat(filepath.Join(dir, m.name)); err == nil {
				return dir, m.what
			}
		}
		if parent := filepath.Dir(dir); parent == dir {
			return "", ""
		}
	}
}

// within reports whether the path a is b or lies inside it (both clean
// and absolute).
func within(a, b string) bool {
	rel, err := filepath.Rel(b, a)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// backupPlace resolves dir as [vfs.Resolve] does, except that a symbolic
// link as its last name (followed with a trailing "/" or "/.") is not
// followed: the place is the link itself, which a Backup refuses, rather
// than where it points.
func backupPlace(dir string) (string, error) {
	sep := string(filepath.Separator)
	last := dir
	for len(last) > 1 && (strings.HasSuffix(last, sep) || strings.HasSuffix(last, sep+".")) {
		last = last[:len(last)-1] // a trailing "/", or the "." of "/."
	}
	i := strings.LastIndex(last, sep)
	parent, base := ".", last
	if i >= 0 {
		parent, base = last[:i+1], last[i+1:]
	}
	if base == "" || base == "." || base == ".." {
		// The root, the working directory, or a parent: no link is
		// the last name.
		return vfs.Resolve(dir)
	}
	p, err := vfs.Resolve(parent)
	if err != nil {
		return "", err
	}
	return filepath.Join(p, base), nil
}

// copyInto copies the store into dir: a checkpoint made now, then the log up
// to that checkpoint's position. The caller holds reclaimMu: the segments
// below the checkpoint stay where they are.
func (s *Store) copyInto(ctx context.Context, dir string) error {
	m := &s.maint
	m.ckptMu.Lock()
	err := s.usable()
	if err == nil {
		err = s.checkpointLocked()
	}
	if err == nil {
		idx := filepath.Join(dir, "index")
		if err = s.opts.fs().MkdirAll(idx, 0o700); err == nil {
			err = index.CopyCheckpoint(ctx, s.opts.fs(), s.indexDir(), idx)
		}
	}
	at := wal.Position(m.lastCheckpoint.Load())
	m.ckptMu.Unlock()
	if err != nil {
		return err
	}
	m.removeMu.RLock() // Close waits for the copy
	defer m.removeMu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	return s.log.CopyTo(ctx, dir, at)
}

// startPartial makes dir, durably, with the mark that says it is a backup
// in progress, and returns the lock on the mark, which the caller holds
// until its copy has its name or is removed. It first removes a leftover
// of an earlier Backup: marked, with its mark unlocked (the lock dies with
// the process that held it), or empty (a crash before its mark was made).
// A marked one whose mark is locked is another Backup's, running: it is
// refused, wrapping Locked and fs.ErrExist, and left alone. A dir that
// cannot be listed (an error other than its absence) is refused before
// anything is made or removed. The mark is durable before any other file
// is made there. A failure once dir is made removes what this call made
// (see abandonPartial), unless it says another Backup is at work there.
// Anything at dir that is not a directory (a file, a symbolic link, to
// nothing too) is refused and left alone (listPartial).
func startPartial(fs vfs.FS, dir string) (io.Closer, error) {
	mark := filepath.Join(dir, partialMark)
	names, there, err := listPartial(fs, dir)
	if err != nil {
		return nil, err
	}
	if there {
		if len(names) > 0 && !slices.Contains(names, partialMark) {
			return nil, fmt.Errorf("%s exists and is not a backup in progress (it has no %s): remove it or choose another directory", dir, partialMark)
		}
		// Before the mark is locked: a lock writes its holder into
		// the file, which must not be one reached through a link.
		if err := refuseLinks(dir); err != nil {
			return nil, err
		}
		if len(names) == 0 {
			// A crashed Backup's, from before its mark was made, or a
			// running one's that is about to make it: a removal of a
			// directory removes only an empty one, so that the
			// running one then finds its directory gone, or this
			// one's, whose mark only one of them locks. (A directory
			// and no link, as just listed: see abandonPartial.)
			if err := fs.Remove(dir); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				return nil, fmt.Errorf("remove the empty unfinished backup %s (another Backup may have begun writing it): %w", dir, err)
			}
		} else {
			l, err := fs.Lock(mark)
			if err != nil {
				return nil, inUse(dir, err)
			}
			if err := removeHeld(fs, dir, l); err != nil {
				return nil, fmt.Errorf("remove the unfinished backup %s: %w", dir, err)
			}
		}
	}
	// From here on dir is this call's to make: it was not there, or it was
	// a leftover this call removed. A failure that is not another Backup's
	// doing removes what this call made (abandonPartial), so that a failed
	// Backup leaves no partial copy; one that is (the mark made, removed
	// or locked by another Backup meanwhile) touches nothing, since the
	// directory is then the other's.
	if err := vfs.MkdirAllDurable(fs, dir, 0o700); err != nil {
		return nil, abandonPartial(fs, dir, nil, err)
	}
	if err := vfs.CreateEmpty(fs, mark); err != nil {
		// Another Backup made its mark since dir was looked at (it
		// exists), or took dir for an empty leftover and removed it.
		if anotherBackups(err) {
			return nil, inUse(dir, err)
		}
		return nil, abandonPartial(fs, dir, nil, inUse(dir, err))
	}
	// Between the mark's creation and its lock, another Backup may take
	// it for a leftover and remove it, and perhaps make its own: this
	// Lock then fails (a lock is held only on the file its name names),
	// and nothing of the other's is touched.
	l, err := fs.Lock(mark)
	if err != nil {
		if anotherBackups(err) {
			return nil, inUse(dir, err)
		}
		return nil, abandonPartial(fs, dir, nil, inUse(dir, err))
	}
	if err := fs.SyncDir(dir); err != nil {
		return nil, abandonPartial(fs, dir, l, err)
	}
	return l, nil
}

// listPartial lists dir, the name of a partial copy, and reports whether
// it is there. What Backup never makes there is refused, untouched, with
// an error that says what it is: a symbolic link, to a directory, a file
// or nothing (ReadDir follows a link, and one to nothing reads as absent:
// the Backup went on, failed to make the name and removed the link as an
// empty directory of its own); a file; and a directory that cannot be
// listed, which may hold anything (someone else's files, a store) that a
// Backup that went on would write its copy into, rename as its own, or
// remove with its own when it failed. Only a name that is not there is
// taken as not there.
func listPartial(fs vfs.FS, dir string) (names []string, there bool, err error) {
	if link, err := vfs.IsLink(dir); err != nil {
		return nil, false, fmt.Errorf("%s cannot be looked at, so whether it is an unfinished backup is not known; nothing is made or removed: %w", dir, err)
	} else if link {
		return nil, false, fmt.Errorf("%s is a symbolic link, which a backup never makes: nothing is made or removed through it; remove it or choose another directory", dir)
	}
	names, err = fs.ReadDir(dir)
	switch {
	case err == nil:
		return names, true, nil
	case errors.Is(err, iofs.ErrNotExist):
		return nil, false, nil
	case errors.Is(err, syscall.ENOTDIR):
		return nil, false, fmt.Errorf("%s exists and is not a directory, so it is not a backup in progress: remove it or choose another directory (%w)", dir, err)
	}
	return nil, false, fmt.Errorf("%s cannot be listed, so whether it is an unfinished backup is not known; nothing is made or removed: %w", dir, err)
}

// abandonPartial removes the partial copy dir that startPartial made, and
// returns cause (why it is abandoned) with the removal's failure, if any.
// l is the lock on dir's mark, or nil when this call holds none (the mark
// not made, or made and not locked); it is closed.
//
// Held, the lock says no other Backup is at work in dir: dir is removed
// as a failed copy is. Not held, dir is removed only as a leftover would
// be, so that nothing another Backup holds is touched: empty, by a
// removal that removes only an empty directory; or holding just a mark,
// which is first locked (a mark another Backup holds locked is left to
// it, as is a directory holding anything else). Either way, another
// Backup meanwhile met nothing it would not meet racing a Backup that
// reclaims a leftover. What cannot be removed stays, a leftover the next
// Backup to the same place removes.
//
// Not held, what stands at dir's name is first listed (listPartial): a
// file or a symbolic link put there since startPartial looked is someone
// else's, left alone and named in the error (FS.Remove is os.Remove,
// which unlinks either as readily as it removes an empty directory). The
// look and the removal are two steps: someone who can rename entries of
// dir's parent can swap a file or a link in between, as they can race
// refuseLinks, so a backup belongs under a directory only its owner can
// write.
func abandonPartial(fs vfs.FS, dir string, l io.Closer, cause error) error {
	if l == nil {
		names, there, err := listPartial(fs, dir)
		switch {
		case err != nil:
			return errors.Join(cause, err)
		case !there:
			return cause
		case len(names) == 0:
			if err := fs.Remove(dir); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				return errors.Join(cause, fmt.Errorf("the unfinished backup %s could not be removed: %w", dir, err))
			}
			return cause
		case !slices.Equal(names, []string{partialMark}):
			// Not this call's: another Backup's copy has files.
			return cause
		}
		if l, err = fs.Lock(filepath.Join(dir, partialMark)); err != nil {
			if anotherBackups(err) {
				return cause
			}
			return errors.Join(cause, fmt.Errorf("the unfinished backup %s is left (its mark could not be locked): %w", dir, err))
		}
	}
	if err := removeHeld(fs, dir, l); err != nil {
		return errors.Join(cause, fmt.Errorf("the unfinished backup %s could not be removed: %w", dir, err))
	}
	return cause
}

// removeHeld removes the partial copy dir while this call holds l, the
// lock on its mark, and then lets the lock go.
func removeHeld(fs vfs.FS, dir string, l io.Closer) error {
	err := removePartial(fs, dir)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	return err
}

// anotherBackups reports whether err, from making or locking a mark, says
// another Backup to the same directory is at work: the mark locked, or
// made or removed by someone else meanwhile.
func anotherBackups(err error) bool {
	return errors.Is(err, vfs.ErrLocked) || errors.Is(err, iofs.ErrExist) || errors.Is(err, iofs.ErrNotExist)
}

// inUse is startPartial's error when making or locking dir's mark failed
// with err. The mark locked, or made or removed by someone else
// meanwhile, says another Backup to the same directory is at work: the
// error wraps Locked and fs.ErrExist.
func inUse(dir string, err error) error {
	switch {
	case errors.Is(err, vfs.ErrLocked):
		return fmt.Errorf("%s is another Backup's copy in progress, to the same directory (its mark %s is locked): wait for it to end, or choose another directory: %w: %w (%w)", dir, partialMark, Locked, iofs.ErrExist, err)
	case errors.Is(err, iofs.ErrExist), errors.Is(err, iofs.ErrNotExist):
		return fmt.Errorf("%s is being made, or removed, by another Backup to the same directory (its mark %s was made or removed meanwhile): wait for it to end, or choose another directory: %w: %w (%w)", dir, partialMark, Locked, iofs.ErrExist, err)
	}
	return fmt.Errorf("make and lock the mark %s of %s: %w", partialMark, dir, err)
}

// refuseLinks refuses a partial copy dir that is, or holds as "index", a
// symbolic link: Backup never makes one, and a link planted in a directory
// others can write would have the removal reach whatever it points to.
func refuseLinks(dir string) error {
	for _, d := range []string{dir, filepath.Join(dir, "index")} {
		link, err := vfs.IsLink(d)
		if err != nil {
			return err
		}
		if link {
			return fmt.Errorf("%s is a symbolic link, which a backup never makes: nothing is removed through it; remove it or choose another directory", d)
		}
	}
	return nil
}

// removePartial removes a backup in progress: its files, its index
// directory's files, the marker last, then the directories. It refuses
// when either directory is a symbolic link (see refuseLinks). The caller
// holds the lock on the mark.
func removePartial(fs vfs.FS, dir string) error {
	if err := refuseLinks(dir); err != nil {
		return err
	}
	for _, d := range []string{filepath.Join(dir, "index"), dir} {
		names, err := fs.ReadDir(d)
		if errors.Is(err, iofs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, n := range names {
			if n == "index" && d == dir || n == partialMark {
				continue
			}
			if err := fs.Remove(filepath.Join(d, n)); err != nil {
				return err
			}
		}
	}
	for _, p := range []string{filepath.Join(dir, "index"), filepath.Join(dir, partialMark), dir} {
		if err := fs.Remove(p); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return err
		}
	}
	return nil
}
