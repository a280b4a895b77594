package broker

import (
	"context"
	"errors"
	"unicode/utf8"
)

// Reasons a broker records that no cause spelled out itself.
const (
	// ReasonUnexplained is recorded for a nil cause: the consumer said only
	// that it failed.
	ReasonUnexplained = "UNEXPLAINED"
	// ReasonUnclassified is recorded for a cause with no Reason() string
	// method in its chain (or only an empty one). Its Error text is never
	// written to disk; the broker logs it, keyed by the message ID.
	ReasonUnclassified = "UNCLASSIFIED"
	// ReasonNotRetryable is recorded for a [DoNotRetry] around an error
	// with no reason of its own.
	ReasonNotRetryable = "NOT_RETRYABLE"
	// ReasonLeaseExpired is recorded for a message that ran out of
	// deliveries because the lease of its last one lapsed, no consumer
	// reporting on it. What earlier deliveries were nacked with is not
	// kept, so it is recorded even when they reported causes of their
	// own. It is also the reason of [LeaseExpired].
	ReasonLeaseExpired = "LEASE_EXPIRED"
	// ReasonConsumerStopped is recorded when [Consume] stopped (its
	// context ended) while a handler ran, and the handler gave up with
	// that context's error and nothing of its own (no reason, code or
	// public text): the delivery failed because the consumer went away,
	// not because of the message.
	ReasonConsumerStopped = "CONSUMER_STOPPED"
)

// The most a dead letter records of a cause's reason and public text. A
// dead letter's record must fit in one log segment beside its message,
// however large the message (see Store.maxPayload), so these are bounds,
// not hopes: longer texts are clipped, on a UTF-8 boundary, when the cause
// is recorded.
const (
	MaxReasonBytes = 128
	MaxPublicBytes = 1024
)

// The small interfaces the classified-cause rule looks for with errors.As,
// so that users' error types take part without importing this package.
type (
	reasoner interface{ Reason() string }
	coder    interface{ Code() uint32 }
	publicer interface{ Public() string }
)

// classify splits the cause given to Nack or Reject into what a dead letter
// records: the reason, the dotted-quad code and the wire-safe public text.
// Each part is the first one errors.As finds in cause's chain, so they may
// come from different errors of the chain.
//
//   - nil, or a nil *Error (a typed nil: it carries nothing): UNEXPLAINED,
//     0, "".
//   - a Reason in the chain (an empty one counts as none): that reason, with
//     the code and public text found.
//   - no Reason: UNCLASSIFIED, with whatever code and public text were found
//     (only a Code gives UNCLASSIFIED with that code, only a Public
//     UNCLASSIFIED with that text).
//   - DoNotRetry around an error with no Reason: NOT_RETRYABLE; around a
//     classified error: that error's reason.
//
// The reason and public text are clipped to MaxReasonBytes and
// MaxPublicBytes.
//
// unclassified reports that the cause carried no Reason of its own (a bare
// DoNotRetry mark does not count as one). The caller must then log the
// cause's Error text — it may hold payload bytes — to its *slog.Logger with
// the message ID, and never write it to disk; nothing of cause but the
// three returned parts is ever persisted.
//
// The cause's methods (Reason, Code, Public, Unwrap, As, Is) are the
// caller's code: if one panics, the cause counts as carrying nothing,
// UNCLASSIFIED, 0, "".
func classify(cause error) (reason string, code uint32, public string, unclassified bool) {
	defer func() {
		if recover() != nil {
			reason, code, public, unclassified = ReasonUnclassified, 0, "", true
		}
	}()
	reason, code, public, unclassified = classifyUnclipped(cause)
	return clip(reason, MaxReasonBytes), code, clip(public, MaxPublicBytes), unclassified
}

// A verdict is a cause given to Nack or Reject, classified once and before
// the queue's lock is taken: the cause's methods are the caller's code,
// and one that panics or blocks must not do so while the queue is locked.
type verdict struct {
	reason string
	code   uint32
	public string
	// text is what the logger gets for a cause with no reason of its own
	// (CauseText; never written to disk); "" when there is nothing to log.
	text string
}

// judge classifies cause (see classify) into a verdict. Its text is left
// empty when ctx says Consume has logged the cause already (causeLogged):
// one handler failure, one log line.
func judge(ctx context.Context, cause error) verdict {
	var v verdict
	var unclassified bool
	v.reason, v.code, v.public, unclassified = classify(cause)
	if unclassified && cause != nil && (ctx == nil || ctx.Value(causeLogged{}) == nil) {
		v.text = CauseText(cause)
	}
	return v
}

// causeLogged is the key of a context value Consume sets on the context of
// the Nack or Reject that settles a failed delivery: it has logged the
// handler's error, with the message's ID, so the broker does not log its
// text again.
type causeLogged struct{}

// clip returns the longest prefix of s of at most n bytes that ends on a
// rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// bare reports whether cause carries nothing a dead letter records: no
// reason, no code, no public text.
func bare(cause error) bool {
	reason, code, public, unclassified := classify(cause)
	return unclassified && reason == ReasonUnclassified && code == 0 && public == ""
}

func classifyUnclipped(cause error) (reason string, code uint32, public string, unclassified bool) {
	if e, ok := cause.(*Error); cause == nil || ok && e == nil {
		return ReasonUnexplained, 0, "", false
	}
	var c coder
	if errors.As(cause, &c) {
		code = c.Code()
	}
	var p publicer
	if errors.As(cause, &p) {
		public = p.Public()
	}
	var r reasoner
	if errors.As(cause, &r) {
		if n, ok := r.(*notRetryable); ok {
			if own := n.ownReason(); own != "" {
				return own, code, public, false
			}
			return ReasonNotRetryable, code, public, true
		}
		if reason = r.Reason(); reason != "" {
			return reason, code, public, false
		}
	}
	return ReasonUnclassified, code, public, true
}
