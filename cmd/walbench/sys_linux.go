package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Magic numbers of statfs(2) f_type, from linux/magic.h.
var fsNames = map[uint32]string{
	0xEF53:     "ext4", // ext2 and ext3 have the same magic; ext4 is the one in use
	0x58465342: "xfs",
	0x9123683E: "btrfs",
	0x01021994: "tmpfs",
	0x2FC12FC1: "zfs",
	0xF2F52010: "f2fs",
	0x794C7630: "overlayfs",
	0x6969:     "nfs",
	0x65735546: "fuse",
	0x858458F6: "ramfs",
}

// fileSystem names the file system dir is on, and gives statfs's f_type
// in hex.
func fileSystem(dir string) (name, magic string) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Sprintf("unknown (statfs: %v)", err), ""
	}
	// f_type is a 32-bit magic in a field whose width varies by
	// architecture.
	m := uint32(st.Type)
	if name = fsNames[m]; name == "" {
		name = "unknown"
	}
	return name, fmt.Sprintf("0x%x", m)
}

// loadAvg is the 1, 5 and 15 minute load averages; zeros where unknown.
func loadAvg() (avg [3]float64) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil {
		const loadScale = 1 << 16 // SI_LOAD_SHIFT
		for i := range avg {
			avg[i] = float64(si.Loads[i]) / loadScale
		}
	}
	return avg
}

// termiosRequest is the ioctl that reads a terminal's settings.
const termiosRequest = unix.TCGETS

// availableMemory is the memory this machine can give walbench now:
// /proc/meminfo's MemAvailable, or less where walbench's cgroup (a
// container's) has a limit closer than that.
func availableMemory() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	avail, err := memInfoAvailable(string(b))
	if err != nil {
		return 0, err
	}
	if room, ok := cgroupRoom(os.ReadFile); ok {
		avail = min(avail, room)
	}
	return avail, nil
}
