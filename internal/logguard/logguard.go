// Package logguard keeps a caller's slog.Handler from taking down the
// code that logs to it.
//
// A library that logs runs its caller's handler on its own goroutines
// (where a panic ends the process) and after changes it has already made
// (where a panic would report a failure for work that succeeded). Wrap
// turns a handler's panic into a record the handler could not take: the
// logger observes the library, and its failure does not change what the
// library does.
//
// A record the handler could not take is not lost without a word: its
// level and message, with the type of the panic's value, go to the
// standard library's log package (log.Default, as net/http reports a
// handler's panic), and its attributes are withheld. A library's messages
// are its own text, while its attributes may carry what only the caller's
// logger may be trusted with: the text of a caller's error, which may hold
// message payloads. The panic's value is withheld too: a handler that
// cannot encode a value often panics with a text that quotes it.
package logguard

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"strconv"
)

// Wrap returns a logger that hands each record to l's handler and
// recovers a panic in it: the record goes to the fallback instead (see
// the package doc). A nil l, or one with no handler (a zero slog.Logger),
// discards. A logger Wrap returned is returned as it is.
func Wrap(l *slog.Logger) *slog.Logger {
	return wrap(l, nil)
}

// wrap is Wrap with the fallback report: nil means log.Default's Print.
func wrap(l *slog.Logger, report func(string)) *slog.Logger {
	if l == nil || l.Handler() == nil {
		return slog.New(slog.DiscardHandler)
	}
	if _, ok := l.Handler().(handler); ok {
		return l
	}
	return slog.New(handler{l.Handler(), report})
}

// handler is a handler whose panics are recovered (see Wrap).
type handler struct {
	h      slog.Handler
	report func(string) // nil: log.Default's Print
}

// dropped reports record r, which the handler could not take: in names
// the handler's method that panicked, and v is the panic's value.
func dropped(report func(string), in string, v any, r slog.Record) {
	if report == nil {
		report = func(s string) { log.Default().Print(s) }
	}
	// The log package may itself write to a slog handler (slog.SetDefault
	// makes it), this one perhaps: a panic there drops the report.
	defer func() { _ = recover() }()
	report(fmt.Sprintf("walbroker: the slog.Handler panicked in %s (a panic of type %T, its value withheld) and lost this record: level=%s msg=%s (%d attributes withheld: they may hold a caller's error text)",
		in, v, r.Level, strconv.Quote(r.Message), r.NumAttrs()))
}

// Enabled reports a handler that panics as disabled for the level.
func (g handler) Enabled(ctx context.Context, level slog.Level) (enabled bool) {
	defer func() {
		if recover() != nil {
			enabled = false
		}
	}()
	return g.h.Enabled(ctx, level)
}

// Handle hands the record a handler panics on to the fallback.
func (g handler) Handle(ctx context.Context, r slog.Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			dropped(g.report, "Handle", v, r)
			err = nil
		}
	}()
	return g.h.Handle(ctx, r)
}

// WithAttrs hands every record to the fallback from then on when the
// handler panics: a record without the attributes asked for would say
// something other than what was logged.
func (g handler) WithAttrs(attrs []slog.Attr) (h slog.Handler) {
	defer func() {
		if v := recover(); v != nil {
			h = lost{g, "WithAttrs", v}
		}
	}()
	return handler{g.h.WithAttrs(attrs), g.report}
}

// WithGroup hands every record to the fallback from then on when the
// handler panics, as WithAttrs does.
func (g handler) WithGroup(name string) (h slog.Handler) {
	defer func() {
		if v := recover(); v != nil {
			h = lost{g, "WithGroup", v}
		}
	}()
	return handler{g.h.WithGroup(name), g.report}
}

// lost is what a handler becomes once its WithAttrs or WithGroup (in)
// panicked with v: every record it is given, at the levels the handler it
// was derived from (parent) enables, goes to the fallback.
type lost struct {
	parent handler
	in     string
	v      any
}

func (l lost) Enabled(ctx context.Context, level slog.Level) bool {
	return l.parent.Enabled(ctx, level)
}

func (l lost) Handle(_ context.Context, r slog.Record) error {
	dropped(l.parent.report, l.in, l.v, r)
	return nil
}

func (l lost) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l lost) WithGroup(string) slog.Handler      { return l }
