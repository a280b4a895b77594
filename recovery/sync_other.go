//go:build !linux

package recovery

import "os"

// syncData is what the operating system offers (os.File.Sync: fsync, or
// F_FULLFSYNC on macOS).
func syncData(f *os.File) error { return f.Sync() }
