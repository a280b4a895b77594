// Package index is the projection of the log into queue state: every state
// change of a message is one event (a record of the write-ahead log), and
// the state of every queue is what applying the events in log order gives.
//
// Events assign absolute values — a lease says "deliveries = 3, expires at
// T", never "one more delivery" — so applying an event twice in a row
// leaves the queues' state as applying it once did (only the count of
// orphans, events naming no message held, grows: a second ack finds its
// message gone). Replaying a whole log a second time over the state it
// made is not idempotent: the publish of a message acknowledged since
// makes it again until its ack comes, and a dedup key it names is then
// remembered, forgotten by an eviction, and no longer taken by the later
// message that took it the first time. No open does that: it replays only
// what follows its checkpoint's position. The index keeps the position of each message's publish record, not its
// payload: payloads are read from the log when they are delivered.
//
// The clock is not part of the projected state: "leased until T" is state,
// "lapsed" is a question asked of it with the broker's clock (Promote).
// One answer is kept: a lease Promote saw lapse stays lapsed
// (Message.Lapsed) when the clock later reads earlier.
//
// # Event encoding
//
// An event is the body of one log record. The first byte is its kind; the
// rest is the kind's fields in the order listed, unsigned integers as
// uvarints, signed ones (instants, in Unix nanoseconds) as zig-zag varints,
// strings and byte strings as a uvarint length then the bytes, nonces as 8
// little-endian bytes. The encoding is FROZEN: a change needs a new kind,
// or (once, for the failure trailer below) fields appended after the last
// so that every record written before them decodes exactly as it did. A
// kind above the last one this build knows is a later build's record:
// Decode refuses it with ErrLaterKind, not as damage. A build that adds a
// kind also raises the checkpoint's version, so that an earlier build
// refuses its store at Open (ErrLaterVersion) rather than load a
// checkpoint past records it cannot read and meet them only at a rebuild.
//
//	kind 1  meta        secret [32 bytes]
//	kind 2  declare     queue, name, visibilityTimeout, retryDelay,
//	                    maxRetryDelay, maxDeliveries, maxMessageBytes,
//	                    capacity, dedupWindow (each a zig-zag varint,
//	                    durations in ns)
//	kind 3  publish     queue, seq, enqueuedAt, key, payload (the rest of
//	                    the record, no length)
//	kind 4  lease       queue, seq, deliveries, expiresAt, nonce
//	                    [, failure]
//	kind 5  ack         queue, seq
//	kind 6  nack        queue, seq, deliveries, visibleAt (AtOnce, the
//	                    earliest instant, for a message handed back at
//	                    once; logs written before it recorded 0 for that)
//	                    [, failure]
//	kind 7  deadletter  queue, seq, deliveries, failedAt, code, reason, cause
//	kind 8  extend      queue, seq, deliveries, expiresAt, nonce
//	kind 9  replay      queue, seq
//	kind 10 delete      queue, seq
//	kind 11 evict       queue, clock, window: forget the dedup keys enqueued
//	                    more than window before clock (see Queue.EvictSeen);
//	                    clock is also a reading of the broker clock. With
//	                    window MaxInt64 (nothing evicted) it is only that
//	                    reading: each segment's preamble carries one per
//	                    queue that has a reading (a publish or an
//	                    eviction), the latest at the rotation. A replay applies
//	                    every evict as logged, even behind a later reading.
//	kind 12 mark        nextSeq (unsigned; no queue): every message sequence
//	                    below it is taken. Written in each segment's
//	                    preamble, so that a log whose older segments were
//	                    removed never hands out a sequence twice.
//	kind 13 salvaged    (no fields): a salvage repaired the log before
//	                    this record, padding over damaged records, or
//	                    sealing a segment early. Written durably by the
//	                    open that salvaged, before any checkpoint of the
//	                    repaired log. It changes no state; a checkpoint
//	                    whose position is before it was taken of the log
//	                    as it was before the repair (an older index put
//	                    back), and may hold messages whose records are
//	                    gone: an open whose replay from a checkpoint meets
//	                    one rebuilds the state from the whole log instead.
//
// failure, optional, is code, reason, cause: the classified cause (never
// an unclassified error's text, never payload bytes) of the last failure a
// consumer reported for the message in its current life. A nack carries
// its own; a lease carries one only when it restates a message's state in
// a copy forward (StateEvent). It is present only with a non-empty reason;
// a record that ends before it (every one written before it existed, and
// every ordinary lease) carries none, and applied keeps the failure the
// message had. A publish of a new message and a replay start a life with
// no failure (a copy of a publish keeps the life it copies). A
// message whose last lease lapses dies with its failure's reason, code and
// cause, or LEASE_EXPIRED with none when no consumer reported one.
//
// seq is the message's sequence number, unique in the store and never
// reused; queue is the number its declare event gave the queue, below 2³¹
// (the table keeps the top bit of an entry's queue field for the stream):
// Decode refuses a larger one.
package index
