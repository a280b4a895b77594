package broker

import (
	"fmt"
	"strconv"
	"strings"
)

// Error is a classified error: a SCREAMING_SNAKE reason, a dotted-quad
// code, a wire-safe public text, and a private detail.
//
// It is the classified-cause rule made concrete. When a handler's error
// reaches [Broker.Nack] or [Rejecter.Reject], the broker records the Reason,
// the Code and the Public text with the dead letter, and never the private
// detail: that stays in the failing process's own log, joined to the record
// on disk by the message ID. Any error type with the methods
// Reason() string, Code() uint32 or Public() string plays the same part
// without importing this package; the parts are found as errors.As finds
// them, anywhere in the error's chain, each the first that carries
// something: an empty Reason or Public, or a Code of 0, is none, and does
// not hide one wrapped inside it.
//
// An *Error is immutable and safe for concurrent use. It retains the error
// it wraps, if any (see [Error.Wrap]). A nil *Error is usable too, as an
// error that carries nothing: no reason, no code, no text. Handed to Nack
// or Reject as a cause — the typed nil of a handler that declared
// `var err *Error` and returned it — it is no cause at all (UNEXPLAINED).
type Error struct {
	reason  string
	code    uint32
	public  string
	private string
	err     error // wrapped, may be nil
}

// NewError returns a classified error. reason is the SCREAMING_SNAKE
// identifier of the failure (LEASE_EXPIRED, CARD_DECLINED, ...: upper case
// letters and digits, words joined by single underscores, the first a
// letter); a reason of another shape is recorded as none (a dead letter
// then says UNCLASSIFIED, and the error's text goes to the log, as for
// any error without a reason). code is its dotted-quad code (see
// [FormatCode]), or 0 for none; public is wire-safe text that may be shown
// to anyone and is recorded with a dead letter, so it must never contain
// payload bytes or secrets; private is detail for the process's own log,
// and this broker never persists it.
//
// Codes of domain 7 (7.x.x.x, the first byte) are this package's own (see
// the table above [MessageTooLarge]); a program's codes use any other
// domain, one per service or library, so that codes recorded with dead
// letters stay unambiguous.
func NewError(reason string, code uint32, public, private string) *Error {
	return &Error{reason: reason, code: code, public: public, private: private}
}

// Wrap returns a copy of e that wraps cause in place of whatever e wrapped:
// errors.Is and errors.As see cause through the copy (and no longer what e
// wrapped), and its Error text ends with cause's. The copy still matches e
// with errors.Is (see [Error.Is]). e is not modified.
// A nil e gives an *Error that carries cause alone.
func (e *Error) Wrap(cause error) *Error {
	if e == nil {
		return &Error{err: cause}
	}
	c := *e
	c.err = cause
	return &c
}

// Error returns the reason, the code, the public text, the private detail
// if any and the wrapped error's text if any. This text is for the
// process's own log, never for the wire or the disk: it holds the private
// detail.
func (e *Error) Error() string {
	if e == nil {
		return "broker.Error(nil)"
	}
	var b strings.Builder
	b.WriteString(e.reason)
	if e.code != 0 {
		b.WriteString(" (")
		b.WriteString(FormatCode(e.code))
		b.WriteString(")")
	}
	parts := []string{e.public, e.private}
	if e.err != nil {
		parts = append(parts, e.err.Error())
	}
	for _, part := range parts {
		if part != "" {
			if b.Len() > 0 {
				b.WriteString(": ")
			}
			b.WriteString(part)
		}
	}
	if b.Len() == 0 {
		return "broker.Error(empty)"
	}
	return b.String()
}

// Reason returns the SCREAMING_SNAKE identifier of the failure ("" for a
// nil *Error).
func (e *Error) Reason() string {
	if e == nil {
		return ""
	}
	return e.reason
}

// Code returns the dotted-quad code as a uint32, or 0 when there is none.
func (e *Error) Code() uint32 {
	if e == nil {
		return 0
	}
	return e.code
}

// Public returns the wire-safe text, the only text a broker records.
func (e *Error) Public() string {
	if e == nil {
		return ""
	}
	return e.public
}

// Unwrap returns the wrapped error, or nil.
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.err
}

// Is reports whether target is an *Error with the same reason and code, so
// that a copy made by [Error.Wrap] still matches its sentinel. The public
// and private texts do not take part: they describe one occurrence, while
// reason and code name the kind of failure.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e != nil && t != nil && t.reason == e.reason && t.code == e.code
}

// FormatCode renders code as a dotted quad "a.b.c.d", a being its most
// significant byte: 0x07010003 is "7.1.0.3".
func FormatCode(code uint32) string {
	return fmt.Sprintf("%d.%d.%d.%d", byte(code>>24), byte(code>>16), byte(code>>8), byte(code))
}

// ParseCode parses a dotted quad "a.b.c.d" of decimal bytes, the inverse of
// [FormatCode]. Each part is 0–255 written without sign or leading zeros,
// so every code has exactly one spelling; anything else is an error.
func ParseCode(s string) (uint32, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return 0, fmt.Errorf("broker: code %q is not a dotted quad a.b.c.d", s)
	}
	var code uint32
	for _, p := range parts {
		if p == "" || len(p) > 3 || (len(p) > 1 && p[0] == '0') || strings.Trim(p, "0123456789") != "" {
			return 0, fmt.Errorf("broker: code %q: part %q is not a decimal byte", s, p)
		}
		n, err := strconv.Atoi(p)
		if err != nil || n > 255 {
			return 0, fmt.Errorf("broker: code %q: part %q is not a decimal byte", s, p)
		}
		code = code<<8 | uint32(n)
	}
	return code, nil
}

// Errors returned by this package and the brokers of this module. Each is an
// *Error, wrapped with context by the call that returns it
// (fmt.Errorf("...: %w", Sentinel)); check with errors.Is. Their reasons
// and codes (domain 7 = queue) are frozen: they are recorded with dead
// letters and may be matched by other programs.
//
//	sentinel            reason                 code
//	MessageTooLarge     MESSAGE_TOO_LARGE      7.1.0.1
//	InvalidBatchSize    INVALID_BATCH_SIZE     7.1.0.2
//	LeaseExpired        LEASE_EXPIRED          7.1.0.3
//	UnknownReceipt      UNKNOWN_RECEIPT        7.1.0.4
//	QueueMisconfigured  QUEUE_MISCONFIGURED    7.1.0.5
//	DeadLetterNotFound  DEAD_LETTER_NOT_FOUND  7.1.0.6
//	QueueFull           QUEUE_FULL             7.1.0.7
//	Closed              CLOSED                 7.1.0.8
//	Corrupt             CORRUPT                7.1.0.9
//	Locked              LOCKED                 7.1.0.10
//	InvalidDedupKey     INVALID_DEDUP_KEY      7.1.0.11 (declared with PublishKeyed)
var (
	// MessageTooLarge is returned by Publish (and its variants) for a
	// payload larger than the queue's [PolicyValue.MaxMessageBytes];
	// nothing is enqueued.
	MessageTooLarge = NewError("MESSAGE_TOO_LARGE", codeQueue|1, "message payload exceeds the queue's MaxMessageBytes", "")
	// InvalidBatchSize is returned by Receive and DeadLetters for a max
	// that is not positive, by PublishBatch for an empty batch or one too
	// large for the log to commit at once, and by [Consume] for a negative
	// Batch, or a Concurrency or Prefetch out of range. The text around it names the
	// size and the bound.
	InvalidBatchSize = NewError("INVALID_BATCH_SIZE", codeQueue|2, "the batch size is out of range", "")
	// LeaseExpired is returned by Ack, Nack, Reject and Extend for a
	// receipt whose lease has lapsed, and for one whose lease ended
	// otherwise: its message was acked, nacked or rejected, or Extend
	// replaced the receipt with a new one. Nothing moves.
	LeaseExpired = NewError(ReasonLeaseExpired, codeQueue|3, "the lease has lapsed", "")
	// UnknownReceipt is returned by Ack, Nack, Reject and Extend for a
	// receipt the queue never issued or cannot parse; nothing moves.
	UnknownReceipt = NewError("UNKNOWN_RECEIPT", codeQueue|4, "the receipt names no lease of this queue", "")
	// QueueMisconfigured is returned by [PolicyValue.Validate] (and so when
	// a queue is opened) for a policy field it refuses, by Extend for a
	// non-positive or unrecordable duration, and by [Consume] for an
	// option it refuses. The text names the field and its value. It is
	// returned too for Options outside their bounds (Open), a queue name
	// or a MaxMessageBytes that [Store.Queue] refuses, a nil context, a
	// method of a nil *Store, *Queue or *Memory, a clock reading no broker
	// can record (or a clock that panics), and a lease or retry instant
	// past year 2262; the text says which.
	QueueMisconfigured = NewError("QUEUE_MISCONFIGURED", codeQueue|5, "the queue's configuration is invalid", "")
	// DeadLetterNotFound is returned by ReplayDeadLetter and
	// DeleteDeadLetter for an id the dead-letter store does not hold.
	DeadLetterNotFound = NewError("DEAD_LETTER_NOT_FOUND", codeQueue|6, "no such dead letter", "")
	// QueueFull is returned by Publish (and its variants) when the queue
	// already holds [PolicyValue.Capacity] live messages; nothing is
	// enqueued and the publish is counted as shed. ReplayDeadLetter
	// returns it too when the queue is at its Capacity: the dead letter
	// stays as it was, and the refusal is not counted as shed (the
	// message was admitted once). Room comes back as consumers ack,
	// reject or dead-letter messages (or when the queue is declared again
	// with a larger Capacity), so a caller retries after a delay that
	// grows, with jitter (as for a throttled SQS or Kafka producer), or
	// passes the refusal on to its own caller; the queue's Stats (Ready,
	// Leased, Delayed, and Acked over time) show how fast room is made.
	QueueFull = NewError("QUEUE_FULL", codeQueue|7, "the queue is full", "")
	// Closed is returned by every call on a store or queue that was
	// closed, and ends [Consume] when Receive returns it.
	Closed = NewError("CLOSED", codeQueue|8, "the store or queue is closed", "")
	// Corrupt is returned by Open when the log fails verification, and by
	// every call once the store found damage in its log or its index while
	// running (it must be reopened); the text names the file and byte
	// offset. Options.Salvage opens a log past damaged frames; a record
	// whose frame verifies but that holds no event a store writes (its
	// fields malformed) is refused with or without it: it is not skipped.
	Corrupt = NewError("CORRUPT", codeQueue|9, "the store's files failed verification", "")
	// Locked is returned by Open when another store, in this process or
	// another, holds the directory, and by Backup when another Backup, of
	// another store or in another process, is writing to the same
	// directory (its partial copy's mark is locked).
	Locked = NewError("LOCKED", codeQueue|10, "the store directory is in use", "")
)

// codeQueue is the code prefix 7.1.0.0 of this module's errors.
const codeQueue uint32 = 7<<24 | 1<<16

// DoNotRetry marks err as a failure no retry can fix. Returned by a
// [Handler], it makes [Consume] reject the delivery to the dead-letter
// store ([Rejecter]) instead of nacking it.
//
// The returned error wraps err, so errors.Is and errors.As see through it.
// Its Reason is err's (the first Reason() string method in err's chain that
// returns a SCREAMING_SNAKE reason; "" and any other text count as none),
// or NOT_RETRYABLE when err carries none; it has no Code or Public method of its own, so those are found in
// err's chain. DoNotRetry(nil) is an error whose reason is NOT_RETRYABLE.
// It retains err.
func DoNotRetry(err error) error {
	return &notRetryable{err: err}
}

// IsDoNotRetry reports whether err, or any error in its chain, was made by
// [DoNotRetry], as errors.As finds it. An err whose chain does not end (an
// Unwrap that returns its own error, or any cycle, where errors.As would
// never return) is reported as not made by it: the broker takes such an
// error as one that carries nothing (see [Classify]).
func IsDoNotRetry(err error) bool {
	if err == nil || !chainEnds(err) {
		return false
	}
	found, _ := walkChain(err, func(e error) bool {
		if _, ok := e.(*notRetryable); ok {
			return true
		}
		var n *notRetryable
		x, ok := e.(interface{ As(any) bool })
		return ok && x.As(&n)
	})
	return found
}

// notRetryable is the error DoNotRetry returns.
type notRetryable struct{ err error }

func (n *notRetryable) Error() string {
	if n.err == nil {
		return "not retryable"
	}
	return "not retryable: " + n.err.Error()
}

func (n *notRetryable) Unwrap() error { return n.err }

// Reason returns the wrapped error's reason (see reasonIn), or
// NOT_RETRYABLE when it has none.
func (n *notRetryable) Reason() string {
	if r := reasonIn(n.err); r != "" {
		return r
	}
	return ReasonNotRetryable
}
