//go:build !(linux || darwin)

package vfs

// The store needs a Unix file system: flock(2), a directory fsync that
// makes a rename durable, and a sync that reaches the device. Elsewhere
// the build fails here, with this text, rather than on a missing system
// call.
var _ int = "walbroker builds on Linux and macOS only"
