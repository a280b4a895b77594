package index

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind is an event's kind: the first byte of its record.
type Kind uint8

// Event kinds. FROZEN: see the package documentation.
const (
	KindMeta       Kind = 1
	KindDeclare    Kind = 2
	KindPublish    Kind = 3
	KindLease      Kind = 4
	KindAck        Kind = 5
	KindNack       Kind = 6
	KindDeadLetter Kind = 7
	KindExtend     Kind = 8
	KindReplay     Kind = 9
	KindDelete     Kind = 10
	KindEvict      Kind = 11
	KindMark       Kind = 12
	KindSalvaged   Kind = 13
)

var kindNames = [...]string{
	KindMeta: "meta", KindDeclare: "declare", KindPublish: "publish", KindLease: "lease",
	KindAck: "ack", KindNack: "nack", KindDeadLetter: "deadletter", KindExtend: "extend",
	KindReplay: "replay", KindDelete: "delete", KindEvict: "evict", KindMark: "mark",
	KindSalvaged: "salvaged",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// SecretSize is the size of the store secret carried by the meta event.
const SecretSize = 32

// ErrBadEvent is returned by Decode for a record that is not a well-formed
// event, and by Apply, Queue.Apply, Queue.Commit and Declare for an event
// (or a declaration, or a position) that no log this code writes holds;
// those change nothing. Check with errors.Is.
var ErrBadEvent = errors.New("index: malformed event")

// ErrLaterKind is returned by Decode for a record whose kind is above the
// last one this build knows (LastKind): a later build added it, since the
// event encoding changes only by new kinds (see the package
// documentation), and the record's frame verified. It is not damage, and
// nothing may repair it: the record is for a build that reads its kind.
// It wraps [errors.ErrUnsupported], and not [ErrBadEvent].
var ErrLaterKind = fmt.Errorf("index: event kind this build does not read: %w", errors.ErrUnsupported)

// LastKind is the highest kind this build knows.
const LastKind = KindSalvaged

// Event is one state change. Which fields mean something depends on Kind
// (see the package documentation); the others are zero. Decode's Payload
// and Secret alias the decoded record; its strings (Key, Name, Reason,
// Cause) are copies.
//
// A nack event, and a lease event, may carry Code, Reason and Cause: the
// classified cause of the last failure a consumer reported for the
// message (a nack's own; in a lease that restates a message's state, the
// last one before it), with a non-empty Reason. One without (Reason
// empty, as in every record written before these fields existed) reports
// no failure.
type Event struct {
	Kind       Kind
	Queue      uint32
	Seq        uint64
	Time       int64 // enqueuedAt, expiresAt, visibleAt, failedAt or the eviction clock, in Unix ns
	Window     int64 // the dedup window of an evict event, in ns (NoEviction: a clock reading only)
	Deliveries uint32
	Nonce      uint64
	Code       uint32
	Key        string
	Payload    []byte
	Reason     string
	Cause      string
	Name       string
	Policy     Policy
	Secret     []byte
}

// Append appends the encoding of e to dst.
func (e *Event) Append(dst []byte) []byte {
	if e.Kind == KindPublish {
		return append(e.appendPublishHead(dst), e.Payload...)
	}
	dst = append(dst, byte(e.Kind))
	switch e.Kind {
	case KindMeta:
		return append(dst, e.Secret...)
	case KindMark:
		return binary.AppendUvarint(dst, e.Seq)
	case KindSalvaged:
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(e.Queue))
	switch e.Kind {
	case KindDeclare:
		dst = appendString(dst, e.Name)
		return e.Policy.append(dst)
	case KindEvict:
		dst = binary.AppendVarint(dst, e.Time)
		return binary.AppendVarint(dst, e.Window)
	}
	dst = binary.AppendUvarint(dst, e.Seq)
	switch e.Kind {
	case KindLease, KindExtend:
		dst = binary.AppendUvarint(dst, uint64(e.Deliveries))
		dst = binary.AppendVarint(dst, e.Time)
		dst = binary.LittleEndian.AppendUint64(dst, e.Nonce)
		if e.Kind == KindLease {
			dst = e.appendFailure(dst)
		}
	case KindNack:
		dst = binary.AppendUvarint(dst, uint64(e.Deliveries))
		dst = binary.AppendVarint(dst, e.Time)
		dst = e.appendFailure(dst)
	case KindDeadLetter:
		dst = binary.AppendUvarint(dst, uint64(e.Deliveries))
		dst = binary.AppendVarint(dst, e.Time)
		dst = binary.AppendUvarint(dst, uint64(e.Code))
		dst = appendString(dst, e.Reason)
		dst = appendString(dst, e.Cause)
	}
	return dst
}

// appendFailure appends the optional failure trailer of a nack or lease
// event: its Code, Reason and Cause, or nothing when Reason is empty. A
// record written before the trailer existed ends where the trailer would
// begin, and decodes as one without a failure; one with the trailer has a
// Reason, so each event still has exactly one encoding.
func (e *Event) appendFailure(dst []byte) []byte {
	if e.Reason == "" {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(e.Code))
	dst = appendString(dst, e.Reason)
	return appendString(dst, e.Cause)
}

// failureLen is the length of e's failure trailer (see appendFailure).
func (e *Event) failureLen() int {
	if e.Reason == "" {
		return 0
	}
	return uvarintLen(uint64(e.Code)) + uvarintLen(uint64(len(e.Reason))) + len(e.Reason) + uvarintLen(uint64(len(e.Cause))) + len(e.Cause)
}

// encodedLen is len(e.Append(nil)), computed without encoding for the
// kinds the index counts at every call (a publish, and the events that
// restate a message's state); the others are encoded.
func (e *Event) encodedLen() int {
	n := 1 + uvarintLen(uint64(e.Queue)) + uvarintLen(e.Seq)
	switch e.Kind {
	case KindPublish:
		return n + varintLen(e.Time) + uvarintLen(uint64(len(e.Key))) + len(e.Key) + len(e.Payload)
	case KindLease:
		return n + uvarintLen(uint64(e.Deliveries)) + varintLen(e.Time) + 8 + e.failureLen()
	case KindExtend:
		return n + uvarintLen(uint64(e.Deliveries)) + varintLen(e.Time) + 8
	case KindNack:
		return n + uvarintLen(uint64(e.Deliveries)) + varintLen(e.Time) + e.failureLen()
	case KindDeadLetter:
		return n + uvarintLen(uint64(e.Deliveries)) + varintLen(e.Time) + uvarintLen(uint64(e.Code)) +
			uvarintLen(uint64(len(e.Reason))) + len(e.Reason) + uvarintLen(uint64(len(e.Cause))) + len(e.Cause)
	}
	return len(e.Append(nil))
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}

// appendPublishHead appends what comes before the payload in the encoding
// of publish event e.
func (e *Event) appendPublishHead(dst []byte) []byte {
	dst = append(dst, byte(KindPublish))
	dst = binary.AppendUvarint(dst, uint64(e.Queue))
	dst = binary.AppendUvarint(dst, e.Seq)
	dst = binary.AppendVarint(dst, e.Time)
	return appendString(dst, e.Key)
}

// Restamp returns the encoding of publish event e, given rec, its encoding
// made before e's sequence number and time were final (and e.Payload
// unchanged since; it may alias rec). Only the head before the payload
// differs: when it keeps its length, Restamp rewrites it in rec and
// returns rec, and the payload is not copied again; otherwise it returns a
// new encoding of e.
func (e *Event) Restamp(rec []byte) []byte {
	var a [32]byte
	head := e.appendPublishHead(a[:0])
	if e.Kind == KindPublish && len(rec) == len(head)+len(e.Payload) {
		copy(rec, head)
		return rec
	}
	return e.Append(make([]byte, 0, len(head)+len(e.Payload)))
}

// Decode decodes one event from rec. The result's byte slices (Payload,
// Secret) alias rec; its strings are copies. A record that is not a
// well-formed event is refused with ErrBadEvent, in an error that names
// its kind and the first field found wrong.
func Decode(rec []byte) (Event, error) {
	d := decoder{b: rec}
	e := Event{Kind: Kind(d.byte())}
	if d.err != nil {
		return e, d.err // an empty record has no kind to name
	}
	switch e.Kind {
	case KindMeta:
		e.Secret = d.bytes(SecretSize, "secret")
		return e, d.finish(e.Kind)
	case KindMark:
		e.Seq = d.uvarint("next sequence")
		return e, d.finish(e.Kind)
	case KindSalvaged:
		return e, d.finish(e.Kind)
	case KindDeclare:
		e.Queue = d.queue()
		e.Name = d.string("name")
		e.Policy = d.policy()
		return e, d.finish(e.Kind)
	case KindEvict:
		e.Queue = d.queue()
		e.Time = d.varint("clock")
		e.Window = d.varint("window")
		return e, d.finish(e.Kind)
	case KindPublish, KindLease, KindAck, KindNack, KindDeadLetter, KindExtend, KindReplay, KindDelete:
	default:
		if e.Kind > LastKind {
			return e, fmt.Errorf("%w: kind %d, written by a later build; this build reads kinds 1 to %d", ErrLaterKind, e.Kind, LastKind)
		}
		return e, fmt.Errorf("%w: unknown kind %d", ErrBadEvent, e.Kind)
	}
	e.Queue = d.queue()
	e.Seq = d.uvarint("seq")
	switch e.Kind {
	case KindPublish:
		e.Time = d.varint("enqueuedAt")
		e.Key = d.string("key")
		e.Payload = d.rest()
	case KindLease, KindExtend:
		e.Deliveries = d.u32("deliveries")
		e.Time = d.varint("expiresAt")
		e.Nonce = binary.LittleEndian.Uint64(d.bytes(8, "nonce"))
		if e.Kind == KindLease {
			d.failure(&e)
		}
	case KindNack:
		e.Deliveries = d.u32("deliveries")
		e.Time = d.varint("visibleAt")
		d.failure(&e)
	case KindDeadLetter:
		e.Deliveries = d.u32("deliveries")
		e.Time = d.varint("failedAt")
		e.Code = d.u32("code")
		e.Reason = d.string("reason")
		e.Cause = d.string("cause")
	}
	return e, d.finish(e.Kind)
}

// failure reads the optional failure trailer of a nack or lease event
// (see Event.appendFailure): none when the record ends, as every such
// record written before the trailer existed does.
func (d *decoder) failure(e *Event) {
	if d.err != nil || len(d.b) == 0 {
		return
	}
	e.Code = d.u32("failure code")
	e.Reason = d.string("failure reason")
	e.Cause = d.string("failure cause")
	if d.err == nil && e.Reason == "" {
		d.fail("failure trailer without a reason")
	}
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// decoder reads fields from a record, remembering the first failure.
// Each read is given the name of the field it reads, which a failure
// names: a constant, so the success path costs nothing more.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadEvent, what)
	}
}

// failField fails with what is wrong with field.
func (d *decoder) failField(field, what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %s", ErrBadEvent, field, what)
	}
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("empty record")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// The encoder writes every varint in its shortest form, so a longer form
// (a last byte of zero) is refused like any other malformed field: each
// event has exactly one encoding.
func canonical(b []byte, n int) bool { return n == 1 || b[n-1] != 0 }

func (d *decoder) uvarint(field string) uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || !canonical(d.b, n) {
		d.failField(field, "bad unsigned field")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32(field string) uint32 {
	v := d.uvarint(field)
	if v > 1<<32-1 {
		d.failField(field, fmt.Sprintf("%d exceeds 32 bits", v))
		return 0
	}
	return uint32(v)
}

// queue reads a queue number, which is below 2³¹.
func (d *decoder) queue() uint32 {
	v := d.u32("queue")
	if v > maxQueueID {
		d.fail(fmt.Sprintf("queue number %d is not below 2^31", v))
		return 0
	}
	return v
}

func (d *decoder) varint(field string) int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 || !canonical(d.b, n) {
		d.failField(field, "bad signed field")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(n int, field string) []byte {
	if n < 0 || len(d.b) < n {
		d.failField(field, fmt.Sprintf("%d bytes run past the record (%d left)", n, len(d.b)))
		return make([]byte, max(n, 0))
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) string(field string) string {
	n := d.uvarint(field)
	if n > uint64(len(d.b)) {
		d.failField(field, fmt.Sprintf("%d bytes run past the record (%d left)", n, len(d.b)))
		return ""
	}
	return string(d.bytes(int(n), field))
}

func (d *decoder) rest() []byte {
	b := d.b
	d.b = nil
	return b
}

func (d *decoder) finish(k Kind) error {
	if d.err == nil && len(d.b) > 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return fmt.Errorf("%s event: %w", k, d.err)
	}
	return nil
}
