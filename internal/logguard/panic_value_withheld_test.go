package logguard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// strict is a handler that refuses attribute values it cannot encode by
// panicking with a message naming the attribute, a common way for a
// handler to report a value it does not support.
type strict struct{ slog.Handler }

func (strict) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		panic(fmt.Sprintf("cannot encode attribute %s=%v", a.Key, a.Value))
	})
	return nil
}

// A lost record's attributes are withheld from the standard log, and so
// is the panic's value: a handler's panic routinely quotes the attribute
// it choked on, here a cause's text holding a payload.
func TestAPanicValueQuotingAnAttributeIsWithheld(t *testing.T) {
	var reports []string
	l := wrap(slog.New(strict{slog.NewTextHandler(io.Discard, nil)}), func(s string) { reports = append(reports, s) })
	l.Warn("broker: Consume: handler failed; nacking", "error", "card 4111-1111-1111-1111 declined")
	require.Len(t, reports, 1)
	require.NotContains(t, reports[0], "4111-1111-1111-1111", "an attribute withheld by the package doc reached the fallback through the panic value")
	require.Contains(t, reports[0], "panicked in Handle (a panic of type string, its value withheld)")
	require.Contains(t, reports[0], `msg="broker: Consume: handler failed; nacking" (1 attributes withheld`)
}
