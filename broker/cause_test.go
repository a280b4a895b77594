package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Users' own error types: each implements some of the small interfaces and
// none of them imports anything of this package.
type (
	userReason  struct{ r string }
	userCode    struct{ c uint32 }
	userPublic  struct{ p string }
	userCodePub struct {
		c uint32
		p string
	}
	userFull struct {
		r, p, secret string
		c            uint32
	}
	// userReasonWrapping has a reason and wraps another error.
	userReasonWrapping struct {
		r   string
		err error
	}
	// userAs gives as through its As method and wraps err.
	userAs struct {
		as  userReason
		err error
	}
)

func (e userReason) Error() string          { return "user reason " + e.r }
func (e userReason) Reason() string         { return e.r }
func (e userCode) Error() string            { return "user code" }
func (e userCode) Code() uint32             { return e.c }
func (e userPublic) Error() string          { return "user public: payload=SECRET" }
func (e userPublic) Public() string         { return e.p }
func (e userCodePub) Error() string         { return "user code+public: payload=SECRET" }
func (e userCodePub) Code() uint32          { return e.c }
func (e userCodePub) Public() string        { return e.p }
func (e *userFull) Error() string           { return e.r + ": " + e.secret }
func (e *userFull) Reason() string          { return e.r }
func (e *userFull) Code() uint32            { return e.c }
func (e *userFull) Public() string          { return e.p }
func (e userReasonWrapping) Error() string  { return e.r + ": " + e.err.Error() }
func (e userReasonWrapping) Reason() string { return e.r }
func (e userReasonWrapping) Unwrap() error  { return e.err }
func (e userAs) Error() string              { return "user as: " + e.err.Error() }
func (e userAs) Unwrap() error              { return e.err }

func (e userAs) As(target any) bool {
	r, ok := target.(*interface{ Reason() string })
	if ok {
		*r = e.as
	}
	return ok
}

// deep wraps err n levels deep with fmt.Errorf %w.
func deep(err error, n int) error {
	for i := range n {
		err = fmt.Errorf("level %d: %w", i, err)
	}
	return err
}

func TestClassify(t *testing.T) {
	plain := errors.New("plain failure with payload=SECRET")
	full := &userFull{r: "CARD_DECLINED", c: 0x0a000102, p: "card declined", secret: "SECRET"}
	for _, tc := range []struct {
		name         string
		cause        error
		reason       string
		code         uint32
		public       string
		unclassified bool
	}{
		// API.md §1: a nil cause records UNEXPLAINED, never "".
		{"nil", nil, ReasonUnexplained, 0, "", false},
		// A nil *Error (a typed nil) carries nothing: it is no cause.
		{"nil *Error", (*Error)(nil), ReasonUnexplained, 0, "", false},
		{"nil *Error, wrapped", deep((*Error)(nil), 2), ReasonUnclassified, 0, "", true},
		{"DoNotRetry(nil *Error)", DoNotRetry((*Error)(nil)), ReasonNotRetryable, 0, "", true},
		// §1: an error with no reason records UNCLASSIFIED.
		{"plain error", plain, ReasonUnclassified, 0, "", true},
		{"plain error, wrapped", deep(plain, 3), ReasonUnclassified, 0, "", true},
		// §1: the cause's reason, code and public text.
		{"broker.Error", NewError("CARD_DECLINED", 0x0a000102, "card declined", "SECRET"), "CARD_DECLINED", 0x0a000102, "card declined", false},
		{"broker.Error, wrapped deep", deep(NewError("CARD_DECLINED", 7, "pub", "SECRET"), 5), "CARD_DECLINED", 7, "pub", false},
		{"sentinel, wrapped", fmt.Errorf("ack: %w", LeaseExpired), "LEASE_EXPIRED", 0x07010003, "the lease has lapsed", false},
		{"user type with all three", full, "CARD_DECLINED", 0x0a000102, "card declined", false},
		{"user type with all three, wrapped deep", deep(full, 4), "CARD_DECLINED", 0x0a000102, "card declined", false},
		{"user reason only", deep(userReason{"TIMEOUT"}, 2), "TIMEOUT", 0, "", false},
		{"parts from different errors of the chain", deep(userReasonWrapping{"OUTER", deep(userCodePub{9, "inner pub"}, 2)}, 2), "OUTER", 9, "inner pub", false},
		{"the first of each part wins", userReasonWrapping{"OUTER", NewError("INNER", 3, "inner", "")}, "OUTER", 3, "inner", false},
		{"errors.Join finds the classified one", errors.Join(plain, deep(userReason{"JOINED"}, 2)), "JOINED", 0, "", false},
		// An empty Reason counts as none.
		{"empty reason", deep(userReason{""}, 2), ReasonUnclassified, 0, "", true},
		// An error that carries nothing of a part hides nothing of it
		// wrapped inside (Error.Wrap: a nil e carries cause alone).
		{"nil *Error wrapping a classified cause", (*Error)(nil).Wrap(full), "CARD_DECLINED", 0x0a000102, "card declined", false},
		{"broker.Error with no reason wrapping a classified cause", NewError("", 0, "", "SECRET").Wrap(deep(full, 2)), "CARD_DECLINED", 0x0a000102, "card declined", false},
		{"empty reason wrapping a reason", deep(userReasonWrapping{"", deep(userReason{"INNER"}, 2)}, 2), "INNER", 0, "", false},
		{"code 0 and no public text wrapping both", NewError("OUTER", 0, "", "SECRET").Wrap(userCodePub{9, "inner pub"}), "OUTER", 9, "inner pub", false},
		{"the first of each part that carries one wins", NewError("", 5, "outer pub", "SECRET").Wrap(full), "CARD_DECLINED", 5, "outer pub", false},
		{"errors.Join past an empty reason", errors.Join(userReason{""}, deep(full, 2)), "CARD_DECLINED", 0x0a000102, "card declined", false},
		{"several %w past a nil *Error", fmt.Errorf("%w; %w", (*Error)(nil), full), "CARD_DECLINED", 0x0a000102, "card declined", false},
		{"As method past an empty reason", userAs{userReason{""}, deep(full, 1)}, "CARD_DECLINED", 0x0a000102, "card declined", false},
		{"As method giving a reason", deep(userAs{userReason{"GIVEN"}, plain}, 2), "GIVEN", 0, "", false},
		// §5.9: partly classified causes.
		{"only Code", deep(userCode{0x01020304}, 3), ReasonUnclassified, 0x01020304, "", true},
		{"only Public", deep(userPublic{"try later"}, 3), ReasonUnclassified, 0, "try later", true},
		{"Code and Public, no Reason", deep(userCodePub{5, "pub"}, 2), ReasonUnclassified, 5, "pub", true},
		// §1: DoNotRetry around an error with no reason.
		{"DoNotRetry(plain)", DoNotRetry(plain), ReasonNotRetryable, 0, "", true},
		{"DoNotRetry(plain), wrapped deep", deep(DoNotRetry(deep(plain, 2)), 3), ReasonNotRetryable, 0, "", true},
		{"DoNotRetry(nil)", DoNotRetry(nil), ReasonNotRetryable, 0, "", true},
		{"DoNotRetry(empty reason)", DoNotRetry(userReason{""}), ReasonNotRetryable, 0, "", true},
		{"DoNotRetry(only Code)", DoNotRetry(deep(userCode{11}, 2)), ReasonNotRetryable, 11, "", true},
		{"DoNotRetry(only Public)", DoNotRetry(userPublic{"bad input"}), ReasonNotRetryable, 0, "bad input", true},
		{"DoNotRetry(DoNotRetry(plain))", DoNotRetry(DoNotRetry(plain)), ReasonNotRetryable, 0, "", true},
		// §5.9: DoNotRetry around a classified error keeps its reason.
		{"DoNotRetry(broker.Error)", DoNotRetry(NewError("INVALID_INPUT", 4, "bad field", "SECRET")), "INVALID_INPUT", 4, "bad field", false},
		{"DoNotRetry(user type), wrapped deep", deep(DoNotRetry(deep(full, 2)), 3), "CARD_DECLINED", 0x0a000102, "card declined", false},
		{"DoNotRetry(user reason)", DoNotRetry(deep(userReason{"SCHEMA"}, 2)), "SCHEMA", 0, "", false},
		{"DoNotRetry(DoNotRetry(classified))", DoNotRetry(DoNotRetry(userReason{"SCHEMA"})), "SCHEMA", 0, "", false},
		{"DoNotRetry(nil *Error wrapping a classified cause)", DoNotRetry((*Error)(nil).Wrap(full)), "CARD_DECLINED", 0x0a000102, "card declined", false},
		{"DoNotRetry(empty reason wrapping a reason)", DoNotRetry(userReasonWrapping{"", userReason{"SCHEMA"}}), "SCHEMA", 0, "", false},
		// A DoNotRetry mark is no reason of its own: one beside it wins,
		// and it gives NOT_RETRYABLE wherever it is when no error has one.
		{"a reason beside DoNotRetry(plain)", errors.Join(DoNotRetry(plain), userReason{"JOINED"}), "JOINED", 0, "", false},
		{"DoNotRetry(plain) past an empty reason", errors.Join(userReason{""}, DoNotRetry(plain)), ReasonNotRetryable, 0, "", true},
		// Consume's cause for a panic.
		{"handler panic", errHandlerPanicked, ReasonUnclassified, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, code, public, unclassified := classify(tc.cause)
			require.Equal(t, tc.reason, reason)
			require.Equal(t, tc.code, code)
			require.Equal(t, tc.public, public)
			require.Equal(t, tc.unclassified, unclassified)
			require.NotContains(t, public, "SECRET", "nothing but Public text is recorded")
		})
	}
}

// A reason of MaxReasonBytes and a public text of MaxPublicBytes fit: they
// are recorded whole, and as the cause's own (not UNCLASSIFIED). One byte
// more is clipped to the bound.
func TestAReasonAndPublicTextOfExactlyTheirBoundsAreRecordedWhole(t *testing.T) {
	reason, public := strings.Repeat("R", MaxReasonBytes), strings.Repeat("p", MaxPublicBytes)
	for _, cause := range []error{
		NewError(reason, 3, public, "SECRET"),
		deep(NewError(reason+"X", 3, public+"x", "SECRET"), 2),
	} {
		gotReason, code, gotPublic, unclassified := classify(cause)
		require.Equal(t, reason, gotReason)
		require.EqualValues(t, 3, code)
		require.Equal(t, public, gotPublic)
		require.False(t, unclassified)
	}
}

// A dead letter's Reason is a SCREAMING_SNAKE identifier: a reason of
// another shape counts as none (the walk goes on into what it wraps), and
// a valid one clipped after an underscore loses the underscore.
func TestAReasonThatIsNotScreamingSnakeCountsAsNone(t *testing.T) {
	for _, r := range []string{"A", "CARD_DECLINED", "E2E_TIMEOUT_3", "X1"} {
		require.True(t, screamingSnake(r), r)
		reason, _, _, unclassified := classify(NewError(r, 0, "", ""))
		require.Equal(t, r, reason)
		require.False(t, unclassified)
	}
	for _, r := range []string{"card_declined", "Card", "_CARD", "CARD_", "CARD__DECLINED", "1CARD", "CARD DECLINED", "CARD-DECLINED",
		"declined: card 4111-1111-1111-1111", "CARD\x00", "ÉCHEC"} {
		require.False(t, screamingSnake(r), "%q", r)
		reason, code, public, unclassified := classify(NewError(r, 9, "pub", "private"))
		require.Equal(t, ReasonUnclassified, reason, "%q", r)
		require.True(t, unclassified, "%q: its text is to be logged, not recorded", r)
		require.EqualValues(t, 9, code)
		require.Equal(t, "pub", public)
	}
	reason, _, _, unclassified := classify(NewError("not a reason", 0, "", "").Wrap(NewError("INNER", 0, "", "")))
	require.Equal(t, "INNER", reason)
	require.False(t, unclassified)

	long := strings.Repeat("A", MaxReasonBytes-1) + "_B"
	reason, _, _, _ = classify(NewError(long, 0, "", ""))
	require.Equal(t, strings.Repeat("A", MaxReasonBytes-1), reason, "clipped, without the underscore it ended in")
	require.True(t, screamingSnake(reason))
}
