package wal

import (
	"encoding/binary"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// alarm wakes the writer when a gather's deadline passes (see gather).
//
// A runtime timer cannot keep that deadline. When no goroutine of the
// process has work, the runtime waits for its next timer in epoll_wait,
// whose timeout counts whole milliseconds, so a timer due in 50 to 500 µs
// fires about a millisecond after it was set (BenchmarkDeadline). An idle
// process is exactly where a gather runs out: the callers it waits for
// are not coming, and every request it holds would wait that millisecond.
//
// The alarm is a timerfd instead: the same epoll_wait returns as soon as
// it expires. A goroutine parked on reading it (in the runtime's poller,
// holding no thread) wakes the writer; setting, moving and cancelling the
// deadline are one system call each, made by the writer, so a gather
// whose callers come in time costs the alarm goroutine nothing. Where no
// timerfd can be made, the alarm falls back to a runtime timer, late as it
// is.
type alarm struct {
	f     *os.File    // the timerfd, read through the runtime's poller; nil for the fallback
	fd    int         // f's descriptor (File.Fd would make f blocking)
	timer *time.Timer // the fallback
	set   bool        // a deadline is armed, ...
	when  time.Time   // ... this one (both the writer's)
	wake  func()
	done  sync.WaitGroup
}

func startAlarm(wake func()) *alarm {
	a := &alarm{wake: wake}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return startTimerAlarm(wake)
	}
	a.fd, a.f = fd, os.NewFile(uintptr(fd), "wal-alarm")
	a.done.Go(a.loop)
	return a
}

// startTimerAlarm makes the fallback alarm, on a runtime timer.
func startTimerAlarm(wake func()) *alarm {
	a := &alarm{wake: wake, timer: time.AfterFunc(time.Hour, wake)}
	a.timer.Stop()
	return a
}

// at arms the alarm to wake the writer at t, replacing any deadline set
// before; a t already passed wakes it at once. Arming it again for the
// deadline it holds does nothing.
func (a *alarm) at(t time.Time) {
	if a.set && t.Equal(a.when) {
		return
	}
	d := max(time.Until(t), time.Microsecond) // zero would disarm it
	a.set, a.when = true, t
	if a.f == nil {
		a.timer.Reset(d)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(a.fd, 0, &spec, nil); err != nil {
		// Cannot happen with a valid fd and time; wake the writer now
		// rather than never: it looks again and sets the alarm again.
		a.wake()
	}
}

// cancel disarms the alarm. An expiry already on its way may still wake
// the writer once; the writer treats every wake-up as a reason to look.
func (a *alarm) cancel() {
	if !a.set {
		return
	}
	a.set = false
	if a.f == nil {
		a.timer.Stop()
		return
	}
	_ = unix.TimerfdSettime(a.fd, 0, &unix.ItimerSpec{}, nil)
}

// stop ends the alarm goroutine.
func (a *alarm) stop() {
	if a.f == nil {
		a.timer.Stop()
		return
	}
	_ = a.f.Close() // ends the goroutine's read
	a.done.Wait()
}

// loop wakes the writer at each expiry of the timerfd, until it is closed.
func (a *alarm) loop() {
	var buf [8]byte // the count of expiries since the last read
	for {
		n, err := a.f.Read(buf[:])
		if err != nil {
			return
		}
		if n == len(buf) && binary.NativeEndian.Uint64(buf[:]) > 0 {
			a.wake()
		}
	}
}
