// Package recovery is walbroker's crash suite: it crashes the broker
// (process kills, simulated power loss, injected faults, damaged files)
// and checks that nothing acknowledged is lost.
//
// This package (its non-test files) is the process-crash harness. Its
// tests re-execute the test binary as a child process that runs a mixed
// workload on one store and keeps a journal of every call that returned;
// the parent kills the child with SIGKILL, opens the store and checks it
// against the journal, and starts the next child on the same store.
//
// # The workload (workload.go)
//
// A child opens the store with the real clock and 64 KiB segments, so
// that rotation, checkpoints, copy forward and segment removal (which the
// broker runs in the background after each rotation) happen every few
// hundred messages, under a sync mode chosen per cycle. Its goroutines:
//
//   - publishers: Publish, PublishKeyed (keys from a small set per
//     publisher, dedup window 2 s) and PublishBatch, to the "work", "flow"
//     and "lapse" queues;
//   - consumers of "work" with Receive, each delivery getting an intent
//     (ack, nack, reject, extend then ack or nack, or hold: keep the lease
//     and let it lapse) journaled with the delivery before it is carried
//     out;
//   - broker.Consume on "flow" (acks, nacks with a retry cause, rejects with
//     DoNotRetry, lease extensions for slow handlers), through a wrapper of
//     the queue whose Receive picks and journals each delivery's intent
//     before Consume hands it to a handler, and whose Ack, Nack, Reject and
//     Extend journal their results as the work consumers journal theirs
//     (in one child in three, on the queue itself, so that the acks
//     Consume carries on its next Receive meet the kills too: only the
//     intents are journaled then);
//   - a consumer of "lapse" (lease 150 ms, MaxDeliveries 2, a retry delay
//     of 1.5 s, longer than a kill and the next child's start) that acks,
//     nacks and rejects at once, lets leases lapse (two in a row make a
//     LEASE_EXPIRED dead letter), and acks, nacks or rejects some
//     deliveries only once their lease has lapsed, to be refused;
//   - a janitor that replays and deletes dead letters of "work", "flow"
//     and "lapse";
//   - a poison consumer: a message on the "poison" queue (visibility
//     timeout 200 ms, MaxDeliveries 3) "crashes" whoever receives it: the
//     child journals the delivery, tells the parent, and is killed.
//
// Every payload is its reference (queue, cycle, goroutine, attempt, batch
// index and size, key) followed by bytes derived from it, so any payload read back
// can be verified on its own, and an unjournaled message traced to the
// call that published it.
//
// # The journal (journal.go)
//
// Each child appends to its own journal file, outside the store, one entry
// per returned call — published (IDs, references, EnqueuedAt), duplicate
// (key and original ID), delivered (count, lease expiry, intent), acked,
// nacked, rejected, extended, replaying/replayed, deleting/deleted, and,
// where a power loss may take them, maybe (a delivery) and returned (an
// ack, nack, reject or extend) —
// fdatasynced before the goroutine goes on. Entries are length-prefixed
// and CRC-32C'd; a torn last write (the kill landed in it) is detected
// and ignored: nothing in it had been acknowledged to its goroutine. A bad
// frame followed by one that verifies is no torn write but damage, and
// fails the run.
//
// # Cycles and hooks (harness.go)
//
// Each cycle starts a child on the same store and kills it: a random
// 20-300 ms after its workload started (timed), a random 0-80 ms after it
// was started (early: often inside Open's recovery, and on a fresh store
// sometimes before the store exists, which the checks take for an empty
// one), or when it reports
// that it paused at its hook (hooked). Hooks watch the store's file
// operations through a vfs.FaultFS observer and block the goroutine that
// made the chosen one, after it completed, so that the kill lands exactly
// there: in rotation (segment renamed into place, directory synced, seal
// written, seal fdatasynced), while preparing or recycling the next
// segment, in a checkpoint (table written or fdatasynced, checkpoint
// written, fdatasynced, renamed; the checkpoint Open writes; the one after
// a copy forward), and in segment removal (renamed to a spare, deleted,
// directory synced). The run reports how many cycles hit each hook. A
// third of the cycles are checked in place after their kill (the store
// opened, checked and closed cleanly), but never the one before a cycle
// hooked at the checkpoint Open writes: that Open would replay nothing
// and write none.
//
// Half the timed and hooked cycles under SyncAll and SyncPublish lose
// power instead: the child runs the store on a vfs.CrashFS, and where the
// kill would have landed (at its hook, or, for a timed cycle, at the first
// write to a segment file after its time, mostly a commit written and not
// yet fdatasynced) the power fails: every later change is refused, the
// calls that fail are left unjournaled (in flight), and the store as the
// device holds it (the unsynced writes dropped, or half of them kept and
// the last one torn, or half of their 512-byte sectors kept, none torn;
// in half the power losses, unsynced names and sizes kept apart from the
// data, as file systems that commit metadata on their own may leave them)
// replaces the store for the checks and the next child.
// Under SyncAll every call that returned was fdatasynced, so the
// invariants below hold after a power loss as after a kill. Under
// SyncPublish only a publish waits for an fdatasync, so the child journals
// the other results only once they are certain: when a publish that
// started after the call returned has returned (its fdatasync covered what
// the call wrote). Until then a delivery is journaled as a maybe (its
// intent may have been carried out; its count and lease are not certain),
// an Ack, Nack, Reject or Extend that returned nil as returned (its effect
// holds in its own process, and may be lost to the next), and the other
// results are held; a power loss or a kill leaves those held in flight.
// A settle is checked when it is journaled as returned; its certain
// entry, if one follows, repeats it, and only what it makes certain is
// applied, so that a fault in the call is reported once. Likewise a
// delivery's certain entry reports only what its maybe did not.
// This is the power-loss test with many goroutines, the
// real clock and background maintenance racing the kill, where
// powerloss_test.go runs one goroutine on a fake clock.
//
// After each kill the parent copies the store (as the page cache holds it:
// a process crash loses nothing written) and opens the copy with a clock
// an hour ahead, so every lease has lapsed and every retry delay ended,
// and drains it: every queue received to the end, every dead letter read.
// One cycle in three it also opens the store itself with the real clock
// (reading its dead letters and counts) and closes it, so that the next
// child starts from a clean close rather than a crash. At the end the
// store itself is drained.
//
// # Invariants (check.go)
//
// A process crash keeps the page cache, so whatever a call returned for
// must survive under every sync mode:
//
//   - No lost publish: a message whose Publish returned nil is in the store
//     (receivable, leased, delayed or dead) unless an Ack or a
//     DeleteDeadLetter of it returned nil, or one was in flight at a kill
//     (a delivery journaled with the intent to ack it, a delete journaled
//     as begun, and no result) and no store checked after that kill has
//     shown the message: a store that shows it proves that call did not
//     happen, and from then on the message must stay like any other.
//   - Acked is gone: a message whose Ack returned nil is never delivered
//     again, in the journals or in any drain; so for deletes. An Ack
//     journaled only as returned (under SyncPublish, before a publish made
//     it certain) holds in its own process: the index applied it, and only
//     a power loss undoes it, after which no call returns there; so no
//     later delivery in that process, though the next may see the message
//     again. So for a Reject, or a Nack that dead-lettered the message,
//     until a replay of its dead letter.
//   - No unknown message: every message a store shows was published, with
//     the same ID, payload and EnqueuedAt. One whose publish did not return
//     must be the call its goroutine had in flight when it was killed;
//     once seen it is held to the same rules. An ID is never handed out
//     twice. A payload that is not what its reference makes is one fault,
//     reported once as such: the reference it carries is no evidence of
//     which message it is, so the message is the one its ID names (and
//     one the journal does not know is not reported again as unknown).
//   - Batches are whole: a PublishBatch in flight at a kill has, in the
//     store after the kill, every message or none (each reference carries
//     its batch's size; a message missing must be one the journal saw
//     received or deleted).
//   - Delivery counts only grow: each delivery of a message counts more
//     than every earlier one (a replay of a dead letter starts again at 1),
//     and never more than MaxDeliveries; an ack, nack or extend that
//     returned nil settled the latest delivery. A delivery journaled only
//     as a maybe was handed out all the same: its payload is checked, it
//     must not follow an ack, delete or dead-lettering that returned nil,
//     nor come before the previous lease or retry delay ended, and it
//     counts more than every earlier certain delivery; but the deliveries
//     after it in later processes need not count more, since a power loss
//     may take its lease record, and the next child hand it out with its
//     count again. In its own process its lease and count were live until
//     the power failed, after which no delivery returns: the deliveries
//     after it there count more and respect its lease, as after a certain
//     delivery. That lease is the ExpiresAt Receive returned, or the
//     clock after Receive plus the Extend its intent asks for, if
//     earlier; a nack its intent meant, with deliveries left, may end it
//     from the lease's start plus the retry delay, unless that nack was
//     refused as LeaseExpired. A maybe that does not count more than
//     every earlier certain delivery is reported and binds nothing beyond
//     what they bind (its intent is still noted). In later processes a
//     maybe binds only the LEASE_EXPIRED dead letter of the last delivery
//     the queue allows (see below). What it binds ends at the next
//     certain delivery of the message, of its process (one that does
//     not count more, or does not respect its lease, is reported first)
//     or of a later one (whose floors hold from then on), or when a
//     replay of its dead letter begins. Its certain entry (the same
//     count and ExpiresAt) is not held to the maybe's own lease. A
//     process's deliveries of a message are checked against each other
//     in the order it handed them out: by the instant Receive read the
//     clock (its lease's ExpiresAt less the visibility timeout; the
//     broker reads it under the queue's lock, after whatever let it hand
//     the message out), not by the clock the consumer read after Receive
//     returned, which one stalled past the lease reads late, after the
//     message was handed out again, settled, or dead-lettered and
//     replayed. A count that did not grow, or a lease not respected, in
//     that order is the store's, however late a consumer read its clock,
//     and the count, lease and intent of the latest one handed out hold.
//     A dead letter read is placed at the clock the janitor read after
//     DeadLetters returned, which one stalled there reads late, at no
//     cost: the message stays dead from before the read until the
//     replay, which starts after that reading, so every delivery of the
//     life it ended was handed out before it, every one of the next life
//     after it, and one handed out between is of the dead message.
//   - Leases and retry delays survive a kill: a message is not delivered
//     again before its lease's ExpiresAt (or an Extend's, which may shorten
//     it) nor before a nack's VisibleAt, by the wall clock, which is the
//     broker's; a refusal as LeaseExpired comes only at or after ExpiresAt,
//     and a settle or Extend that returned nil started before it.
//     A nack in flight at a kill may have ended the lease early, but not
//     before the lease's start plus the retry delay; a reject in flight
//     leaves the message dead or leased, so its lease still holds. A Nack's
//     VisibleAt and an Extend's ExpiresAt journaled only as returned bind
//     the deliveries later in their own process (an Extend's only down to
//     the retry delay of a nack meant for the delivery, which may follow
//     it, in flight), and no later process. What such a settle returned
//     is checked at once, as a certain one's is (a power loss takes its
//     record, not the answer the index gave in memory): its VisibleAt,
//     DeadLettered or ExpiresAt, and that it settled the latest delivery
//     of its process (a maybe one too) before that lease's ExpiresAt.
//   - Clock readings are the broker's: EnqueuedAt, ExpiresAt, VisibleAt and
//     FailedAt lie between the instants before and after their call (plus
//     the visibility timeout, the retry delay or the Extend).
//   - Dead letters are where the journal put them: a message whose Reject,
//     or whose last-delivery Nack, returned nil is a dead letter with that
//     reason and count and is never receivable again; every dead letter's
//     reason is one the journal explains (LEASE_EXPIRED with MaxDeliveries
//     deliveries, no earlier than its last lease's expiry, even when that
//     delivery was journaled only as a maybe: had a power loss taken its
//     lease, a later process handed it out again, and that lease lapsed
//     later still; and never once a nack of the message's life, since its
//     last replay, returned nil; a
//     nack's or a reject's reason with the count of the delivery meant for
//     it, by a nack or reject not refused: a settle refused as
//     LeaseExpired changes nothing and reports nothing), and
//     carries that failure's Code and public Cause (those of the workload's
//     cause for a nack or a reject, never its private detail; none for
//     LEASE_EXPIRED); once a
//     ReplayDeadLetter returned nil, every dead letter of that message
//     failed after the replay started. A replay in flight at a kill is
//     settled by the store after the kill: if it still shows the dead
//     letter, the replay did not happen, and the message stays dead until
//     a replay or a delete; if not, the replay happened, as if it had
//     returned nil. A power loss under SyncPublish may take several
//     replays of a message that returned, none yet made certain, with
//     what came between them: the store after it may show the dead letter
//     of any of them, and then that replay and every later one did not
//     happen. So for a reject or a nack in flight: if the store
//     after the kill shows its dead letter, it happened, and the message
//     stays dead; if not, it never happens, and no later dead letter is
//     explained by it. (A reject's dead letter must have failed within
//     the latest lease it may have had: an Extend journaled only as
//     returned counts, and Consume on the queue itself renews leases
//     without a journal entry, so there no bound is known. A nack's
//     failed after the earliest the lease may have lapsed may be that
//     lapse, and is not taken for it.)
//   - Dedup: a PublishKeyed whose key's original was enqueued no more than
//     the window before the call ended returns that original (same ID and
//     EnqueuedAt), across kills; a duplicate never names another key's
//     message or an older original, nor one enqueued more than the window
//     before the call started (its key was forgotten: the store runs on
//     the real clock, which the journal's instants read too). A keyed
//     publish in flight at a kill that a store showed is its key's
//     original from then on, and must have been enqueued more than the
//     window after the key's previous original (else it had to return
//     that one and enqueue nothing).
//   - Order: a drain receives messages oldest EnqueuedAt first (then ID),
//     and lists dead letters oldest FailedAt first.
//   - Poison: a message whose consumer is killed on every delivery reaches
//     the dead-letter store (LEASE_EXPIRED) after MaxDeliveries kills, each
//     delivery in a different process.
//   - Opening after a kill succeeds and reports no damage.
//
// The rules are broken on purpose by tests that build a journal, or a
// sound store and a journal that contradicts it, and require the checker
// to name what broke (check_*_test.go; check_rules_test.go holds those
// that no other test and no run reached). A few are not: Receive out of
// EnqueuedAt order, dead letters out of FailedAt order and a store that
// shows one ID twice can only be shown by a store that breaks its own
// index, which no journal can fake; "reports no damage" can only fail
// through Salvage, which the checks never ask for (an Open that meets
// damage fails, which the first half of that rule reports); and the
// checks of a Receive, DeadLetters or Close that fails on a store that
// opened, and of a journal entry the workload cannot write (a publish
// with no ID, a reference that does not parse without its payload
// failing too), stand guard over the checker's own reading. Two
// variants of rules tested otherwise are not broken either: a stored
// message whose key is not the one a duplicate named for it, and a
// delivery, in the process where an Extend returned nil, before the lease
// it gave ended while a nack meant for that delivery was in flight.
//
// The tests also check the lock (lock_test.go: a second Open fails with
// Locked in the same process and in another; after the holder is killed,
// Open succeeds and finds what it published) and the clock (clock_test.go:
// with an injected clock stepped back and forth by an hour between
// operations and across reopens and kills, leases and retry delays end
// exactly at their instant and not before, a lapse any call observed stays
// observed in its process, dedup keys are not forgotten early, and Receive
// order follows EnqueuedAt; clock_kill_test.go: a retry delay, an Extend
// and a dedup key's eviction survive a kill, after which Open has only
// the log's records of them), and the sync interval
// (powerloss_test.go, syncpublish_interval_test.go: under SyncNone every
// event, and under SyncPublish every event other than a publish, reaches
// the device within SyncInterval when no later commit carries it there).
//
// # Running it
//
// A run's summary ends with the rules that only some of the workload's
// doings meet, and how often each was met: retry delays still pending when
// a later child received, settles refused as lapsed, LEASE_EXPIRED dead
// letters the janitor read, the results of Consume's calls journaled, and
// the settles journaled as returned, held to their promises in their
// process. A run of 20 cycles or more fails if any of them is zero (the
// last only if the run had a timed cycle that lost power under
// SyncPublish after 100 ms or more), so that the workload cannot stop
// meeting a rule unnoticed.
//
//	go test ./recovery                         # 200 cycles (20 with -short or -race)
//	WALBROKER_SOAK_CYCLES=5000 go test ./recovery -run TestProcessCrash -timeout 3h -v
//	WALBROKER_CRASH_SEED=N go test ./recovery -run TestProcessCrash -v
//
// The longest sweeps (the process-crash cycles, the power-loss crash
// points, the damaged copies of a synced log) start no more iterations
// once the test binary's deadline (-timeout, 10 minutes by default) is
// less than 5 minutes away, and log how far they got: a machine slow
// enough for that checks fewer cases rather than failing the package for
// time. An idle 2-core machine runs the package in about 3 minutes and
// cuts nothing; a soak sets a -timeout of its own.
//
// A run logs its seed; WALBROKER_CRASH_SEED replays its plan (the kind,
// timing, hook and sync mode of every cycle, and the workload's choices),
// though not the exact interleaving of the processes.
// WALBROKER_CRASH_KEEP=1 keeps the store and journals of a failed run.
// A violation is reported with the seed, the cycle, and the journal
// entries of the messages concerned.
package recovery
