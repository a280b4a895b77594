package broker

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// The rules of this file are the ones every broker of this package records
// failures and schedules retries by. They are exported so that an
// implementation of the port in another module (an adapter over another
// engine) keeps them exactly, rather than by a copy that drifts.

// Classify splits the cause given to Nack or Reject into what a dead letter
// records: its reason (never empty), its dotted-quad code, and its
// wire-safe public text, clipped to MaxReasonBytes and MaxPublicBytes. The
// rules are DeadLetterValue's: a nil cause records UNEXPLAINED, a cause
// with no Reason UNCLASSIFIED, a DoNotRetry around one with none
// NOT_RETRYABLE. unclassified reports that the cause carried no Reason of
// its own: the caller must then log cause.Error() (which may hold payload
// bytes; see CauseText) with the message ID, and never persist it. Nothing
// of cause but the returned parts may be written anywhere durable. A cause
// whose methods panic is taken as one that carries nothing: UNCLASSIFIED.
// So is one whose chain does not end (an Unwrap that returns its own
// error, or any cycle of errors: a tree of more than 10,000 errors),
// where errors.As would never return.
func Classify(cause error) (reason string, code uint32, public string, unclassified bool) {
	return classify(cause)
}

// CauseText returns cause.Error(), the text a broker logs (never
// persists) for a cause Classify reports unclassified; if that method
// panics (a cause's methods are its caller's code), a line that says so
// instead. A nil cause (which Classify reports UNEXPLAINED) has no text.
func CauseText(cause error) (text string) {
	if cause == nil {
		return ""
	}
	defer func() {
		if r := recover(); r != nil {
			text = fmt.Sprintf("the Error method of the cause (%T) panicked: %s", cause, panicText(r))
		}
	}()
	return cause.Error()
}

// RetryDelayAfter is how long a message stays invisible after its failed
// delivery number failedDelivery (1 for the first): RetryDelay (negative
// read as zero), doubled for each delivery after the first and held at
// MaxRetryDelay when that is positive; RetryDelay unchanged when it is
// not. A failedDelivery below 1 is read as 1; the doubling saturates at
// the ceiling, never overflows.
func (p PolicyValue) RetryDelayAfter(failedDelivery int) time.Duration {
	return p.retryDelay(failedDelivery)
}

// CheckQueueName applies the rule a queue's name must follow: 1 to 64
// bytes of A-Z a-z 0-9 . _ -, not starting with '.'. A name that breaks it
// is refused with an error wrapping [QueueMisconfigured] that says what is
// wrong, the name quoted and clipped to 64 characters.
func CheckQueueName(name string) error {
	// Quoted clipped to 64 characters, the longest a name may be: a
	// caller's megabyte of junk does not become a megabyte of error text.
	bad := func(why string) error {
		return fmt.Errorf("queue name %.64q %s: %w", name, why, QueueMisconfigured)
	}
	if len(name) == 0 || len(name) > 64 {
		return bad(fmt.Sprintf("has %d bytes, want 1 to 64", len(name)))
	}
	if name[0] == '.' {
		return bad("starts with '.'")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			// Name the character the caller wrote, not its first byte
			// read as Latin-1 ("é", not "Ã").
			what := fmt.Sprintf("byte %#02x (not UTF-8)", c)
			if r, n := utf8.DecodeRuneInString(name[i:]); r != utf8.RuneError || n > 1 {
				what = fmt.Sprintf("%q", r)
			}
			return bad(fmt.Sprintf("has %s at byte %d; allowed are A-Z a-z 0-9 . _ -", what, i))
		}
	}
	return nil
}
