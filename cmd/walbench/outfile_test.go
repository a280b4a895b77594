package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/walbroker/walbroker/vfs"
)

// The -json file is replaced whole when the run ends, through a temporary
// file beside it, or left as it was: these tests run the probe alone, for
// 10 ms, to have something to write.

// probeArgs runs the probe alone, briefly, under dir, writing -json to
// jsonFile.
func probeArgs(dir, jsonFile string) []string {
	return []string{"probe", "-time", "10ms", "-dir", dir, "-json", jsonFile}
}

// TestJSONReplacesEarlierFile: a run replaces the file at its -json path
// with its report, keeps its permissions, says on stderr that it does, and
// leaves nothing beside it.
func TestJSONReplacesEarlierFile(t *testing.T) {
	jsonFile := jsonPath(t)
	if err := os.WriteFile(jsonFile, []byte("PRECIOUS\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(jsonFile, 0o640); err != nil {
		t.Fatal(err)
	}
	dir := benchDir(t)
	res := runOK(t, probeArgs(dir, jsonFile)...)
	assertTablesFromJSON(t, res.stdout, jsonFile)
	for _, want := range []string{"-json " + jsonFile + " exists: this run's report will replace it", "-json " + jsonFile + ": replaced by this run's report"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr does not say %q", want)
		}
	}
	if fi, err := os.Stat(jsonFile); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the replaced file: %v, %v; want mode 0640, as the earlier one", fi.Mode(), err)
	}
	assertDirEmptyBut(t, filepath.Dir(jsonFile), filepath.Base(jsonFile))
	assertDirEmpty(t, dir)

	// A new file is made without a word.
	jsonFile = jsonPath(t)
	res = runOK(t, probeArgs(dir, jsonFile)...)
	assertTablesFromJSON(t, res.stdout, jsonFile)
	if strings.Contains(res.stderr, "-json") {
		t.Errorf("stderr mentions the new -json file: %q", res.stderr)
	}
}

// TestJSONThroughSymlink: a -json path that is a symbolic link replaces
// the file it points to and keeps the link; a run that measures nothing
// leaves both as they were.
func TestJSONThroughSymlink(t *testing.T) {
	root := t.TempDir()
	target, link := filepath.Join(root, "target.txt"), filepath.Join(root, "link.json")
	if err := os.WriteFile(target, []byte("PRECIOUS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target.txt", link); err != nil {
		t.Fatal(err)
	}
	checkLink := func(what string) {
		t.Helper()
		if dest, err := os.Readlink(link); err != nil || dest != "target.txt" {
			t.Errorf("%s: the link is %q, %v; want it to point to target.txt still", what, dest, err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := benchDir(t)
	if res := runWith(t, ctx, nil, probeArgs(dir, link)...); res.code != exitInterrupted {
		t.Errorf("interrupted: exit %d, want %d", res.code, exitInterrupted)
	}
	checkLink("interrupted")
	if b, err := os.ReadFile(target); err != nil || string(b) != "PRECIOUS\n" {
		t.Errorf("interrupted: the file the link points to holds %q, %v; want it as it was", b, err)
	}

	res := runOK(t, probeArgs(dir, link)...)
	checkLink("written")
	assertTablesFromJSON(t, res.stdout, target)
	assertDirEmptyBut(t, root, "target.txt", "link.json")
}

// TestJSONNotRegularRefused: a -json path that is a named pipe, a
// directory or a link to nothing is refused before anything is measured,
// naming the path and what it is, and left as it was.
func TestJSONNotRegularRefused(t *testing.T) {
	root := t.TempDir()
	fifo, dangling := filepath.Join(root, "pipe.json"), filepath.Join(root, "dangling.json")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere.json", dangling); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{
		{fifo, "is a named pipe, not a regular file"},
		{root, "is a directory"},
		{dangling, "is a symbolic link to nowhere.json, which does not exist"},
	} {
		dir := benchDir(t)
		res := runWith(t, context.Background(), nil, probeArgs(dir, tc.name)...)
		if res.code != exitError || res.stdout != "" || !strings.Contains(res.stderr, "-json "+tc.name+": "+tc.want) {
			t.Errorf("-json %s: exit %d, stdout %q, stderr %q; want %d, nothing measured, and %q", tc.name, res.code, res.stdout, res.stderr, exitError, tc.want)
		}
		assertDirEmpty(t, dir)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the named pipe: %v, %v; want it there still", fi, err)
	}
	if _, err := os.Lstat(dangling); err != nil {
		t.Errorf("the dangling link is gone: %v", err)
	}
	assertDirEmptyBut(t, root, "pipe.json", "dangling.json")
}

// TestJSONDiskFull: a full disk when the temporary file is made ends the
// run before anything is measured; when the report is written into it,
// the run says so and exits 1. Either way the earlier file is left as it
// was, and nothing beside it.
func TestJSONDiskFull(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpOpen, vfs.OpWrite, vfs.OpSync, vfs.OpRename} {
		t.Run(op.String(), func(t *testing.T) {
			jsonFile := jsonPath(t)
			if err := os.WriteFile(jsonFile, []byte("PRECIOUS\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			fs := vfs.NewFaultFS(vfs.Default)
			fs.Inject(vfs.Rule{Op: op, Err: syscall.ENOSPC})
			dir := benchDir(t)
			res := runWith(t, context.Background(), &env{outFS: fs}, probeArgs(dir, jsonFile)...)
			// Refused up front, the file is not in question yet.
			saysKept := op == vfs.OpOpen || strings.Contains(res.stderr, "the file that was there is left as it was")
			if res.code != exitError || !strings.Contains(res.stderr, "-json "+jsonFile+": ") || !strings.Contains(res.stderr, syscall.ENOSPC.Error()) || !saysKept {
				t.Errorf("exit %d, stderr %q; want %d, the path, the error and that the earlier file is kept", res.code, res.stderr, exitError)
			}
			if measured := res.stdout != ""; measured != (op != vfs.OpOpen) {
				t.Errorf("stdout %q: a -json path that cannot be written must end the run before the measuring, and only then", res.stdout)
			}
			if b, err := os.ReadFile(jsonFile); err != nil || string(b) != "PRECIOUS\n" {
				t.Errorf("the earlier file holds %q, %v; want it as it was", b, err)
			}
			assertDirEmptyBut(t, filepath.Dir(jsonFile), filepath.Base(jsonFile))
			assertDirEmpty(t, dir)
		})
	}
}

// TestReplacedFileKeepsBitsTheUmaskClears: the file that replaces another
// has its permission bits, also those the umask clears from a new file.
func TestReplacedFileKeepsBitsTheUmaskClears(t *testing.T) {
	defer unix.Umask(unix.Umask(0o022))
	name := filepath.Join(t.TempDir(), "bench.json")
	if err := os.WriteFile(name, []byte("PRECIOUS\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := replaceFile(vfs.Default, name, []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(name); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("the replaced file: %v, %v; want mode 0666, as the earlier one, whatever the umask", fi.Mode(), err)
	}
}

// TestReplacedDespiteAFailedDirectorySync: when the sync of the directory
// fails after the rename, the file is replaced (if perhaps not durably):
// the error says so, and nothing says the earlier file was left as it
// was.
func TestReplacedDespiteAFailedDirectorySync(t *testing.T) {
	name := filepath.Join(t.TempDir(), "bench.json")
	if err := os.WriteFile(name, []byte("PRECIOUS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpSyncDir, Err: syscall.EIO})
	p, err := newPendingFile(fs, name)
	if err != nil {
		t.Fatal(err)
	}
	err = p.commit([]byte("{}\n"))
	if err == nil || !strings.Contains(err.Error(), "written, but the sync of its directory failed") {
		t.Errorf("commit: %v; want the failed sync of the directory, after the file was written", err)
	}
	if said := p.untouched(); said != "" {
		t.Errorf("says %q of a file it replaced", said)
	}
	if b, err := os.ReadFile(name); err != nil || string(b) != "{}\n" {
		t.Errorf("the file holds %q, %v; want the new content", b, err)
	}
	assertDirEmptyBut(t, filepath.Dir(name), "bench.json")
}
