// Package natsjs implements walbroker's port (package broker) over NATS
// JetStream, for programs that outgrow one machine. Switching from the
// embedded store is one line:
//
//	store, err := broker.Open(dir, broker.Options{}) // one machine
//	store, err := natsjs.Open(nc, natsjs.Options{})  // a NATS server or cluster
//
// and store.Queue(name, policy) returns a queue with the same methods
// (Publish, PublishKeyed, PublishBatch, Receive, Ack, Nack, Reject, Extend,
// DeadLetters, ReplayDeadLetter, DeleteDeadLetter, Wake), the same errors
// (errors.Is with broker.UnknownReceipt, LeaseExpired, MessageTooLarge,
// InvalidBatchSize, InvalidDedupKey, DeadLetterNotFound, QueueFull,
// QueueMisconfigured, Closed) and the same classified-cause rule, so
// broker.Consume and every handler run unchanged. It is its own Go module,
// so that the core module does not depend on the NATS client.
//
// # How the port maps onto JetStream
//
// A queue NAME of a Store with prefix P (default WALBROKER) is:
//
//   - the work stream P_Q_NAME (subject P.q.NAME, work-queue retention,
//     MaxMsgs = Capacity with DiscardNew, duplicate window = DedupWindow,
//     atomic batch publish allowed), holding every live message: ready,
//     leased and delayed. Dead letters are elsewhere, so they do not count
//     toward Capacity. It republishes each message's headers to P.w.NAME
//     (see Wake);
//   - its durable pull consumer "walbroker": explicit ack, AckWait =
//     VisibilityTimeout, MaxDeliver = MaxDeliveries, MaxAckPending
//     unbounded;
//   - the dead-letter stream P_D_NAME (subject P.d.NAME.ID, one record per
//     message ID): the payload, with ID, EnqueuedAt, FailedAt, reason, code,
//     public cause and deliveries in headers, and a replay's claim on it
//     (see ReplayDeadLetter);
//   - the keys stream P_K_NAME (subject P.k.NAME.SHA256(key), one record
//     per key, MaxAge DedupWindow + 1 min): each dedup key's EnqueuedAt
//     and, once its message is stored, the message's ID;
//   - the deaths stream P_A_NAME, which stores the server's MAX_DELIVERIES
//     advisories of the consumer (a message whose last allowed lease
//     lapsed) until a Store has made them dead letters;
//   - the failures stream P_F_NAME (subject P.f.NAME.SEQ, one record per
//     work-stream sequence): the last failure a Nack that was not the
//     last delivery reported for the message (its classified reason, code
//     and public cause, as a dead letter records them: never the text of
//     an unclassified cause, never payload bytes). A lapse of the last
//     delivery records it (below). A replay publishes the message again
//     at a new sequence, so its new life starts with none; the record is
//     deleted when the message is acknowledged or buried.
//
// In NAME, '_' is written "__" and '.' "_d", which keeps the mapping one to
// one (stream names allow no '.', subject tokens no '.').
//
//   - Publish is a JetStream publish; it returns when the server has stored
//     the message (see Durability). The ID is the stream sequence in 16 hex
//     digits; EnqueuedAt is the publishing process's clock. Both travel in
//     headers when a dead letter is replayed, so the message keeps them.
//     A publish that got no answer (a timeout, a context that ended, a
//     lost connection) may or may not be stored, and the server may store
//     it after the call gave up: the error says so and wraps the cause,
//     and a retry may store the message twice.
//   - PublishKeyed claims the key's record in the keys stream (a publish
//     that expects no record on the key's subject, or the stale one it
//     read), publishes the message with Nats-Msg-Id = SHA-256(key), then
//     replaces the claim with a record naming the message's ID. A publish
//     that finds a record naming an ID within the window is a duplicate
//     (two requests, nothing published); one that finds a claim (a
//     publish in flight or one that failed halfway) publishes with that
//     claim's EnqueuedAt (with its own when the claim is over 10 ms old,
//     see Dedup), and the work stream's duplicate window folds the racers
//     into one message. The record outlives the message: the
//     server rebuilds its Nats-Msg-Id memory at a restart only from
//     messages it still stores, and an acknowledged one is gone. A new
//     key costs three requests, Publish one. A keyed publish whose
//     message got no answer may or may not be stored, as a Publish: the
//     error says so and wraps the cause, and a retry with the same key
//     within the DedupWindow is answered with the original if it was
//     stored (see Dedup), and stores it once if not. On a replicated
//     stream the server answers a publish whose key another publish is
//     still storing as "in process": the publish waits for that one and
//     asks again; one whose context ends meanwhile says that the key's
//     message may or may not be stored, by the other publish, and what a
//     retry does, and wraps the context's error.
//   - PublishBatch is one atomic batch of the server (Nats-Batch-Id, server
//     2.12 or later): all of it is stored or none, checked against MaxMsgs
//     as a whole; at most 1000 messages (the server's default bound). The
//     server keeps at most 50 batches open per stream and refuses the one
//     past that, which then stores nothing: a Queue has at most 16 of its
//     own open at once, and sends a batch refused for want of room (other
//     clients' batches filled it) again, under a new id, up to 8 times. A
//     batch waiting for one of the 16 has sent nothing: a context that ends
//     meanwhile is returned saying so, and a Close meanwhile makes it
//     Closed. A batch that sent some of its messages and then no commit
//     the server answered with its end (its context ended first, the
//     connection failed, the commit got no answer) may be open on the
//     server, holding a place, until the server's batch timeout (10 s):
//     the Queue abandons it (one more message of it, leaving a gap, which
//     makes the server drop it) and keeps its token until the server
//     answers that, or for 15 s when no answer comes. A batch whose
//     commit got no answer (a timeout, a context that ended, a lost
//     connection) may or may not be stored, all of it, and the server may
//     store it after the call gave up, as for any publish that times out:
//     the error says so and wraps the cause, and a retry may store the
//     batch twice (a batch carries no dedup key; PublishKeyed, one message
//     at a time, is the idempotent publish).
//   - Receive is a pull request that does not wait for more messages once
//     one came; it waits up to 200 ms for the first only when a message is
//     known to have been published, because the server acknowledges a
//     publish a moment before its consumer hears of the message. A loaded
//     server can take longer: a Receive that found nothing while the work
//     stream holds a message its consumer has not delivered yet asks
//     again, until the message comes or the call's deadline
//     (Options.Timeout without one) leaves no room for one more 200 ms
//     wait and a second for the answer.
//   - Ack, Nack, Reject and Extend are requests on the delivery's ack
//     subject, each waiting for the server's confirmation: "+ACK"; "-NAK"
//     with the policy's retry delay (RetryDelay doubled per delivery, held
//     at MaxRetryDelay); "+TERM" after the dead letter is stored; "+WPI"
//     when Extend's duration is the VisibilityTimeout, else a delayed
//     "-NAK", which keeps the message pending on the same delivery and
//     moves its redelivery deadline to now+by. The server applies an
//     acknowledgement to whichever delivery of the message is pending, so
//     an Extend holds its lease until the server confirmed it: an Ack,
//     Nack, Reject or Extend of the same lease meanwhile waits, then
//     finds the receipt replaced (LeaseExpired) and sends nothing. For the
//     same reason a Nack whose "-NAK" got no answer (a timeout, a lost
//     connection) gives its lease up, since the server may have handed
//     the message to another consumer meanwhile, and an Extend whose
//     delayed "-NAK" got none holds its lease only until the deadline it
//     asked for, when that is closer than the one it had; each error says
//     so.
//   - Nack on the MaxDeliveries-th delivery, and Reject, store the dead
//     letter, then terminate the delivery; one that failed keeps its lease,
//     and tried again is done when it finds the message gone and its dead
//     letter stored (the "+TERM" was applied, its answer lost). A lease
//     that lapses on the last allowed delivery makes the server stop
//     delivering the message and
//     publish a MAX_DELIVERIES advisory, which the deaths stream keeps; the
//     next call of any Store that looks (Receive, DeadLetters, replay,
//     delete, a publish refused as full; at least once a minute, at a
//     call a minute or more after the last sweep)
//     moves each such message to the dead-letter stream and deletes it
//     from the work stream. The dead letter records the last failure a
//     Nack reported in the message's life (from the failures stream), or
//     LEASE_EXPIRED, with no code and no cause, when no consumer reported
//     one. A non-final Nack stores its cause there before it sends its
//     "-NAK" (one more request); a failure to store it fails the Nack,
//     which leaves the lease as it was (a Nack whose "-NAK" then fails
//     leaves the record: the consumer did report that failure). An Ack
//     of a redelivered message costs one more request too: it deletes
//     the record. The advisory is
//     stored by the server, so a death is never lost because no process
//     was listening. The server drops an advisory no stream hears, as
//     when a restarted server's consumer notices a lapse from before the
//     restart before the deaths stream is restored (streams are restored
//     in parallel); each sweep therefore also buries a delivered message
//     the consumer no longer holds, once a second sweep at least a second
//     later finds it so.
//   - Receipts are MACed with a random per-Store key over the queue's
//     stream name, the message's sequence and a lease nonce; the Store
//     keeps the leases it handed out, to refuse a lapsed, replaced or ended
//     one with LeaseExpired.
//
// # Promises kept differently
//
//   - Clock. The server's clock decides lease lapses and retry delays; the
//     dedup window is measured on the clocks of the processes that publish
//     (see Dedup); Options has no Now. The instants the adapter returns
//     (ExpiresAt, VisibleAt) are measured on this process's clock from
//     before its request, so the server's own instant is never earlier
//     while it runs and no other Store changed the VisibilityTimeout
//     (below, Policy changes). A server restarted over its store keeps its pending
//     instants in whole seconds (truncated): after a restart a lease or a
//     retry delay can end early, by up to two seconds in our runs.
//   - Policy changes. The server keeps each pending message's instant as
//     its delivery time and adds the consumer's AckWait (the
//     VisibilityTimeout) when it checks it: a queue declared again with a
//     different VisibilityTimeout moves the end of every lease and retry
//     delay already handed out by the difference, instead of applying the
//     new policy from then on only.
//     A declaration that lowers MaxDeliveries gives up at once, as the
//     file store's does, only on the messages the declaring Store nacked
//     that still wait out their retry delay with a count at or above the
//     new maximum: they are dead letters when Queue returns (Deliveries
//     their count; the last failure a Nack reported; FailedAt the
//     declaration). No consumer holds such a message, and the server
//     delivers it no more. The policy is in force before the burial: a
//     declaration whose burial failed returns an error that says so, and
//     the next declaration of the queue, even with the same policy,
//     buries those messages (FailedAt then that declaration) before it
//     returns. Every other message the lowering leaves no
//     delivery is left to the server: one whose lease this Store handed
//     out with deliveries left lapsed (the server handed it back at the
//     lapse, and may have delivered it again since, to another Store,
//     whose live lease the declaration does not cut off), one whose retry
//     delay has ended (another Store may have taken it since), and one
//     another Store (or this one before a restart) nacked or leased. The
//     server does not look at its pending messages when MaxDeliver
//     changes: such a message holds its place of the Capacity, and is no
//     dead letter, until the server gives it up after its retry delay or
//     lease ends (at some Store's next Receive at the latest; a lease
//     still live runs its course, and its Ack, Nack or Reject settles the
//     message as usual); a sweep then buries it (Deliveries the
//     server's count; LEASE_EXPIRED unless a Nack reported a failure;
//     FailedAt the declaration when this Store made it after the lapse
//     of its own lease on that count, else the lapse when this Store
//     handed the lease out, else the sweep). A lease of this Store that
//     lapses after the declaration, or was handed out as the last the
//     policy allowed, is buried at its lapse (below): the server delivers
//     its message no more.
//     A declaration changes the server's consumer and streams for every
//     Store that serves the queue, but the policy of the declaring Store
//     only: each Store keeps the policy it declared last for what it
//     decides itself, until it declares the queue again. Declared through
//     another Store, a raised MaxDeliveries is not seen by this one: its
//     Nack dead-letters a message on what it holds to be the last delivery,
//     its Receive makes dead letters (LEASE_EXPIRED unless a Nack reported
//     a failure) of deliveries counted above its maximum instead of
//     returning them, and its lease on what it holds to be the last
//     delivery is buried at its lapse; a lowered one is not seen either: its Nack hands back a
//     message the server delivers no more, which is given up later as
//     above. A VisibilityTimeout lowered through another Store moves the
//     server's deadline of this Store's leases earlier than their
//     ExpiresAt, measured by this Store's longer timeout: the message can
//     be handed to another consumer while the lease still looks live, and
//     its Ack then acknowledges a message another consumer holds (a
//     duplicate processing); a raised one makes ExpiresAt come before the
//     server's deadline. This Store's publishes are checked against its
//     own MaxMessageBytes, its keyed publishes against its own
//     DedupWindow (the server's duplicate window is the last declared),
//     and its Nacks use its own RetryDelay. Declare every change through
//     every Store that serves the queue.
//   - Lease expiry. The adapter refuses a receipt AT its ExpiresAt, but the
//     message reappears when the server's deadline passes, a request's
//     flight later. An Ack sent just before ExpiresAt that reaches the
//     server after its deadline may acknowledge a message already handed
//     to another consumer: a duplicate processing, which at-least-once
//     permits, never a loss. An Extend that reaches the server so late
//     moves the other consumer's deadline, and its new receipt settles
//     that consumer's delivery until its ExpiresAt: the same duplicate.
//   - A lapse on the last allowed delivery is noticed by nats-server 2.15
//     at its deadline only for a first delivery; for a redelivered message
//     only at the consumer's next pull, and until then the message holds
//     its place of the Capacity. The Store that handed the lease out knows
//     the message is dead from its ExpiresAt: a publish or replay of that
//     Store refused as full, and its next call that looks (above), which
//     sweeps once such a lease lapsed, bury the
//     messages of its own lapsed last leases (handed out as the last the
//     policy allowed, or lapsed after this Store lowered MaxDeliveries to
//     their count; not one that lapsed with deliveries left, above) at
//     once (the dead letter, then +TERM on the lease's delivery), so the
//     publish or replay is admitted. Otherwise the dead letter appears
//     after some Store's next Receive, and a publish or replay of another
//     Store is refused as full until then (its FailedAt is still the lease's ExpiresAt when
//     this Store handed the lease out).
//     "Last" is by this Store's policy: a MaxDeliveries raised through
//     another Store, which this one has not declared, is not seen.
//   - A death whose advisory the server dropped (above) is found only
//     when no lease of the queue is out at a sweep, or below the
//     consumer's ack floor: the server lists no pending messages. When
//     this Store handed the last lease out, its FailedAt is that lease's
//     ExpiresAt (or this Store's lowering declaration, as above) and its
//     Deliveries that lease's count, the count at death as every broker
//     of the port records it (above the policy's MaxDeliveries when that
//     was lowered during the lease); otherwise
//     its FailedAt is the sweep that buried it and its Deliveries the
//     policy's MaxDeliveries (the server's count was never told; the two
//     differ only after a change of MaxDeliveries). A lapsed lease of this
//     Store counts as the last only when it was on a delivery the policy
//     allowed no more of, when handed out or now: one on an earlier
//     delivery, which another Store followed with the last, neither dates
//     nor counts the death. Only when MaxDeliveries changed between that
//     earlier lease and the last can such a lease pass for the last.
//   - Receipts live as long as the Store that issued them: any other Store
//     refuses them (UnknownReceipt), the same program after a restart
//     included. The lease still lapses on the server.
//   - Receive order. The server delivers redeliveries, and messages whose
//     retry delay ended, before new ones; among new ones, stream order.
//     It is not oldest EnqueuedAt first.
//   - Durability. Publish returns when the server has stored the message:
//     on the device only when the server syncs every write (jetstream {
//     sync_interval: always }), otherwise within its sync interval (2 min
//     by default); with Replicas 3, on a quorum of servers, so one server
//     can die without losing it.
//   - Dedup. The window is measured from the original's EnqueuedAt (the
//     publishing process's clock) to the caller's clock, so clock skew
//     between processes moves its end; the server's own duplicate window,
//     from its store instant a moment later, may hold a key a few
//     milliseconds longer (the answer is then still the original). It is
//     at least 100 ms: a shorter DedupWindow is QueueMisconfigured. A
//     keyed publish refused as full (or that failed after its claim) leaves
//     the claim: a retry more than 10 ms later enqueues the message with
//     the EnqueuedAt of its own publish, from which the server's window
//     also runs (the first attempt's would let the server hold the key up
//     to a window longer). A process that dies after its message was
//     stored but before the record names it leaves a claim, which the key's
//     next publish completes while the server still knows the message (in
//     memory, or from its files while the message is stored); if the
//     message is acknowledged and the server restarts before any such
//     publish, the key is forgotten and enqueues again.
//   - Wake. Publications from other processes close the signal too (the
//     work stream republishes their headers). Scheduled and In know only
//     this Store's leases and nacks: a Store does not see when another
//     process's lease lapses or retry delay ends. While other processes
//     hold leases on the queue, Wake asks to be called again within
//     Options.Recheck (1 s by default, at most the queue's
//     VisibilityTimeout), so an idle consumer picks such a message up
//     that long after its lapse at most; with Recheck negative, only at
//     its next Receive (after the next publication, or this Store's own
//     next lease event).
//   - MaxMessageBytes is bounded by the server's max_payload (1 MiB by
//     default) less 8 KiB for headers (a dead letter's quoted reason and
//     public cause take up to about 5 KiB): a larger payload is
//     MessageTooLarge whatever the policy says, with the reason and code
//     of the sentinel but a text (and public half) that names the
//     server's max_payload and its value instead of MaxMessageBytes.
//     Raise max_payload to carry 1 MiB payloads.
//   - Dead-letter replay. Of replays and deletes of one dead letter racing
//     each other one succeeds, and the others find it gone, as with every
//     broker of the port: a replay first claims the record (writes it
//     again, marked with when the claim ends, expecting the record it
//     read), then publishes the message and deletes the record. A replay
//     or delete that comes while another replay holds its claim finds the
//     dead letter gone (DeadLetterNotFound) even when that replay then
//     fails. A replay that stops halfway (its process dies, or its delete
//     of the record fails) leaves the record claimed until the claim
//     ends: at the deadline of the call that made it (its context's,
//     else Options.Timeout after the call began), and at the latest
//     Options.Timeout, or a minute when that is shorter, after the claim
//     was made; on the clock of the process that made it, so clock skew
//     moves the end for the others.
//     The claim's end bounds the replay's calls, not its publish: a
//     publish that timed out, or whose connection was lost, may be stored
//     by the server after the call gave up, at any later time. So a
//     replay whose publish the server refused (QueueFull, say) gives its
//     claim back and the record is as before, but one that failed without
//     the server's answer leaves its claim on the record, ended at once,
//     as one that stopped halfway leaves its own once it ends. A replay
//     then takes the record over, and a delete does not remove it but
//     finishes the replay (as a later replay does, below; a full queue
//     refuses that, and the delete, with QueueFull) and finds the dead
//     letter gone: the replay won. Such a dead letter, still listed by
//     DeadLetters, can be removed for good only after its message dies
//     again (a fresh record). A later replay
//     publishes the message with the same Nats-Msg-Id, which the work
//     stream folds into the first one's copy while that copy awaits its
//     first delivery and the DedupWindow lasts. Otherwise the message is
//     queued again: once the window passed, under the same Nats-Msg-Id;
//     while it lasts, under a fresh one, which the replay first writes
//     into its claim, so that the replay or delete after it is folded
//     into this copy. A first copy that was delivered is deleted then:
//     it may be dead already, unnoticed (above: the server notices a
//     redelivered message's last lapse only at a later pull), and the
//     replayed message must get MaxDeliveries attempts again. A first
//     copy that was acknowledged, or that a consumer holds meanwhile, is
//     processed twice, never lost. When the copy dies (Nack, Reject, a
//     lapse) before a replay, its death replaces the claimed record as
//     any death does, and a replay of it publishes under a fresh
//     Nats-Msg-Id. What remains: the server folds
//     a publish that lands late into the copy a later replay or delete
//     queued only within the DedupWindow of that copy's publish, and
//     after a restart of the server only while it still stores the copy;
//     a publish held up longer than that (a connection that buffered it
//     through a long outage) queues the message a second time.
//
// A Store, its queues and every method are safe for concurrent use.
package natsjs
