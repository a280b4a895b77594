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
// record the handler could not take is dropped, and the others are
// written whole.
func TestAHandlerThatPanicsLosesOnlyWhatItCouldNotTake(t *testing.T) {
	for _, in := range []string{"", "Enabled", "Handle", "WithAttrs", "WithGroup"} {
		t.Run("panics in "+in, func(t *testing.T) {
			var buf bytes.Buffer
			l := Wrap(slog.New(panicky{slog.NewTextHandler(&buf, nil), in}))
			require.NotPanics(t, func() {
				l.Info("plain")
				l.With("k", "v").Info("with")
				l.WithGroup("g").Info("group", "k", "v")
			})
			out := buf.String()
			switch in {
			case "":
				require.Contains(t, out, "msg=plain")
				require.Contains(t, out, "msg=with k=v")
				require.Contains(t, out, "msg=group g.k=v")
			case "Enabled", "Handle":
				require.Empty(t, out)
			case "WithAttrs":
				require.Contains(t, out, "msg=plain")
				require.NotContains(t, out, "msg=with", "a record without its attributes")
				require.Contains(t, out, "msg=group g.k=v")
			case "WithGroup":
				require.Contains(t, out, "msg=plain")
				require.Contains(t, out, "msg=with k=v")
				require.NotContains(t, out, "msg=group", "a record outside its group")
			}
		})
	}
}

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
