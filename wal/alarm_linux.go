package wal

import (
	"time"

	"golang.org/x/sys/unix"
)

// newTimerfd makes a non-blocking timerfd on CLOCK_MONOTONIC, disarmed.
func newTimerfd() (fd int, ok bool) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	return fd, err == nil
}

// setTimerfd arms the timerfd fd to expire once, d from now, or disarms it
// when d is 0. It cannot fail with a valid descriptor and duration; if it
// did, the runtime timer would still wake the writer, only later.
func setTimerfd(fd int, d time.Duration) {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	_ = unix.TimerfdSettime(fd, 0, &spec, nil)
}
