package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Machine is what the figures depend on besides the code: the facts printed
// under the tables and written as "machine" in the JSON.
type Machine struct {
	Date       string `json:"date"` // RFC 3339, UTC, when the run started
	NumCPU     int    `json:"num_cpu"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	GoVersion  string `json:"go_version"`
	Kernel     string `json:"kernel"`
	Filesystem string `json:"filesystem"`
	FSMagic    string `json:"fs_magic"` // statfs f_type, hex
	// Device is the block device the directory's file system is mounted
	// from, and WriteCache what its queue/write_cache says ("write back":
	// the device acknowledges writes before they are stable, and an
	// fdatasync must flush its cache); "" where unknown.
	Device     string `json:"device"`
	WriteCache string `json:"write_cache"`
	// LoadAvg is the 1, 5 and 15 minute load averages when the run
	// started: how busy the machine already was.
	LoadAvg [3]float64 `json:"load_avg"`
	Dir     string     `json:"dir"` // the temporary directory used
	// DirLeft is why Dir could not be removed at the end of the run; ""
	// when it was removed.
	DirLeft string `json:"dir_left,omitempty"`
}

// inMemory returns the file system of m when it keeps its files in memory
// (tmpfs, ramfs), "" for any other: an fdatasync there reaches no device.
func inMemory(m Machine) string {
	switch m.Filesystem {
	case "tmpfs", "ramfs":
		return m.Filesystem
	}
	return ""
}

// memoryWarning says what a run on fs, a file system that keeps its files
// in memory, measured.
func memoryWarning(fs string) string {
	return fmt.Sprintf("warning: the directory is on %s, which keeps files in memory: an fdatasync there reaches no device, so these figures are the CPU's, not a disk's, and a store there loses everything at a reboot; run walbench with -dir on the disk the store will use", fs)
}

// memoryOnly is the warning for a run on m's file system, "" unless it
// keeps its files in memory.
func memoryOnly(m Machine) string {
	if fs := inMemory(m); fs != "" {
		return memoryWarning(fs)
	}
	return ""
}

// describeMachine collects the facts about this machine and dir.
func describeMachine(dir string, now time.Time) Machine {
	m := Machine{
		Date:      now.UTC().Format(time.RFC3339),
		NumCPU:    runtime.NumCPU(),
		GOOS:      runtime.GOOS,
		GOARCH:    runtime.GOARCH,
		GoVersion: runtime.Version(),
		Dir:       dir,
	}
	m.Filesystem, m.FSMagic = fileSystem(dir)
	m.Kernel = kernel()
	m.LoadAvg = loadAvg()
	// mountinfo names the places mounted on without links: dir is looked
	// up as the kernel resolves it.
	where := dir
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		where = r
	}
	m.Device = mountSource(where)
	m.WriteCache = writeCache(m.Device)
	return m
}

// mountSource is the source of the mount dir is on, from
// /proc/self/mountinfo: the mount whose mount point is the longest prefix
// of dir. "" if it cannot be told.
func mountSource(dir string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	return mountSourceIn(f, dir)
}

// mountSourceIn is mountSource over a mountinfo table read from r. A
// mount made over a place hides what was mounted there or below before
// it (the table lists mounts in the order they were made, and keeps the
// hidden ones); of the mounts left whose point holds dir, the one with
// the longest point counts.
func mountSourceIn(r io.Reader, dir string) string {
	type mount struct{ point, source string }
	var mounts []mount
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		mounts = append(mounts, mount{unescapeMount(fields[4]), unescapeMount(fields[sep+2])})
	}
	within := func(path, point string) bool {
		return path == point || strings.HasPrefix(path, strings.TrimSuffix(point, "/")+"/")
	}
	best, source := -1, ""
	for i, m := range mounts {
		hidden := slices.ContainsFunc(mounts[i+1:], func(later mount) bool { return within(m.point, later.point) })
		if !hidden && within(dir, m.point) && len(m.point) > best {
			best, source = len(m.point), m.source
		}
	}
	return source
}

// unescapeMount undoes the kernel's escapes in a mountinfo field: a
// space, tab, newline or backslash is written as a backslash and three
// octal digits.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// writeCache is what /sys says of the write cache of the block device
// dev ("/dev/vda", or a partition of it); "" if it does not say.
func writeCache(dev string) string {
	if !strings.HasPrefix(dev, "/dev/") {
		return ""
	}
	sys, err := filepath.EvalSymlinks(filepath.Join("/sys/class/block", filepath.Base(dev)))
	if err != nil {
		return ""
	}
	// A partition's directory lies in its disk's, which has the queue.
	for _, d := range []string{sys, filepath.Dir(sys)} {
		if b, err := os.ReadFile(filepath.Join(d, "queue", "write_cache")); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// kernel is the kernel's name and release.
func kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
}

// freeBytes is how many bytes an unprivileged process may still write on
// the file system dir is on.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
