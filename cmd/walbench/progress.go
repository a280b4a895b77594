package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"
)

// progress tells the operator on stderr how far a long step is: a progress
// bar redrawn in place when stderr is a terminal, otherwise (a log file, a
// CI job) a plain line every few seconds. A step shorter than quiet shows
// nothing. Safe for concurrent use.
type progress struct {
	w     io.Writer
	tty   bool
	quiet time.Duration // steps shorter than this show nothing
	every time.Duration // between two plain lines of a step
	poll  time.Duration // between two looks at a step's count

	mu sync.Mutex // serialises what is written to w
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w), quiet: 2 * time.Second, every: 2 * time.Second, poll: 200 * time.Millisecond}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), termiosRequest)
	return err == nil
}

// printf writes one line between the steps' lines.
func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// track shows the progress of the step label until the returned stop is
// called: count returns how far it is, out of total (0: unknown), and
// format says it in words ("2s/3s", "5000/20000 messages").
func (p *progress) track(label string, total int64, count func() int64, format func(n int64) string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		lastLine := start
		var bar *progressbar.ProgressBar
		ticker := time.NewTicker(p.poll)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				if bar != nil {
					p.mu.Lock()
					_ = bar.Finish() // clears the line
					p.mu.Unlock()
				}
				return
			case now := <-ticker.C:
				if now.Sub(start) < p.quiet {
					continue
				}
				n := count()
				if total > 0 && n >= total {
					continue // done: nothing left to tell
				}
				p.mu.Lock()
				switch {
				case p.tty && bar == nil:
					limit := total
					if limit <= 0 {
						limit = -1 // a spinner
					}
					bar = progressbar.NewOptions64(limit,
						progressbar.OptionSetWriter(p.w),
						progressbar.OptionSetDescription(label+": "+format(n)),
						progressbar.OptionSetWidth(24),
						progressbar.OptionSetPredictTime(false),
						progressbar.OptionSetElapsedTime(false),
						progressbar.OptionClearOnFinish(),
						progressbar.OptionThrottle(100*time.Millisecond),
					)
					_ = bar.Set64(clampProgress(n, total))
				case p.tty:
					bar.Describe(label + ": " + format(n))
					_ = bar.Set64(clampProgress(n, total))
				case now.Sub(lastLine) >= p.every:
					lastLine = now
					fmt.Fprintf(p.w, "%s: %s\n", label, format(n))
				}
				p.mu.Unlock()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// trackWindow is track for a measurement of length d that starts now.
func (p *progress) trackWindow(label string, d time.Duration) (stop func()) {
	start := time.Now()
	return p.track(label, d.Milliseconds(),
		func() int64 { return time.Since(start).Milliseconds() },
		func(ms int64) string {
			return fmt.Sprintf("%v/%v", (time.Duration(ms) * time.Millisecond).Round(time.Second), d)
		})
}

// clampProgress keeps n within a bar of total (0: unknown).
func clampProgress(n, total int64) int64 {
	if total > 0 {
		return min(n, total)
	}
	return n
}
