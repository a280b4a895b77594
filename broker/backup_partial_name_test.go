package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// Backup refuses to touch a dir+".partial" that is a symbolic link: one to
// nothing (planted in a shared directory, or left by someone else) too.
// ReadDir follows a link, and one to nothing reads as absent: the Backup
// used to go on, fail to make the name (EEXIST), and remove the link as an
// empty directory of its own. It is refused with an error that says it is
// a symbolic link, and left where it is.
func TestABackupRefusesADanglingLinkAtItsPartialName(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	mustPublish(t, e.queue("jobs", keyedJobs), "one")
	shared := t.TempDir()
	dst := filepath.Join(shared, "nightly")
	target := filepath.Join(t.TempDir(), "not-yet")
	if err := os.Symlink(target, dst+".partial"); err != nil {
		t.Fatal(err)
	}

	err := e.s.Backup(ctx(t), dst)
	t.Logf("Backup: %v", err)
	if _, lerr := os.Lstat(dst + ".partial"); lerr != nil {
		t.Errorf("Backup removed the symbolic link %s it did not make (a .partial that is a symbolic link is to be left alone): Lstat now says %v", dst+".partial", lerr)
	}
	if err == nil {
		t.Fatalf("Backup to %s succeeded through a planted symbolic link %s -> %s", dst, dst+".partial", target)
	}
	if !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), dst+".partial") {
		t.Errorf("Backup's error does not say that %s is a symbolic link: %v", dst+".partial", err)
	}
	if _, serr := os.Lstat(target); serr == nil {
		t.Errorf("Backup made %s, the link's target", target)
	}
}

// A Backup that fails while making its partial copy removes only what it
// made, an empty directory: a regular file someone else makes at
// dir+".partial" between the Backup's look (absent) and its mkdir is left
// where it is (the removal used to be os.Remove, which unlinks a file as
// readily), and the error says what stands there. The file is made from
// an observer of the FaultFS, when MkdirAllDurable lists the parent, just
// before its MkdirAll.
func TestAFailedBackupLeavesAFileSomeoneMadeAtItsPartialName(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS = ffs })
	mustPublish(t, e.queue("jobs", keyedJobs), "one")
	shared := t.TempDir()
	dst := filepath.Join(shared, "nightly")
	var planted atomic.Bool
	ffs.Observe(func(ev vfs.Event) {
		if ev.Op == vfs.OpReadDir && filepath.Clean(ev.Name) == shared && planted.CompareAndSwap(false, true) {
			if err := os.WriteFile(dst+".partial", []byte("someone else's"), 0o600); err != nil {
				t.Error(err)
			}
		}
	})

	err := e.s.Backup(ctx(t), dst)
	t.Logf("Backup: %v", err)
	if !planted.Load() {
		t.Fatal("the file was never planted: the test no longer reaches the window")
	}
	if err == nil {
		t.Fatalf("Backup succeeded although %s was a regular file", dst+".partial")
	}
	data, rerr := os.ReadFile(dst + ".partial")
	if rerr != nil {
		t.Errorf("the failed Backup deleted %s, a regular file it did not make (it removes only an empty directory it made): %v", dst+".partial", rerr)
	} else if string(data) != "someone else's" {
		t.Errorf("%s now holds %q", dst+".partial", data)
	}
	if !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("Backup's error does not say that %s is not a directory: %v", dst+".partial", err)
	}
}

// A backup named "x.partial" would look like an unfinished copy of a
// Backup to "x" whenever it keeps its mark (its removal failed, which
// Backup reports only in a log, or the power went just after the rename):
// a later Backup to "x", of any store, took it for its own leftover and
// removed it. Such a name is refused, in any case, before anything is
// made, with an error that names the suffix; the name ".partial" alone,
// the partial copy of no other name, is not.
func TestABackupToANameEndingInPartialIsRefused(t *testing.T) {
	e, _, _ := faultyBackupEnv(t)
	root := t.TempDir()
	for _, name := range []string{"x.partial", "x.PARTIAL", "x.partial/"} {
		dst := root + string(filepath.Separator) + name // Join drops a trailing "/"
		err := e.s.Backup(ctx(t), dst)
		if err == nil {
			t.Fatalf("a Backup to %s succeeded: a Backup to %s would take it for an unfinished copy and remove it", dst, filepath.Join(root, "x"))
		}
		if !strings.Contains(strings.ToLower(err.Error()), `ends in ".partial"`) {
			t.Errorf("the refusal of a Backup to %s does not say why: %v", dst, err)
		}
		if _, serr := os.Lstat(filepath.Join(root, strings.TrimSuffix(name, "/"))); serr == nil {
			t.Errorf("the refused Backup to %s made it", dst)
		}
	}
	for _, name := range []string{"x", ".partial", "x.partial.d"} {
		dst := filepath.Join(root, name)
		if err := e.s.Backup(ctx(t), dst); err != nil {
			t.Errorf("a Backup to %s: %v", dst, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "x", "index", "checkpoint")); err != nil {
		t.Errorf("the Backup to %s left no copy: %v", filepath.Join(root, "x"), err)
	}
}
