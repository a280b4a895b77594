package logguard

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// panicky panics in whichever of its methods is named.
type panicky struct {
	slog.Handler
	in string
}

func (p panicky) Enabled(ctx context.Context, l slog.Level) bool {
	if p.in == "Enabled" {
		panic("Enabled")
	}
	return p.Handler.Enabled(ctx, l)
}

func (p panicky) Handle(ctx context.Context, r slog.Record) error {
	if p.in == "Handle" {
		panic("Handle")
	}
	return p.Handler.Handle(ctx, r)
}

func (p panicky) WithAttrs(as []slog.Attr) slog.Handler {
	if p.in == "WithAttrs" {
		panic("WithAttrs")
	}
	return panicky{p.Handler.WithAttrs(as), p.in}
}

func (p panicky) WithGroup(name string) slog.Handler {
	if p.in == "WithGroup" {
		panic("WithGroup")
	}
	return panicky{p.Handler.WithGroup(name), p.in}
}

// Whichever method of the handler panics, the logger's caller goes on; a
// record the handler could not take goes to the fallback, by its level and
// message with the type of the panic's value, its attributes and the
// value withheld, and the others
// are written whole.
func TestAHandlerThatPanicsLosesOnlyWhatItCouldNotTake(t *testing.T) {
	for _, in := range []string{"", "Enabled", "Handle", "WithAttrs", "WithGroup"} {
		t.Run("panics in "+in, func(t *testing.T) {
			var buf bytes.Buffer
			var reports []string
			l := wrap(slog.New(panicky{slog.NewTextHandler(&buf, nil), in}), func(s string) { reports = append(reports, s) })
			require.NotPanics(t, func() {
				l.Info("plain")
				l.With("k", "secret").Info("with")
				l.WithGroup("g").Info("group", "k", "secret")
			})
			out := buf.String()
			switch in {
			case "":
				require.Contains(t, out, "msg=plain")
				require.Contains(t, out, "msg=with k=secret")
				require.Contains(t, out, "msg=group g.k=secret")
				require.Empty(t, reports)
			case "Enabled":
				// No record is made: the level's test panicked.
				require.Empty(t, out)
				require.Empty(t, reports)
			case "Handle":
				require.Empty(t, out)
				require.Len(t, reports, 3)
				for i, msg := range []string{"plain", "with", "group"} {
					require.Contains(t, reports[i], "panicked in Handle (a panic of type string, its value withheld)")
					require.Contains(t, reports[i], `level=INFO msg="`+msg+`"`)
				}
				require.Contains(t, reports[2], "(1 attributes withheld")
			case "WithAttrs":
				require.Contains(t, out, "msg=plain")
				require.NotContains(t, out, "msg=with", "a record without its attributes")
				require.Contains(t, out, "msg=group g.k=secret")
				require.Len(t, reports, 1)
				require.Contains(t, reports[0], `panicked in WithAttrs (a panic of type string, its value withheld) and lost this record: level=INFO msg="with"`)
			case "WithGroup":
				require.Contains(t, out, "msg=plain")
				require.Contains(t, out, "msg=with k=secret")
				require.NotContains(t, out, "msg=group", "a record outside its group")
				require.Len(t, reports, 1)
				require.Contains(t, reports[0], `panicked in WithGroup (a panic of type string, its value withheld) and lost this record: level=INFO msg="group"`)
			}
			for _, r := range reports {
				require.NotContains(t, r, "secret", "an attribute")
			}
		})
	}
}

// A handler derived from one that lost its WithAttrs reports to the
// fallback too, at the levels the handler before it enables.
func TestALostHandlerKeepsReportingAtItsLevels(t *testing.T) {
	var reports []string
	l := wrap(slog.New(panicky{slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}), "WithAttrs"}),
		func(s string) { reports = append(reports, s) })
	w := l.With("k", "v").WithGroup("g").With("k2", "v2")
	w.Info("below the level")
	w.Warn("at the level", "k3", "v3")
	require.Len(t, reports, 1)
	require.Contains(t, reports[0], `level=WARN msg="at the level" (1 attributes withheld`)
}

// A fallback that panics as well (the log package writing to a handler
// that panics, through slog.SetDefault) loses the report, and nothing
// else; a panic value that panics when printed is named by its type, as
// every panic value is, and never printed.
func TestAFallbackThatPanicsIsDropped(t *testing.T) {
	l := wrap(slog.New(panicky{slog.NewTextHandler(&bytes.Buffer{}, nil), "Handle"}), func(string) { panic("fallback") })
	require.NotPanics(t, func() { l.Info("x") })

	var reports []string
	l = wrap(slog.New(badPanic{slog.NewTextHandler(&bytes.Buffer{}, nil)}), func(s string) { reports = append(reports, s) })
	require.NotPanics(t, func() { l.Info("x") })
	require.Len(t, reports, 1)
	require.Contains(t, reports[0], "(a panic of type logguard.unprintable, its value withheld)")
}

// unprintable panics when printed, and again while fmt reports that.
type unprintable struct{}

func (unprintable) String() string { panic(unprintable{}) }

// badPanic panics in Handle with a value that cannot be printed.
type badPanic struct{ slog.Handler }

func (badPanic) Handle(context.Context, slog.Record) error { panic(unprintable{}) }

// A nil logger, or a zero one (no handler), discards instead of panicking
// at the first record; a wrapped logger is not wrapped again.
func TestWrapOfNothingDiscards(t *testing.T) {
	for _, l := range []*slog.Logger{nil, {}} {
		w := Wrap(l)
		require.NotPanics(t, func() { w.Info("x") })
		require.False(t, w.Enabled(context.Background(), slog.LevelError))
	}
	w := Wrap(slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)))
	require.Same(t, w, Wrap(w))
}
