package wal

import (
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// alarm wakes the writer when a gather's deadline passes (see gather).
//
// A runtime timer alone cannot keep that deadline. When no goroutine of
// the process has work, the runtime waits for its next timer in
// epoll_wait, whose timeout counts whole milliseconds, so a timer due in
// 50 to 500 µs fires about a millisecond after it was set
// (BenchmarkDeadline). An idle process is exactly where a gather runs out:
// the callers it waits for are not coming, and every request it holds
// would wait that millisecond.
//
// So the alarm is also a timerfd: the same epoll_wait returns as soon as
// it expires. A goroutine parked on reading it (in the runtime's poller,
// holding no thread) wakes the writer. The runtime timer stays beside it
// for the busy process, where the runtime looks at its timers at every
// scheduling but at the poller only when a P runs out of work. Whichever
// comes first wakes the writer, once per deadline. Arming and disarming
// are done by the writer, one system call and one timer reset each, so a
// gather whose callers come in time costs the alarm goroutine nothing.
// Where no timerfd can be made (it is Linux's), the runtime timer is the
// alarm.
type alarm struct {
	timer *time.Timer // the runtime timer
	f     *os.File    // the timerfd, read through the runtime's poller; nil without one
	fd    int         // f's descriptor (File.Fd would make f blocking)
	// armed is the armed deadline in nanoseconds since born, or 0 once
	// it woke the writer or was cancelled. The first of the two clocks
	// to expire at or after it clears it and wakes the writer; an expiry
	// before it (of a deadline since replaced) leaves it armed.
	armed atomic.Int64
	born  time.Time
	wake  func()
	done  sync.WaitGroup
}

func startAlarm(wake func()) *alarm {
	a := startTimerAlarm(wake)
	fd, ok := newTimerfd()
	if !ok {
		return a
	}
	a.fd, a.f = fd, os.NewFile(uintptr(fd), "wal-alarm")
	a.done.Go(a.loop)
	return a
}

// startTimerAlarm makes an alarm on a runtime timer alone (what startAlarm
// falls back to).
func startTimerAlarm(wake func()) *alarm {
	a := &alarm{wake: wake, born: time.Now()}
	a.timer = time.AfterFunc(time.Hour, a.fire)
	a.timer.Stop()
	return a
}

// at arms the alarm to wake the writer at t, replacing any deadline set
// before; a t already passed wakes it at once. Arming it again for the
// deadline it holds, and has not yet woken the writer for, does nothing.
func (a *alarm) at(t time.Time) {
	deadline := max(1, int64(t.Sub(a.born))) // 0 means disarmed
	if a.armed.Load() == deadline {
		return
	}
	d := max(time.Until(t), time.Microsecond) // zero would disarm the timerfd
	a.armed.Store(deadline)
	a.timer.Reset(d)
	if a.f != nil {
		// Cannot fail with a valid descriptor and time; if it did, the
		// runtime timer would still wake the writer, only later.
		setTimerfd(a.fd, d)
	}
}

// cancel disarms the alarm: neither clock wakes the writer for the
// deadline it held, even one already expiring.
func (a *alarm) cancel() {
	if a.armed.Swap(0) == 0 {
		return
	}
	a.timer.Stop()
	if a.f != nil {
		setTimerfd(a.fd, 0)
	}
}

// stop disarms the alarm and ends its goroutine.
func (a *alarm) stop() {
	a.timer.Stop()
	if a.f == nil {
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
			a.fire()
		}
	}
}

// fire wakes the writer if a deadline is armed, has passed, and has not
// woken it yet. Both clocks read CLOCK_MONOTONIC, as time.Now does, so
// neither expires before the deadline it was set for: an expiry before
// the armed deadline is one of a deadline since replaced.
func (a *alarm) fire() {
	for {
		armed := a.armed.Load()
		if armed == 0 || int64(time.Since(a.born)) < armed {
			return
		}
		if a.armed.CompareAndSwap(armed, 0) {
			a.wake()
			return
		}
	}
}
