// Package leakcheck finds what a closed log or store left behind in the
// process: goroutines running this module's code, and open descriptors or
// memory mappings of files in a directory. Tests use it to hold Close to
// its word that it releases everything; a program that opens and closes
// stores for as long as it runs would otherwise grow without bound.
package leakcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/walbroker/walbroker/vfs"
)

// module is the prefix of this module's functions in a goroutine's stack.
const module = "github.com/walbroker/walbroker/"

// Goroutines is a set of goroutines, by the ID the runtime gives them.
type Goroutines map[string]string // ID → its stack

// Running returns the goroutines running now, other than the caller.
func Running() Goroutines {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	gs := Goroutines{}
	for i, block := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 { // the caller's own goroutine comes first
			continue
		}
		header, _, _ := bytes.Cut(block, []byte("\n"))
		fields := strings.Fields(string(header)) // "goroutine 17 [chan receive]:"
		if len(fields) < 2 || fields[0] != "goroutine" {
			continue
		}
		gs[fields[1]] = string(block)
	}
	return gs
}

// Since returns the goroutines running now that were not in before and run
// this module's code (a frame of it, or created by it), other than tests'
// own goroutines.
func Since(before Goroutines) []string {
	var left []string
	for id, stack := range Running() {
		if _, ok := before[id]; ok {
			continue
		}
		if !strings.Contains(stack, module) || strings.Contains(stack, "testing.tRunner") {
			continue
		}
		left = append(left, stack)
	}
	slices.Sort(left)
	return left
}

// Files returns the descriptors this process holds open, and the memory
// mappings it has, of files in dir or below it. It reads them from /proc:
// where there is none (macOS), it finds none, and only goroutines are
// checked.
func Files(dir string) ([]string, error) {
	if _, err := os.Stat("/proc/self/fd"); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		dir = resolved
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("leakcheck: %w", err)
	} else if dir, err = filepath.Abs(dir); err != nil { // a directory never made
		return nil, fmt.Errorf("leakcheck: %w", err)
	}
	under := func(path string) bool {
		return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
	}
	var held []string
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("leakcheck: %w", err)
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && under(strings.TrimSuffix(target, " (deleted)")) {
			held = append(held, "descriptor "+fd.Name()+": "+target)
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("leakcheck: %w", err)
	}
	for line := range strings.Lines(string(maps)) {
		// address perms offset dev inode path
		fields := strings.Fields(line)
		if len(fields) >= 6 {
			path := strings.TrimSuffix(strings.Join(fields[5:], " "), " (deleted)")
			if under(path) {
				held = append(held, "mapping "+fields[0]+": "+path)
			}
		}
	}
	return held, nil
}

// grace is how long Check waits for goroutines to end: one that has just
// told Close it is done may still be on its way out.
var grace = 5 * time.Second

// Check returns an error naming every descriptor and mapping of a file
// under dir, and every goroutine started since before that still runs this
// module's code once grace has passed. Call it after Close returned: the
// files must be released by then.
func Check(before Goroutines, dir string) error {
	files, err := Files(dir)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(grace)
	gs := Since(before)
	for len(gs) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		gs = Since(before)
	}
	if len(gs) == 0 && len(files) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "left behind: %d goroutines (of this module), %d descriptors or mappings", len(gs), len(files))
	for _, f := range files {
		b.WriteString("\n" + f)
	}
	for _, g := range gs {
		b.WriteString("\n\n" + g)
	}
	return fmt.Errorf("leakcheck: %s", b.String())
}

// FailedOpens fails, one attempt at a time, each file operation an open
// makes: each call alone, and each call with every later call of its
// kind. counted is the FaultFS one open (and its close) ran through, which
// says how many calls of each kind there are. open opens a fresh copy of
// what is being opened through fs and returns its directory, and what it
// opened or the open's error; what opened is closed (not every failure
// refuses an open). After each attempt nothing may be left behind (see
// Check), and the directory is removed. FailedOpens returns how many
// attempts the open refused, or an error naming the first that left
// something behind.
func FailedOpens(counted *vfs.FaultFS, open func(fs vfs.FS) (dir string, opened io.Closer, err error)) (refused int, err error) {
	for op := vfs.OpOpen; op <= vfs.OpWriteBack; op++ {
		for nth := int64(1); nth <= counted.Count(op); nth++ {
			for _, rule := range []vfs.Rule{{Op: op, Nth: nth}, {Op: op, After: nth - 1}} {
				before := Running()
				fs := vfs.NewFaultFS(vfs.Default)
				fs.Inject(rule)
				dir, opened, oerr := open(fs)
				if oerr == nil {
					_ = opened.Close()
				} else {
					refused++
				}
				if err := Check(before, dir); err != nil {
					return refused, fmt.Errorf("%s, the open returning %v: %w", failed(rule), oerr, err)
				}
				if err := os.RemoveAll(dir); err != nil {
					return refused, fmt.Errorf("leakcheck: %w", err)
				}
			}
		}
	}
	return refused, nil
}

// failed says which calls rule, one of FailedOpens', failed.
func failed(rule vfs.Rule) string {
	if rule.Nth != 0 {
		return fmt.Sprintf("%v #%d failed", rule.Op, rule.Nth)
	}
	return fmt.Sprintf("%v #%d and every one after it failed", rule.Op, rule.After+1)
}
