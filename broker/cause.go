package broker

import (
	"context"
	"fmt"
	"strings"
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
	// deliveries without any consumer ever reporting anything in its
	// current life (since its publish or its last replay): every lease it
	// had lapsed, none was nacked. When an earlier delivery was nacked
	// (with any cause, nil included), the dead letter records that last
	// nack's reason, code and public cause instead. It is also the reason
	// of [LeaseExpired].
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
// They are aliases, not types of their own, so that an As method can fill
// one: it is handed a *interface{ Reason() string }, a type it can name.
type (
	reasoner = interface{ Reason() string }
	coder    = interface{ Code() uint32 }
	publicer = interface{ Public() string }
)

// classify splits the cause given to Nack or Reject into what a dead letter
// records: the reason, the dotted-quad code and the wire-safe public text.
// Each part is the first one in cause's tree that carries something (a
// Reason or Public that is not "", a Code that is not 0), in the order
// errors.As looks (see firstIn): an error that carries nothing of a part
// (a nil *Error, an *Error made with no reason, one whose code is 0) does
// not hide one wrapped inside it. The parts are found one by one, so they
// may come from different errors of the tree.
//
//   - nil, or a nil *Error (a typed nil: it carries nothing): UNEXPLAINED,
//     0, "".
//   - a Reason in the tree (an empty one counts as none, and so does one
//     that is not SCREAMING_SNAKE: see reasonIn): that reason, with the
//     code and public text found.
//   - no Reason: UNCLASSIFIED, with whatever code and public text were found
//     (only a Code gives UNCLASSIFIED with that code, only a Public
//     UNCLASSIFIED with that text).
//   - DoNotRetry around an error with no Reason: NOT_RETRYABLE; around a
//     classified error: that error's reason. A DoNotRetry mark is not a
//     Reason of its own: its reason is what it wraps (see reasonIn).
//
// The reason and public text are clipped to MaxReasonBytes and
// MaxPublicBytes (a reason clipped after an underscore loses it).
//
// unclassified reports that the cause carried no Reason of its own (a bare
// DoNotRetry mark does not count as one). The caller must then log the
// cause's Error text — it may hold payload bytes — to its *slog.Logger with
// the message ID, and never write it to disk; nothing of cause but the
// three returned parts is ever persisted.
//
// The cause's methods (Reason, Code, Public, Unwrap, As, Is) are the
// caller's code: if one panics, the cause counts as carrying nothing,
// UNCLASSIFIED, 0, "". So does a cause whose tree does not end (an Unwrap
// that returns its own error, or any cycle: more than maxChainErrors
// errors; see chainEnds), whatever its errors carry: the call goes on and
// records the failure, as for any cause with no reason.
func classify(cause error) (reason string, code uint32, public string, unclassified bool) {
	reason, code, public, unclassified, _, _ = classifyNoting(cause)
	return reason, code, public, unclassified
}

// classifyNoting is classify that also returns, when one of the cause's
// methods panicked, what it panicked with ("" when none did), and whether
// the cause's tree does not end, so that the logger can be told.
func classifyNoting(cause error) (reason string, code uint32, public string, unclassified bool, panicked string, endless bool) {
	defer func() {
		if r := recover(); r != nil {
			reason, code, public, unclassified = ReasonUnclassified, 0, "", true
			panicked, endless = panicText(r), false
		}
	}()
	if cause != nil && !chainEnds(cause) {
		return ReasonUnclassified, 0, "", true, "", true
	}
	reason, code, public, unclassified = classifyUnclipped(cause)
	// (A reason is ASCII: clipped, it stays one if it does not then end
	// in an underscore.)
	return strings.TrimRight(clip(reason, MaxReasonBytes), "_"), code, clip(public, MaxPublicBytes), unclassified, "", false
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
// one handler failure, one log line. A cause whose method panicked is
// logged whatever ctx says, with what it panicked with, and so is one
// whose tree does not end, saying so: Consume cannot know either.
func judge(ctx context.Context, cause error) verdict {
	var v verdict
	var unclassified bool
	var panicked string
	var endless bool
	v.reason, v.code, v.public, unclassified, panicked, endless = classifyNoting(cause)
	switch {
	case panicked != "":
		v.text = fmt.Sprintf("a method of the cause (%T) panicked, so it is recorded as %s: %s; the cause's text: %s", cause, ReasonUnclassified, panicked, CauseText(cause))
	case endless:
		v.text = fmt.Sprintf("the chain of the cause (%T) does not end (more than %d errors: an Unwrap returns an error already in it), so it is recorded as %s; the cause's text: %s", cause, maxChainErrors, ReasonUnclassified, CauseText(cause))
	case unclassified && cause != nil && (ctx == nil || ctx.Value(causeLogged{}) == nil):
		v.text = CauseText(cause)
	}
	return v
}

// causeLogged is the key of a context value Consume sets on the context of
// the Nack or Reject that settles a failed delivery when it has a Logger:
// it has logged the handler's error, with the message's ID, so the broker
// does not log its text again. Without one it sets nothing, and the
// broker's Logger is where the text is kept.
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
	firstIn(cause, func(c coder) bool { code = c.Code(); return code != 0 })
	firstIn(cause, func(p publicer) bool { public = p.Public(); return public != "" })
	if reason = reasonIn(cause); reason != "" {
		return reason, code, public, false
	}
	if IsDoNotRetry(cause) {
		return ReasonNotRetryable, code, public, true
	}
	return ReasonUnclassified, code, public, true
}

// reasonIn returns the first Reason in err's tree that is SCREAMING_SNAKE
// (see firstIn), or "" when there is none. A DoNotRetry mark does not
// count: its Reason is NOT_RETRYABLE only for want of one in what it
// wraps, which the walk goes on into. Nor does a reason of another shape
// ("", "card declined: 4111..."): a dead letter's Reason is an identifier,
// written to disk, and a text in its place may hold what a cause's Error
// text may (payload bytes, secrets), which is only ever logged.
func reasonIn(err error) (reason string) {
	firstIn(err, func(r reasoner) bool {
		if _, mark := r.(*notRetryable); mark {
			return false
		}
		if got := r.Reason(); screamingSnake(got) {
			reason = got
			return true
		}
		return false
	})
	return reason
}

// screamingSnake reports whether s is a SCREAMING_SNAKE identifier: upper
// case letters and digits in words joined by single underscores, the first
// a letter.
func screamingSnake(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' || s[len(s)-1] == '_' {
		return false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '_' && s[i-1] != '_':
		default:
			return false
		}
	}
	return true
}

// firstIn looks for a T in err's tree for which has reports true, in the
// order errors.As looks: err, then what its Unwrap returns, depth first
// through each error of an Unwrap() []error (errors.Join, fmt.Errorf with
// several %w). At each error it takes what errors.As would: the error
// itself if it is a T, or else what its As method gives. It returns the
// first T accepted, or false when it found none. errors.As stops at the
// first T, accepted or not; firstIn goes past one that is not, so that an
// error carrying nothing of a part does not hide an error inside it that
// does.
//
// It looks at no more than maxChainErrors errors (see walkChain): classify
// first makes sure that the tree ends (see chainEnds). The
// methods it calls (As, Unwrap, and those has calls) are the cause's: a
// panic in one is the caller's to recover (classify does).
func firstIn[T any](err error, has func(T) bool) (found T, ok bool) {
	walkChain(err, func(e error) bool {
		if t, is := e.(T); is {
			if has(t) {
				found, ok = t, true
			}
		} else if x, is := e.(interface{ As(any) bool }); is {
			var t T
			if x.As(&t) && has(t) {
				found, ok = t, true
			}
		}
		return ok
	})
	return found, ok
}
