package main

import (
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
