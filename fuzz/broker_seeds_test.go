package fuzz

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// brokerSeeds are the generated inputs of FuzzBrokerDifferential: short
// scenarios of each feature, and random runs.
func brokerSeeds(testing.TB) []seed {
	o := func(k opKind, q int, a, b byte) op { return op{kind: k, q: q, a: a, b: b} }
	const (
		fwd1s     = 2
		fwd3s     = 4
		fwd5s     = 5
		fwd31s    = 7
		fwd61s    = 8
		fwdNext   = 10
		fwdBefore = 12
		fwdEdge   = 13
		fwdPast   = 14
		back1s    = 1
		back2m    = 5
		backSeen  = 6
		liveFirst = 0
	)
	scenarios := map[string][]op{
		"publish-receive-ack": {
			o(opPublish, 0, 10, 0), o(opPublish, 0, 0, 0), o(opPublish, 1, 32, 0), o(opReceive, 0, 2, 0),
			o(opAck, 0, liveFirst, 0), o(opNack, 0, liveFirst, 2), o(opStats, 0, 0, 0), o(opForward, 0, fwd1s, 0),
			o(opReceive, 0, 5, 0), o(opReceive, 1, 1, 0), o(opAck, 1, liveFirst, 0), o(opStats, 0, 0, 0),
		},
		"lapse-to-dead-letter": {
			o(opPublish, 0, 5, 0), o(opReceive, 0, 1, 0), o(opForward, 0, fwdNext, 0), o(opReceive, 0, 1, 0),
			o(opForward, 0, fwdNext, 0), o(opStats, 0, 0, 0), o(opDeadLetters, 0, 3, 0), o(opReplay, 0, 0, 0),
			o(opReceive, 0, 1, 0), o(opReject, 0, liveFirst, 4), o(opDeadLetters, 0, 3, 0), o(opDelete, 0, 0, 0),
		},
		"retry-curve": {
			o(opPublish, 1, 3, 0), o(opReceive, 1, 1, 0), o(opNack, 1, liveFirst, 0), o(opForward, 1, fwdNext, 0),
			o(opReceive, 1, 1, 0), o(opNack, 1, liveFirst, 1), o(opForward, 1, fwdNext, 0), o(opReceive, 1, 1, 0),
			o(opNack, 1, liveFirst, 5), o(opForward, 1, fwdNext, 0), o(opReceive, 1, 1, 0), o(opNack, 1, liveFirst, 2),
			o(opDeadLetters, 1, 7, 0),
		},
		"extend": {
			o(opPublish, 0, 1, 0), o(opReceive, 0, 1, 0), o(opExtend, 0, liveFirst, 3), o(opAck, 0, 5, 0),
			o(opForward, 0, fwd5s, 0), o(opExtend, 0, liveFirst, 7), o(opExtend, 0, 6, 0), o(opExtend, 0, 15, 1),
			o(opForward, 0, fwdNext, 0), o(opAck, 0, liveFirst, 0), o(opStats, 0, 0, 0),
		},
		"dedup": {
			o(opPublishKeyed, 0, 0, 4), o(opPublishKeyed, 0, 0, 5), o(opReceive, 0, 1, 0), o(opAck, 0, liveFirst, 0),
			o(opPublishKeyed, 0, 0, 6), o(opForward, 0, fwdEdge, 0), o(opPublishKeyed, 0, 0, 7), o(opForward, 0, fwdPast, 0),
			o(opPublishKeyed, 0, 0, 8), o(opPublishKeyed, 1, 6, 0), o(opPublishKeyed, 1, 7, 0), o(opStats, 0, 0, 0),
		},
		"capacity": append(repeat(o(opPublish, 1, 4, 0), 8),
			o(opPublish, 1, 4, 0), o(opPublishKeyed, 1, 1, 2), o(opPublishBatch, 1, 2, 3), o(opReceive, 1, 5, 0),
			o(opPublish, 1, 4, 0), o(opPublishBatch, 0, 0, 0), o(opPublishBatch, 0, 5, 230), o(opStats, 0, 0, 0)),
		"restarts": {
			o(opPublish, 0, 9, 0), o(opPublishKeyed, 1, 2, 3), o(opReceive, 0, 1, 0), o(opReopen, 0, 0, 0),
			o(opAck, 0, liveFirst, 0), o(opPublish, 0, 9, 0), o(opReceive, 0, 1, 0), o(opRebuild, 0, 0, 0),
			o(opNack, 0, liveFirst, 0), o(opPublishKeyed, 1, 2, 3), o(opCrash, 0, 0, 0), o(opReceive, 0, 2, 0),
			o(opAudit, 0, 0, 0), o(opPublishKeyed, 1, 2, 3),
		},
		"clock-back": {
			o(opPublish, 0, 2, 0), o(opReceive, 0, 1, 0), o(opForward, 0, fwdNext, 0), o(opStats, 0, 0, 0),
			o(opBack, 0, back1s, 0), o(opAck, 0, liveFirst, 0), o(opStats, 0, 0, 0), o(opReceive, 0, 1, 0),
			o(opBack, 0, back2m, 0), o(opPublish, 0, 2, 0), o(opReceive, 0, 3, 0),
		},
		"errors": {
			o(opReceive, 0, 0, 0), o(opDeadLetters, 1, 0, 0), o(opPublishKeyed, 0, 6, 0), o(opPublishKeyed, 0, 7, 0),
			o(opPublish, 0, 70, 0), o(opAck, 0, 7, 0), o(opExtend, 0, 7, 7), o(opReplay, 0, 3, 0), o(opDelete, 1, 7, 0),
			o(opPublish, 1, 2, 0), o(opReceive, 1, 1, 0), o(opAck, 0, 6, 0), o(opNack, 1, 7, 0), o(opAck, 1, 7, 0),
		},
		// Old segments pinned by a dead letter, a lease and keys, then
		// churn: rotations, checkpoints, copies forward, reclamation, and
		// a power loss in the middle of it.
		"reclaim": append(append([]op{
			o(opPublishKeyed, 0, 0, 4), o(opPublishKeyed, 0, 1, 4), o(opPublish, 1, 3, 0), o(opReceive, 0, 2, 0),
			o(opReject, 0, liveFirst, 2), o(opReceive, 1, 1, 0), o(opPublishKeyed, 1, 2, 4),
		}, repeat(o(opChurn, 0, 18, 0), 12)...),
			o(opCrash, 0, 0, 0), o(opChurn, 0, 18, 0), o(opChurn, 0, 18, 0), o(opAudit, 0, 0, 0), o(opDeadLetters, 0, 5, 0),
			o(opPublishKeyed, 0, 0, 4), o(opPublishKeyed, 1, 2, 4), o(opAck, 1, liveFirst, 0)),
		// A keyed duplicate reads the clock at 31 s (logged as an
		// eviction of nothing); the clock steps back and a key is published at -89 s; after a
		// rebuild the clock is at 3 s, behind that reading: nothing may
		// be evicted, so "b" is still a duplicate.
		"evict-restart": {
			o(opPublishKeyed, 0, 0, 1), o(opForward, 0, fwd31s, 0), o(opPublishKeyed, 0, 0, 1), o(opBack, 0, back2m, 0),
			o(opPublishKeyed, 0, 1, 1), o(opRebuild, 0, 0, 0), o(opForward, 0, fwd61s, 0), o(opForward, 0, fwd31s, 0),
			o(opPublishKeyed, 0, 1, 1),
		},
		// Old segments pinned by a dead letter, a lease on its second
		// delivery, a nacked message and the key of an acknowledged one,
		// then churn, so that they are copied forward and their segments
		// reclaimed, then a rebuild of the index from what is left of the
		// log: the copies alone must give every message its state.
		"reclaim-rebuild": append(append([]op{
			o(opPublishKeyed, 0, 0, 4), o(opPublishKeyed, 0, 1, 4), o(opPublish, 1, 3, 0), o(opPublish, 1, 3, 0),
			o(opReceive, 0, 2, 0), o(opAck, 0, liveFirst, 0), o(opReject, 0, liveFirst, 2), o(opReceive, 1, 1, 0),
			o(opForward, 1, fwd5s, 0), o(opReceive, 1, 2, 0), o(opNack, 1, 8, 1), o(opForward, 1, fwd1s, 0),
		}, repeat(o(opChurn, 0, 18, 0), 14)...),
			o(opRebuild, 0, 0, 0), o(opDeadLetters, 0, 5, 0), o(opDeadLetters, 1, 5, 0)),
		// A last lease that lapses at the instant the store is reopened
		// died before the open: the new process does not count it.
		"reopen-at-lapse": {
			o(opPublish, 0, 2, 0), o(opReceive, 0, 1, 0), o(opForward, 0, fwdNext, 0), o(opReceive, 0, 1, 0),
			o(opForward, 0, fwdNext, 0), o(opReopen, 0, 0, 0), o(opDeadLetters, 0, 3, 0), o(opStats, 0, 0, 0),
		},
		// Replaying and deleting last leases that lapsed, with no call in
		// between that moved them to the dead letters: the replay and the
		// delete find them there.
		"replay-unswept": {
			o(opPublish, 0, 2, 0), o(opPublish, 0, 3, 0), o(opReceive, 0, 2, 0), o(opForward, 0, fwdNext, 0),
			o(opReceive, 0, 2, 0), o(opForward, 0, fwdNext, 0), o(opReplay, 0, 0, 0), o(opDelete, 0, 4, 0),
			o(opReceive, 0, 2, 0), o(opStats, 0, 0, 0),
		},
		// An Ack refused for a lapsed lease observed the lapse: with the
		// clock set back before ExpiresAt the receipt stays refused.
		"settle-lapse": {
			o(opPublish, 0, 2, 0), o(opReceive, 0, 1, 0), o(opForward, 0, fwdNext, 0), o(opAck, 0, liveFirst, 0),
			o(opBack, 0, backSeen, 0), o(opAck, 0, liveFirst, 0), o(opStats, 0, 0, 0),
		},
	}
	const (
		polOwn     = 0
		polLower   = 1 // MaxDeliveries 1, shorter leases, no retry delay, Capacity down
		polRaise   = 2 // MaxDeliveries up, longer leases, unbounded
		polInvalid = invalidPolicy
		// Consume's first argument: Prefetch, and the handler's last
		// call the third of three receivable messages.
		consumePrefetch = 4
		consumeAll3     = 2 << 3
	)
	// Inputs of the second format: policy changes, and SyncPublish.
	scenariosV2 := map[string]struct {
		sync broker.SyncMode
		ops  []op
	}{
		// A lease seen to lapse on delivery 1 of 2; MaxDeliveries
		// lowered to 1 hands it back at once, its next delivery is its
		// last and dies when it lapses; the change survives a reopen, a
		// rebuild and a power loss.
		"policy-lower": {broker.SyncAll, []op{
			o(opPublish, 0, 5, 0), o(opPublish, 0, 6, 0), o(opReceive, 0, 2, 0), o(opForward, 0, fwdNext, 0),
			o(opStats, 0, 0, 0), o(opPolicy, 0, polLower, 0), o(opReceive, 0, 1, 0), o(opForward, 0, fwdNext, 0),
			o(opDeadLetters, 0, 3, 0), o(opReopen, 0, 0, 0), o(opReceive, 0, 1, 0), o(opNack, 0, liveFirst, 2),
			o(opRebuild, 0, 0, 0), o(opPublish, 0, 7, 0), o(opReceive, 0, 1, 0), o(opCrash, 0, 0, 0),
			o(opPolicy, 0, polOwn, 0), o(opReceive, 0, 1, 0), o(opAudit, 0, 0, 0),
		}},
		// A lease on its last delivery; MaxDeliveries raised: it lapses
		// back into the queue, the next lease is longer and the retry
		// curve the new one.
		"policy-raise": {broker.SyncAll, []op{
			o(opPublish, 0, 5, 0), o(opReceive, 0, 1, 0), o(opForward, 0, fwdNext, 0), o(opReceive, 0, 1, 0),
			o(opPolicy, 0, polRaise, 0), o(opStats, 0, 0, 0), o(opForward, 0, fwdNext, 0), o(opReceive, 0, 1, 0),
			o(opNack, 0, liveFirst, 0), o(opCrash, 0, 0, 0), o(opForward, 0, fwdNext, 0), o(opReceive, 0, 1, 0),
			o(opPolicy, 0, polLower, 0), o(opNack, 0, liveFirst, 1), o(opDeadLetters, 0, 3, 0), o(opStats, 0, 0, 0),
		}},
		// Capacity lowered below what the queue holds: publishes and a
		// replay are refused; a refused policy changes nothing; an
		// unbounded one admits again.
		"policy-capacity": {broker.SyncAll, append(repeat(o(opPublish, 1, 4, 0), 6),
			o(opPolicy, 1, polLower, 0), o(opPublish, 1, 4, 0), o(opReceive, 1, 2, 0), o(opReject, 1, liveFirst, 2),
			o(opReplay, 1, 0, 0), o(opPolicy, 1, polInvalid, 0), o(opPublish, 1, 4, 0), o(opStats, 0, 0, 0),
			o(opPolicy, 1, polRaise, 0), o(opPublish, 1, 39, 0), o(opReplay, 1, 0, 0), o(opReopen, 0, 0, 0),
			o(opChurn, 1, 30, 0), o(opStats, 0, 0, 0))},
		// Leases, acks and nacks after the last publish are lost to a
		// power loss under SyncPublish; published messages are not.
		"syncpublish-loss": {broker.SyncPublish, []op{
			o(opPublish, 0, 3, 0), o(opPublish, 0, 4, 0), o(opPublish, 1, 5, 0), o(opReceive, 0, 2, 0),
			o(opAck, 0, liveFirst, 0), o(opReceive, 1, 1, 0), o(opNack, 1, liveFirst, 2), o(opAudit, 0, 0, 0),
			o(opCrash, 0, 0, 0), o(opReceive, 0, 2, 0), o(opPublishKeyed, 0, 0, 3), o(opAck, 0, liveFirst, 0),
			o(opForward, 0, fwd5s, 0), o(opPublishKeyed, 0, 0, 3), o(opCrash, 0, 0, 0), o(opDeadLetters, 0, 3, 0),
			o(opReopen, 0, 0, 0), o(opReceive, 0, 3, 0),
		}},
		// A policy change is fdatasynced under SyncPublish, with all
		// before it: a power loss after it keeps it and the handing back
		// it logged.
		"syncpublish-policy": {broker.SyncPublish, []op{
			o(opPublish, 0, 5, 0), o(opReceive, 0, 1, 0), o(opForward, 0, fwdNext, 0), o(opStats, 0, 0, 0),
			o(opPolicy, 0, polLower, 0), o(opReceive, 0, 1, 0), o(opCrash, 0, 0, 0), o(opReceive, 0, 1, 0),
			o(opForward, 0, fwdNext, 0), o(opDeadLetters, 0, 2, 0), o(opPolicy, 1, polRaise, 0), o(opChurn, 1, 25, 0),
			o(opCrash, 0, 0, 0), o(opStats, 0, 0, 0),
		}},
		// A lowering whose dead letter a power loss may take while
		// keeping its declaration (they follow it in the log, not
		// fdatasynced under SyncPublish): the reopen, a minute later,
		// gives the message up at its own reading of the clock.
		"syncpublish-policy-cut": {broker.SyncPublish, []op{
			o(opPublish, 0, 5, 0), o(opReceive, 0, 1, 0), o(opForward, 0, fwdNext, 0),
			o(opPolicy, 0, polLower, 0), o(opForward, 0, fwd61s, 0), o(opCrash, 0, 0, 0),
			o(opDeadLetters, 0, 2, 0), o(opStats, 0, 0, 0),
		}},
		// Consume, one message at a time: an ack, a Nack with a classified
		// cause, a Reject; the nacked one comes back on its last
		// delivery and the handler panics: a dead letter.
		"consume": {broker.SyncAll, []op{
			o(opPublish, 0, 3, 0), o(opPublish, 0, 4, 0), o(opPublish, 0, 5, 0), o(opConsume, 0, consumeAll3|2, 2<<3),
			o(opStats, 0, 0, 0), o(opDeadLetters, 0, 3, 0), o(opForward, 0, fwdNext, 0), o(opConsume, 0, 0, answerPanic),
			o(opDeadLetters, 0, 3, 0), o(opStats, 0, 0, 0),
		}},
		// Consume holding deliveries: the handler acks one and gives up on
		// the next as ctx ends; the two held are nacked unstarted, and
		// under MaxDeliveries 1 they die saying the consumer stopped.
		"consume-prefetch": {broker.SyncAll, []op{
			o(opPublish, 1, 3, 0), o(opPublish, 1, 4, 0), o(opPublish, 1, 5, 0), o(opPublish, 1, 6, 0),
			o(opConsume, 1, consumePrefetch|3|1<<3, answerCanceled<<3), o(opStats, 0, 0, 0), o(opForward, 1, fwdNext, 0),
			o(opPolicy, 1, polLower, 0), o(opConsume, 1, consumePrefetch|3|2<<3, 1|1<<3), o(opDeadLetters, 1, 7, 0),
			o(opStats, 0, 0, 0), o(opReopen, 0, 0, 0), o(opDeadLetters, 1, 7, 0),
		}},
		// More receivable than one Receive of Consume leases: the handler
		// stops it on the first call, and only what the Receive leased is
		// nacked unstarted.
		"consume-prefetch-full": {broker.SyncAll, []op{
			o(opPublishBatch, 0, 5, 3), o(opConsume, 0, consumePrefetch|1, 4), o(opStats, 0, 0, 0),
			o(opReceive, 0, 5, 0), o(opForward, 0, fwdNext, 0), o(opConsume, 0, consumePrefetch, 0), o(opStats, 0, 0, 0),
			o(opRebuild, 0, 0, 0), o(opDeadLetters, 0, 5, 0),
		}},
		// Under SyncPublish a power loss may take the leases and
		// settlements of a Consume, each in the order it made them.
		"consume-syncpublish": {broker.SyncPublish, []op{
			o(opPublish, 1, 3, 0), o(opPublish, 1, 4, 0), o(opPublish, 1, 5, 0), o(opConsume, 1, consumeAll3, 3<<3),
			o(opCrash, 0, 0, 0), o(opConsume, 1, consumeAll3|consumePrefetch, 1<<3), o(opAudit, 0, 0, 0),
		}},
	}
	const (
		extend3s    = 1
		extend30s   = 3
		extend2262  = 8 // extendBysMore: 250 years
		extendLast  = 9 // extendBysMore: the longest Duration
		wakeAnswers = 0
	)
	// Inputs of the second format that set inputMore: Wake and its
	// signal, Extends past 2262, process crashes, and SyncNone.
	scenariosMore := map[string]struct {
		sync broker.SyncMode
		ops  []op
	}{
		// Wake on an empty queue, beside a publish on the other queue;
		// then each event that closes the signal (publish, an Extend
		// that brings the lapse closer, a hand-back Nack, a replay, a
		// policy change, Close) and some that do not (Receive, a later
		// lapse, an Extend past 2262, a Nack to the dead letters).
		"wake": {broker.SyncAll, []op{
			o(opWake, 0, wakeAnswers, 0), o(opPublish, 1, 3, 0), o(opWake, 1, 0, 0), o(opPublish, 0, 4, 0),
			o(opWake, 0, 0, 0), o(opReceive, 0, 1, 0), o(opWake, 0, 0, 0), o(opExtend, 0, liveFirst, extend30s),
			o(opExtend, 0, liveFirst, extend3s), o(opWake, 0, 0, 0), o(opExtend, 0, liveFirst, extend2262),
			o(opExtend, 0, liveFirst, extendLast), o(opNack, 0, liveFirst, 2), o(opWake, 0, 0, 0),
			o(opForward, 0, fwdNext, 0), o(opWake, 0, 0, 0), o(opReceive, 0, 1, 0), o(opWake, 0, 0, 0),
			o(opNack, 0, liveFirst, 1), o(opWake, 0, 0, 0), o(opReplay, 0, 0, 0), o(opWake, 0, 0, 0),
			o(opPolicy, 0, polRaise, 0), o(opWake, 0, 0, 0), o(opWake, 1, 0, 0), o(opReopen, 0, 0, 0),
			o(opWake, 1, 0, 0), o(opStats, 0, 0, 0),
		}},
		// Under SyncNone nothing waits for the device: a process crash
		// loses nothing a call returned for, and so does what a power
		// loss is taken for there (see inputSyncNone).
		"syncnone-kill": {broker.SyncNone, []op{
			o(opPublish, 0, 3, 0), o(opPublishKeyed, 0, 0, 4), o(opPublish, 1, 5, 0), o(opReceive, 0, 2, 0),
			o(opAck, 0, liveFirst, 0), o(opReceive, 1, 1, 0), o(opNack, 1, liveFirst, 2), o(opKill, 0, 0, 0),
			o(opReceive, 0, 1, 0), o(opExtend, 0, liveFirst, extend3s), o(opAudit, 0, 0, 0), o(opCrash, 0, 0, 0),
			o(opPublishKeyed, 0, 0, 4), o(opChurn, 0, 18, 0), o(opKill, 0, 0, 0), o(opDeadLetters, 1, 3, 0),
		}},
		// A new process declares a queue with another policy: its
		// MaxDeliveries lowered below what two lapsed leases spent
		// (dead at the declaration), raised again (a replay gets the
		// new deliveries), and a refused one, after which the queue
		// keeps its policy.
		"reopen-policy": {broker.SyncAll, []op{
			o(opPublish, 0, 3, 0), o(opPublish, 0, 4, 0), o(opPublish, 1, 5, 0), o(opReceive, 0, 2, 0),
			o(opForward, 0, fwdNext, 0), o(opWake, 0, 0, 0), o(opReopenPolicy, 0, polLower, 0), o(opDeadLetters, 0, 3, 0),
			o(opReopenPolicy, 0, polRaise, 0), o(opReplay, 0, 0, 0), o(opReceive, 0, 2, 0), o(opNack, 0, liveFirst, 1),
			o(opReopenPolicy, 1, polInvalid, 0), o(opReceive, 1, 1, 0), o(opReopenPolicy, 1, polLower, 0),
			o(opForward, 0, fwdNext, 0), o(opDeadLetters, 1, 2, 0), o(opStats, 0, 0, 0),
		}},
		// Process crashes under SyncPublish keep the leases, acks and
		// nacks a power loss may take; and the reopen makes them durable
		// before it builds on them: a power loss right after it keeps
		// them too.
		"syncpublish-kill": {broker.SyncPublish, []op{
			o(opPublish, 0, 3, 0), o(opPublish, 0, 4, 0), o(opReceive, 0, 2, 0), o(opAck, 0, liveFirst, 0),
			o(opNack, 0, liveFirst, 3), o(opKill, 0, 0, 0), o(opCrash, 0, 0, 0), o(opDeadLetters, 0, 3, 0), o(opWake, 0, 0, 0),
			o(opReplay, 0, 0, 0), o(opKill, 0, 0, 0), o(opWake, 0, 0, 0), o(opStats, 0, 0, 0),
		}},
	}
	var seeds []seed
	for name, s := range scenariosMore {
		seeds = append(seeds, seed{name, []any{encodeInput(s.sync, s.ops...)}})
	}
	for i := range 3 {
		sync := []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}[i]
		seeds = append(seeds, seed{fmt.Sprintf("random-more-%d", i), []any{randomInputMore(uint64(i), 120+40*i, true, sync, false)}})
		seeds = append(seeds, seed{fmt.Sprintf("random-epoch-%d", i), []any{randomInputMore(uint64(i), 120+40*i, false, sync, true)}})
	}
	// Instants at and around the Unix epoch: a lease of jobs that lapses
	// at it exactly, a Nack of mail visible again at it exactly (which
	// is not "at once": a Receive a second before it gets nothing), a
	// Nack with no retry delay (at once, whatever the clock then reads).
	epoch := encodeInput(broker.SyncAll,
		o(opPublish, 1, 3, 0), o(opPublish, 0, 4, 0), o(opReceive, 0, 1, 0), o(opWake, 0, 0, 0),
		o(opForward, 0, fwd5s, 0), o(opForward, 0, fwd3s, 0), o(opForward, 0, fwd1s, 0), o(opReceive, 1, 1, 0),
		o(opNack, 1, liveFirst, 2), o(opReceive, 1, 1, 0), o(opWake, 1, 0, 0), o(opForward, 0, fwdBefore, 0),
		o(opReceive, 1, 1, 0), o(opReceive, 0, 1, 0), o(opStats, 0, 0, 0), o(opForward, 0, fwdNext, 0),
		o(opReceive, 1, 1, 0), o(opStats, 0, 0, 0), o(opBack, 0, back1s, 0), o(opReceive, 0, 1, 0),
		o(opPolicy, 0, polLower, 0), o(opReceive, 0, 1, 0), o(opNack, 0, liveFirst, 0), o(opBack, 0, back1s, 0),
		o(opReceive, 0, 1, 0), o(opReopen, 0, 0, 0), o(opDeadLetters, 0, 3, 0), o(opReceive, 1, 1, 0), o(opKill, 0, 0, 0),
		o(opBack, 1, back2m, 0), o(opReceive, 1, 1, 0), o(opStats, 0, 0, 0))
	epoch[1] |= inputEpoch
	seeds = append(seeds, seed{"epoch", []any{epoch}})
	for name, ops := range scenarios {
		seeds = append(seeds, seed{name, []any{encodeOps(ops...)}})
	}
	for name, s := range scenariosV2 {
		seeds = append(seeds, seed{name, []any{encodeInput(s.sync, s.ops...)}})
	}
	// Random runs whose clock only goes forward: what a run observed then
	// never depends on when the background reclamation ran (copy-lapse).
	for i := range 6 {
		seeds = append(seeds, seed{fmt.Sprintf("random-%d", i), []any{randomInput(uint64(i), 60+28*i, true)}})
	}
	for i := range 4 {
		sync := []broker.SyncMode{broker.SyncAll, broker.SyncPublish}[i%2]
		seeds = append(seeds, seed{fmt.Sprintf("random-v2-%d", i), []any{randomInputV2(uint64(i), 80+40*i, true, sync)}})
	}
	for i := range 4 {
		sync := []broker.SyncMode{broker.SyncAll, broker.SyncPublish}[i%2]
		seeds = append(seeds, seed{fmt.Sprintf("random-consume-%d", i), []any{randomInputConsume(uint64(i), 80+40*i, true, sync)}})
	}
	return seeds
}

func repeat(o op, n int) []op {
	out := make([]op, n)
	for i := range out {
		out[i] = o
	}
	return out
}

// TestTheReclaimScenariosCopyForwardAndReclaim: the scenarios written to
// pin old segments and churn past them do make the store copy records
// forward and reclaim segments; were they to stop (a changed threshold, a
// smaller churn), the fuzzer would go on passing without testing either.
func TestTheReclaimScenariosCopyForwardAndReclaim(t *testing.T) {
	for _, s := range brokerSeeds(t) {
		if s.name != "reclaim" && s.name != "reclaim-rebuild" {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			// Reclamation runs in the background: on a busy machine it
			// may not have come round by the restart that is to find
			// its work done. Give it time to, before a restart, until
			// the run has seen both.
			settle := func(r *runner) {
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
					if st := r.store.Stats(); r.reclaimed+st.BytesReclaimed > 0 && r.copied+st.CopiedForward > 0 {
						return
					}
				}
			}
			r := runInputWith(t, s.vals[0].([]byte), settle)
			require.Positive(t, r.copied, "records copied forward")
			require.Positive(t, r.reclaimed, "bytes reclaimed")
		})
	}
}
