package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"
)

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = 130 // as a shell reports a SIGINT death
)

// errInterrupted is the cause of the run's context after Ctrl-C.
var errInterrupted = errors.New("interrupted")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is walbench with arguments args, stopped by Ctrl-C or SIGTERM; it
// returns the exit code. The first signal stops the current measurement
// and lets the run print what it measured; a second removes the temporary
// directory and exits at once.
func run(args []string, stdout, stderr io.Writer) int {
	// Catch signals before anything exists to clean up; they wait in the
	// channel until the goroutine below takes them.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	finished := make(chan struct{})
	defer close(finished)
	var dir atomic.Pointer[string]
	e := &env{progress: newProgress(stderr)}
	go func() {
		select {
		case <-sigs:
		case <-finished:
			return
		}
		e.progress.printf("walbench: interrupted: stopping the current measurement (Ctrl-C again to quit at once)")
		cancel(errInterrupted)
		select {
		case <-sigs:
		case <-finished:
			return
		}
		if d := dir.Load(); d != nil {
			e.progress.printf("walbench: interrupted again: removing %s and quitting", *d)
			_ = os.RemoveAll(*d)
		}
		os.Exit(exitInterrupted)
	}()
	return runContext(ctx, args, stdout, stderr, e, func(d string) { dir.Store(&d) })
}

// runContext is walbench with arguments args, until ctx ends; it returns
// the exit code. made, when not nil, is told the temporary directory once
// it exists. Every return path after it is made passes its removal.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer, e *env, made func(dir string)) (code int) {
	wroteJSON := false // -json FILE holds this run's report
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "walbench: %v\n", err)
		return exitUsage
	}
	if cfg.command == "report" {
		if err := runReport(cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "walbench report: %v\n", err)
			return exitError
		}
		return exitOK
	}
	if cfg.jsonFile != "" {
		// Made now, so that a path that cannot be written fails before the
		// measuring, not after it. Unless the report is written to it in
		// the end, it is removed, so that no file of an earlier run is left
		// there to be taken for this one's.
		if err := createJSON(cfg.jsonFile); err != nil {
			fmt.Fprintf(stderr, "walbench: %v\n", err)
			return exitError
		}
		defer func() {
			if wroteJSON {
				return
			}
			if err := os.Remove(cfg.jsonFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(stderr, "walbench: -json: %v\n", err)
				code = max(code, exitError)
			}
		}()
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "walbench: -cpuprofile: %v\n", err)
			return exitError
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			fmt.Fprintf(stderr, "walbench: -cpuprofile: %v\n", err)
			return exitError
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintf(stderr, "walbench: -cpuprofile: %v\n", err)
				code = max(code, exitError)
			}
		}()
	}

	tmp, err := os.MkdirTemp(cfg.parent, "walbench-")
	if err != nil {
		fmt.Fprintf(stderr, "walbench: make temporary directory: %v\n", err)
		return exitError
	}
	if abs, err := filepath.Abs(tmp); err == nil {
		tmp = abs
	}
	if made != nil {
		made(tmp)
	}
	defer func() {
		if err := os.RemoveAll(tmp); err != nil {
			fmt.Fprintf(stderr, "walbench: remove %s: %v\n", tmp, err)
			code = max(code, exitError)
		}
	}()

	start := time.Now()
	rep, measureErr := measure(ctx, e, tmp, cfg)
	rep.Seconds = time.Since(start).Seconds()
	rep.Interrupted = ctx.Err() != nil
	if measureErr != nil {
		rep.Error = measureErr.Error()
	}
	measured := rep.Probe != nil || len(rep.Rows) > 0 || rep.Reopen != nil
	if measured {
		if err := printReport(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "walbench: print: %v\n", err)
			code = exitError
		}
		if cfg.jsonFile != "" {
			if err := writeJSON(cfg.jsonFile, rep); err != nil {
				fmt.Fprintf(stderr, "walbench: %v\n", err)
				code = exitError
			} else {
				wroteJSON = true
			}
		}
	}
	switch {
	case measureErr != nil:
		fmt.Fprintf(stderr, "walbench: %v\n", measureErr)
		code = exitError
	case ctx.Err() != nil && !measured:
		fmt.Fprintln(stderr, "walbench: interrupted before anything was measured")
		code = max(code, exitInterrupted)
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "walbench: interrupted; the tables have what was measured until then")
		code = max(code, exitInterrupted)
	}
	return code
}
