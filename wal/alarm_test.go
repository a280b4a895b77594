package wal

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// alarmKinds are the two alarms: the timerfd the writer uses, and the
// runtime timer it falls back to where no timerfd can be made.
var alarmKinds = map[string]func(wake func()) *alarm{
	"timerfd":  startAlarm,
	"fallback": startTimerAlarm,
}

// An alarm wakes its owner once per deadline and never before it, even a
// deadline already passed; arming it again replaces the deadline, and a
// cancelled one does not wake the owner.
func TestAlarm(t *testing.T) {
	for kind, start := range alarmKinds {
		t.Run(kind, func(t *testing.T) {
			woke := make(chan time.Time, 4)
			a := start(func() { woke <- time.Now() })
			defer a.stop()
			if kind == "timerfd" && runtime.GOOS == "linux" {
				require.NotNil(t, a.f, "Linux makes timerfds: the test must cover them")
			}
			quiet := func(what string) {
				t.Helper()
				select {
				case <-woke:
					t.Fatal(what)
				case <-time.After(20 * time.Millisecond):
				}
			}
			wokeAfter := func(deadline time.Time) {
				t.Helper()
				select {
				case at := <-woke:
					require.False(t, at.Before(deadline), "woken %v before its deadline", deadline.Sub(at))
				case <-time.After(time.Minute):
					t.Fatal("no wake-up at the deadline")
				}
			}

			for _, d := range []time.Duration{-time.Millisecond, 0, 300 * time.Microsecond, 5 * time.Millisecond} {
				deadline := time.Now().Add(d)
				a.at(deadline)
				wokeAfter(deadline)
			}
			quiet("a deadline woke its owner twice")

			// The cases below need the test's next step to run before a
			// deadline 20 ms away; a machine that stalls longer is given
			// another try.
			inTime := func(what string, try func() bool) {
				t.Helper()
				for range 5 {
					if try() {
						return
					}
					time.Sleep(50 * time.Millisecond)
					for len(woke) > 0 {
						<-woke
					}
				}
				t.Fatalf("%s: the machine never ran the test's steps within 20 ms", what)
			}
			inTime("arming twice", func() bool {
				deadline := time.Now().Add(20 * time.Millisecond)
				a.at(deadline)
				a.at(deadline) // what the writer does when woken early
				if !time.Now().Before(deadline) {
					return false
				}
				wokeAfter(deadline)
				quiet("a deadline armed twice woke its owner twice")
				return true
			})
			inTime("replacing", func() bool {
				first := time.Now().Add(20 * time.Millisecond)
				a.at(first)
				later := time.Now().Add(40 * time.Millisecond)
				a.at(later)
				if !time.Now().Before(first) {
					return false
				}
				wokeAfter(later)
				quiet("a replaced deadline woke its owner too")
				return true
			})
			inTime("cancelling", func() bool {
				deadline := time.Now().Add(20 * time.Millisecond)
				a.at(deadline)
				a.cancel()
				if !time.Now().Before(deadline) {
					return false
				}
				quiet("a cancelled deadline woke its owner")
				return true
			})
		})
	}
}

// A gather that its callers let lapse ends at its deadline, not before,
// reports that they did not come, and leaves the requests it held queued
// for the writer to take. The test drives gather directly on a log with no
// writer goroutine.
func TestGatherRunsOutAtItsDeadline(t *testing.T) {
	l := &Log{kick: make(chan struct{}, 1), open: newBatch(nil)}
	alarm := startAlarm(l.wake)
	defer alarm.stop()
	l.w.gather, l.w.gatherFrom = 4, 0
	l.w.gatherAt, l.w.gatherFor = time.Now(), 3*time.Millisecond
	l.hold = 4
	deadline := l.w.gatherAt.Add(l.w.gatherFor)
	l.enqueue(&queued{r: request{recs: [][]byte{[]byte("r")}, pos: make([]Position, 1), sync: true}})
	require.Empty(t, l.kick, "an append while the writer gathers does not wake it")

	came := make(chan bool, 1)
	go func() { came <- l.gather(alarm) }()
	select {
	case ok := <-came:
		require.False(t, ok, "one request of the four awaited came: the gather ran out")
		require.False(t, time.Now().Before(deadline), "the gather ended before its deadline")
	case <-time.After(time.Minute):
		t.Fatal("the gather did not end at its deadline")
	}
	require.Len(t, l.open.reqs, 1, "the held request stays queued for the writer")
	require.Zero(t, l.hold, "after the gather every request wakes the writer again")
}

// BenchmarkDeadline measures how late a wait for a deadline 200 µs away
// ends in a process that has nothing else to do: the writer's gather when
// the callers it waits for do not come. timer waits on a runtime timer,
// alarm on the log's alarm (a timerfd), which the gather uses because of
// what timer reports. It reports the median and the 90th percentile of
// the delay past the deadline:
//
//	go test ./wal -run XXX -bench Deadline
func BenchmarkDeadline(b *testing.B) {
	b.Run("wait=timer", func(b *testing.B) {
		benchmarkDeadline(b, func(deadline time.Time) {
			<-time.NewTimer(time.Until(deadline)).C
		})
	})
	b.Run("wait=alarm", func(b *testing.B) {
		woke := make(chan struct{}, 1)
		a := startAlarm(func() { woke <- struct{}{} })
		defer a.stop()
		if a.f == nil {
			b.Skip("no timerfd here: the alarm is a runtime timer")
		}
		benchmarkDeadline(b, func(deadline time.Time) {
			a.at(deadline)
			<-woke
		})
	})
}

func benchmarkDeadline(b *testing.B, wait func(deadline time.Time)) {
	late := make([]time.Duration, 0, b.N)
	for b.Loop() {
		deadline := time.Now().Add(deadlineAhead)
		wait(deadline)
		late = append(late, time.Since(deadline))
	}
	slices.Sort(late)
	b.ReportMetric(float64(late[len(late)/2].Microseconds()), "late-us")
	b.ReportMetric(float64(late[len(late)*9/10].Microseconds()), "p90-late-us")
}

const deadlineAhead = 200 * time.Microsecond
