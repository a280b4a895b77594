package main

import (
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// machine is what the figures depend on besides the code: the facts printed
// under the table and written as "machine" in the JSON.
type machine struct {
	Date       string `json:"date"` // RFC 3339, UTC
	NumCPU     int    `json:"num_cpu"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	GoVersion  string `json:"go_version"`
	Kernel     string `json:"kernel"`
	Filesystem string `json:"filesystem"`
	FSMagic    string `json:"fs_magic"` // statfs f_type, hex
	Dir        string `json:"dir"`
}

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

// describeMachine collects the facts about this machine and dir.
func describeMachine(dir string, now time.Time) machine {
	m := machine{
		Date:      now.UTC().Format(time.RFC3339),
		NumCPU:    runtime.NumCPU(),
		GOOS:      runtime.GOOS,
		GOARCH:    runtime.GOARCH,
		GoVersion: runtime.Version(),
		Dir:       dir,
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		m.Filesystem = fmt.Sprintf("unknown (statfs: %v)", err)
	} else {
		// f_type is a 32-bit magic in a field whose width varies by
		// architecture.
		magic := uint32(st.Type)
		m.FSMagic = fmt.Sprintf("0x%x", magic)
		m.Filesystem = fsNames[magic]
		if m.Filesystem == "" {
			m.Filesystem = "unknown"
		}
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
	}
	return m
}
