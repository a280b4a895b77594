package main

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// fileSystem names the file system dir is on (statfs's f_fstypename,
// "apfs" say); f_type is not a magic here, so none is given.
func fileSystem(dir string) (name, magic string) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Sprintf("unknown (statfs: %v)", err), ""
	}
	name = unix.ByteSliceToString(st.Fstypename[:])
	if name == "" {
		name = "unknown"
	}
	return name, ""
}

// loadAvg is the 1, 5 and 15 minute load averages: zeros here, where no
// portable call gives them.
func loadAvg() (avg [3]float64) { return avg }

// termiosRequest is the ioctl that reads a terminal's settings.
const termiosRequest = unix.TIOCGETA

// availableMemory is not told on macOS: it has no figure like Linux's
// MemAvailable (its free pages leave out the file cache it would give
// back, and would refuse settings that fit), so walbench does not check
// a workload's memory there.
func availableMemory() (int64, error) {
	return 0, errors.ErrUnsupported
}
