package broker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestErrorSentinels(t *testing.T) {
	all := []struct {
		err    *Error
		reason string
		code   string
	}{
		{MessageTooLarge, "MESSAGE_TOO_LARGE", "7.1.0.1"},
		{InvalidBatchSize, "INVALID_BATCH_SIZE", "7.1.0.2"},
		{LeaseExpired, "LEASE_EXPIRED", "7.1.0.3"},
		{UnknownReceipt, "UNKNOWN_RECEIPT", "7.1.0.4"},
		{QueueMisconfigured, "QUEUE_MISCONFIGURED", "7.1.0.5"},
		{DeadLetterNotFound, "DEAD_LETTER_NOT_FOUND", "7.1.0.6"},
		{QueueFull, "QUEUE_FULL", "7.1.0.7"},
		{Closed, "CLOSED", "7.1.0.8"},
		{Corrupt, "CORRUPT", "7.1.0.9"},
		{Locked, "LOCKED", "7.1.0.10"},
		{InvalidDedupKey, "INVALID_DEDUP_KEY", "7.1.0.11"},
	}
	for i, tc := range all {
		t.Run(tc.reason, func(t *testing.T) {
			require.Equal(t, tc.reason, tc.err.Reason())
			require.Equal(t, tc.code, FormatCode(tc.err.Code()))
			require.NotEmpty(t, tc.err.Public())

			wrapped := fmt.Errorf("queue %q: ack: %w", "jobs", tc.err)
			wrapped = fmt.Errorf("outer: %w", wrapped)
			require.ErrorIs(t, wrapped, tc.err)

			var r interface{ Reason() string }
			require.True(t, errors.As(wrapped, &r))
			require.Equal(t, tc.reason, r.Reason())
			var c interface{ Code() uint32 }
			require.True(t, errors.As(wrapped, &c))
			require.Equal(t, tc.err.Code(), c.Code())
			var p interface{ Public() string }
			require.True(t, errors.As(wrapped, &p))
			require.Equal(t, tc.err.Public(), p.Public())

			for j, other := range all {
				if j != i {
					require.NotErrorIs(t, wrapped, other.err)
				}
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	e := NewError("CARD_DECLINED", 0x0a000102, "the card was declined", "issuer said 05 for card 4111")
	require.Equal(t, "CARD_DECLINED (10.0.1.2): the card was declined: issuer said 05 for card 4111", e.Error())
	require.Equal(t, "the card was declined", e.Public())
	require.NotContains(t, e.Public(), "4111")
	require.Nil(t, e.Unwrap())

	require.Equal(t, "BARE", NewError("BARE", 0, "", "").Error())
	require.Equal(t, "LEASE_EXPIRED (7.1.0.3): the lease has lapsed", LeaseExpired.Error())
}

func TestErrorWrap(t *testing.T) {
	io := errors.New("disk on fire")
	e := Corrupt.Wrap(io)
	require.ErrorIs(t, e, Corrupt, "a copy still matches its sentinel")
	require.ErrorIs(t, e, io)
	require.Equal(t, io, e.Unwrap())
	require.Contains(t, e.Error(), "disk on fire")
	require.Nil(t, Corrupt.Unwrap(), "Wrap does not modify the sentinel")
	require.NotErrorIs(t, e, Locked)
	require.NotErrorIs(t, NewError("CORRUPT", 0, "", ""), Corrupt, "reason and code both take part")
}

// An Error matches another only when both its reason and its code are the
// same: a program's error that reuses one of this package's codes under
// another reason is not that sentinel. A nil *Error, on either side, matches
// nothing but itself, and asking does not panic.
func TestAnErrorMatchesOnlyTheSameReasonWithTheSameCode(t *testing.T) {
	require.ErrorIs(t, NewError("QUEUE_MISCONFIGURED", QueueMisconfigured.Code(), "another text", "detail"), QueueMisconfigured)
	require.NotErrorIs(t, NewError("CARD_DECLINED", QueueMisconfigured.Code(), "", ""), QueueMisconfigured, "same code, another reason")
	require.NotErrorIs(t, NewError("QUEUE_MISCONFIGURED", 0, "", ""), QueueMisconfigured, "same reason, no code")

	var none *Error
	require.NotErrorIs(t, none, Closed)
	require.NotErrorIs(t, fmt.Errorf("close: %w", none), Closed)
	require.NotErrorIs(t, Closed, none)
	require.NotErrorIs(t, Closed.Wrap(errors.New("x")), none)
	require.ErrorIs(t, none, none)
}

func TestCodeFormatParse(t *testing.T) {
	for _, tc := range []struct {
		code uint32
		text string
	}{
		{0, "0.0.0.0"},
		{0x07010003, "7.1.0.3"},
		{0xffffffff, "255.255.255.255"},
		{0x01020304, "1.2.3.4"},
		{0x0a00000a, "10.0.0.10"},
	} {
		require.Equal(t, tc.text, FormatCode(tc.code))
		got, err := ParseCode(tc.text)
		require.NoError(t, err)
		require.Equal(t, tc.code, got)
	}
	for _, bad := range []string{"", "1.2.3", "1.2.3.4.5", "256.0.0.0", "1..2.3", "01.2.3.4", "+1.2.3.4", "-1.2.3.4", "a.b.c.d", " 1.2.3.4", "1.2.3.4 ", "1000.0.0.0"} {
		_, err := ParseCode(bad)
		require.Error(t, err, "%q", bad)
	}
}

type reasoned struct{ reason string }

func (r reasoned) Error() string  { return "reasoned " + r.reason }
func (r reasoned) Reason() string { return r.reason }

func TestDoNotRetry(t *testing.T) {
	plain := errors.New("plain")

	t.Run("wraps", func(t *testing.T) {
		err := DoNotRetry(fmt.Errorf("ctx: %w", plain))
		require.ErrorIs(t, err, plain)
		require.True(t, IsDoNotRetry(err))
		require.True(t, IsDoNotRetry(fmt.Errorf("a: %w", fmt.Errorf("b: %w", err))))
		require.False(t, IsDoNotRetry(plain))
		require.False(t, IsDoNotRetry(nil))
		require.Contains(t, err.Error(), "plain")
	})
	t.Run("reason", func(t *testing.T) {
		require.Equal(t, ReasonNotRetryable, DoNotRetry(plain).(interface{ Reason() string }).Reason())
		require.Equal(t, ReasonNotRetryable, DoNotRetry(nil).(interface{ Reason() string }).Reason())
		require.Equal(t, ReasonNotRetryable, DoNotRetry(reasoned{""}).(interface{ Reason() string }).Reason(), "an empty reason counts as none")
		require.Equal(t, "CARD_DECLINED", DoNotRetry(fmt.Errorf("x: %w", reasoned{"CARD_DECLINED"})).(interface{ Reason() string }).Reason())
		require.Equal(t, "LEASE_EXPIRED", DoNotRetry(DoNotRetry(LeaseExpired)).(interface{ Reason() string }).Reason())
		require.Equal(t, "LEASE_EXPIRED", DoNotRetry((*Error)(nil).Wrap(LeaseExpired)).(interface{ Reason() string }).Reason(), "an error with no reason hides nothing inside it")
		require.Equal(t, "CARD_DECLINED", DoNotRetry(errors.Join(reasoned{""}, reasoned{"CARD_DECLINED"})).(interface{ Reason() string }).Reason())
	})
	t.Run("no Code or Public of its own", func(t *testing.T) {
		err := DoNotRetry(NewError("X", 42, "pub", "priv"))
		_, isCoder := err.(interface{ Code() uint32 })
		_, isPublic := err.(interface{ Public() string })
		require.False(t, isCoder)
		require.False(t, isPublic)
		var c interface{ Code() uint32 }
		require.True(t, errors.As(err, &c))
		require.EqualValues(t, 42, c.Code())
		var p interface{ Public() string }
		require.True(t, errors.As(err, &p))
		require.Equal(t, "pub", p.Public())
	})
	t.Run("nil", func(t *testing.T) {
		err := DoNotRetry(nil)
		require.Error(t, err)
		require.True(t, IsDoNotRetry(err))
		require.Nil(t, errors.Unwrap(err))
	})
}
