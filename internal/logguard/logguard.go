// Package logguard keeps a caller's slog.Handler from taking down the
// code that logs to it.
//
// A library that logs runs its caller's handler on its own goroutines
// (where a panic ends the process) and after changes it has already made
// (where a panic would report a failure for work that succeeded). Wrap
// turns a handler's panic into a dropped record: the logger observes the
// library, and its failure does not change what the library does.
package logguard

import (
	"context"
	"log/slog"
)

// Wrap returns a logger that hands each record to l's handler and
// recovers a panic in it, dropping that record. A nil l, or one with no
// handler (a zero slog.Logger), discards. A logger Wrap returned is
// returned as it is.
func Wrap(l *slog.Logger) *slog.Logger {
	if l == nil || l.Handler() == nil {
		return slog.New(slog.DiscardHandler)
	}
	if _, ok := l.Handler().(handler); ok {
		return l
	}
	return slog.New(handler{l.Handler()})
}

// handler is a handler whose panics are recovered (see Wrap).
type handler struct{ h slog.Handler }

// Enabled reports a handler that panics as disabled for the level.
func (g handler) Enabled(ctx context.Context, level slog.Level) (enabled bool) {
	defer func() {
		if recover() != nil {
			enabled = false
		}
	}()
	return g.h.Enabled(ctx, level)
}

// Handle drops the record a handler panics on.
func (g handler) Handle(ctx context.Context, r slog.Record) (err error) {
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	return g.h.Handle(ctx, r)
}

// WithAttrs discards from then on when the handler panics: a record
// without the attributes asked for would say something other than what
// was logged.
func (g handler) WithAttrs(attrs []slog.Attr) (h slog.Handler) {
	defer func() {
		if recover() != nil {
			h = slog.DiscardHandler
		}
	}()
	return handler{g.h.WithAttrs(attrs)}
}

// WithGroup discards from then on when the handler panics, as WithAttrs
// does.
func (g handler) WithGroup(name string) (h slog.Handler) {
	defer func() {
		if recover() != nil {
			h = slog.DiscardHandler
		}
	}()
	return handler{g.h.WithGroup(name)}
}
