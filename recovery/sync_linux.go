package recovery

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncData is fdatasync(2), as the store's own files get.
func syncData(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
