// Package fuzz holds walbroker's fuzz targets: inputs no hand-written test
// would think of, fed through the layers from the bottom (a frame) to the
// top (the broker's port), each checked against what the layer promises.
// It has no code of its own; everything is in its tests.
//
// # Targets
//
//   - FuzzFrameDecode: arbitrary bytes through segment.Decode at an
//     arbitrary offset. It must never panic and fail only with the
//     package's errors; a frame it accepts lies within the data and
//     segment.AppendFrame of its fields gives back exactly the bytes it was
//     read from. Conversely a frame built by AppendFrame from fuzzed fields
//     decodes to those fields (or is refused with ErrBadType when they are
//     not a valid kind and place), and refuses every bit flipped outside
//     its length field and any cut.
//   - FuzzSegmentScan: arbitrary bytes, optionally behind a valid segment
//     header and around valid frame groups the input lays out, through
//     segment.Scan and segment.ScanFrom, with and without salvage. End
//     lies in [HeaderSize, len(data)]; the records handed over are in
//     order, whole groups, before End, and each decodes on its own; a
//     second scan reports the same; scanning data[:End], with zeros
//     appended or not, gives the same records and a clean end; ScanFrom at
//     a group boundary gives the rest of the same scan; a callback error
//     stops the scan; with salvage the records are those of the plain scan
//     followed by more, and the skipped spans are ordered, non-empty and
//     hold no record. And since the input says where every whole frame of
//     the segment lies and what each claims durable, each scan's report
//     (End, records, seal, clean end, torn tail or corruption and where,
//     skipped spans) is the one the package documentation's rules give.
//     The header's salt is 0 or not; with one, the stale frames a recycled
//     file holds name the segment under another salt, and none is taken.
//   - FuzzCheckpointLoad: arbitrary bytes as index/checkpoint, either raw or
//     behind a header computed around them (right magic, version, length
//     and CRC-32C, so that the body decoder is what gets exercised), beside
//     real table files, through index.Load and index.LogHints. Load either
//     refuses with an error wrapping index.ErrDamaged (or
//     index.ErrLaterVersion, for a header naming a later version), or
//     returns an index
//     whose every queue dumps (damage may be reported by Damaged, nothing
//     may panic), whose streams stay below its next sequence, and whose
//     table, once closed, leaves no file open and no mapping behind.
//   - FuzzReplayCheckpoint: arbitrary event records, each as a replay of
//     a verified log would take it (so the checksum is no defence),
//     applied to an index as a running store applies them: a plan, one
//     byte per record, spreads them over log segments (positions
//     increasing), moves the clock on and promotes every queue between
//     them, and takes checkpoints between them (the table flushed, the
//     table files no message needs removed). Apply never panics and
//     refuses only with index.ErrBadEvent (Open then refuses the log as
//     Corrupt), and Decode a kind above the last one only with
//     index.ErrLaterKind (a later build's); when no sequence is published in two queues (the log's
//     writer never does that), what the index counts per segment (its
//     messages, their records' bytes, their state events' bytes) and per
//     table chunk is what its messages and keys add up to, and the order
//     checks below hold. Each checkpoint, loaded and given the records
//     after it, and the last one, loaded, hold what a replay of every
//     record into a fresh index holds, whatever the clock did before it
//     was taken; so does an index that took every record twice in a row
//     (an event sets the state it names), and the running index from its
//     clock's last reading on: queues, dumps at several instants, latest
//     clock readings, next sequence and queue number, orphans (but for
//     the one that took them twice), segment uses, live table chunks, and
//     the order in which each then hands out its messages and one
//     published later.
//   - FuzzBrokerDifferential: the input is decoded, three bytes per
//     operation, into up to 200 operations on one store (two queues with
//     small policies, 16 KiB segments so that rotations, checkpoints,
//     copies forward and reclamation happen, a fake clock the operations
//     move, backwards too): publish, keyed publish, batch publish,
//     receive, ack, nack, reject, extend, replay, delete, dead-letter
//     listing, stats, churn (receive and ack, publish a full batch,
//     receive and ack: a few KiB of log), clean reopen, reopen after
//     removing index/ (a rebuild from the log), a power loss
//     (vfs.CrashFS.CrashClone keeping no unsynced byte; the run goes on in
//     the clone), and an audit of such a clone. An input that starts with
//     0xff has a second byte of settings (bit 0: SyncPublish, else
//     SyncAll) and one more operation, a policy change: Queue again with
//     one of a few valid policies (lease time, retry curve, MaxDeliveries
//     down and up, Capacity down, up and unbounded, size bound, dedup
//     window) or one Validate refuses. Bit 1 of the settings adds one more,
//     a Consume: broker.Consume over one queue with one handler, Batch 1
//     to 4 and no Prefetch, or Prefetch 1 to 4 and a Batch that fills it
//     (not under SyncPublish), run only when a message is receivable; the
//     handler answers each delivery as the input says (nil, an error with
//     a classified cause or none, DoNotRetry, context.Canceled, a panic)
//     and cancels Consume's ctx itself, on a call the model says comes, and
//     Consume must return context.Canceled (see consume_test.go). Bit 2
//     of the settings adds Wake, a process crash (vfs.CrashFS.Crash,
//     then a store opened on the same page cache, which keeps every byte
//     written unsynced until something syncs it: a later power loss
//     keeps what the reopen built on), a clean reopen whose new process
//     first declares one queue with another policy (or one Validate
//     refuses, then its own), and two Extends whose deadline passes year
//     2262 (refused, the lease unchanged); a clock moved onto such a
//     deadline then has every Receive refused (QUEUE_MISCONFIGURED: no
//     lease it would make fits), and keys enqueued before the epoch are
//     forgotten there as anywhere. Bit 3 runs under SyncNone,
//     where a power loss could leave any state since the last background
//     commit, which runs on real time: there the power loss is a process
//     crash, and the audited clone what one leaves (every write, every
//     change of names). Bit 4 starts the clock 10 s before the Unix
//     epoch, which is an instant like any other, not "at once". Wake's
//     answer is checked against the model (at
//     once when a message is receivable, else the earliest end of a
//     retry delay or lapse of a lease with deliveries left, else not
//     scheduled), and after each operation every signal it handed out:
//     closed exactly when a publish, a hand-back Nack, a replay, a
//     policy change, an Extend that brings the lapse closer, or Close
//     happened on its queue (see wake_test.go). Any other input runs
//     under SyncAll without policy changes or Consume, as every input
//     did before: the corpus keeps its meaning.
//     A reference model written from the contract (API.md,
//     docs/DESIGN.md) predicts every answer: error classes, IDs,
//     payloads, EnqueuedAt, deliveries, lease and retry instants, dead
//     letters with their causes, gauges (OldestReady among them) and
//     counters, what a policy
//     change does to what is pending, leased and delayed, and what a
//     Consume does: which messages its handler sees, in what order, with
//     what receipts and deliveries, and how each is settled (acked, nacked
//     to its retry delay, rejected or nacked into the dead letters with
//     its reason, code and cause, a held one its handler never started
//     nacked as the consumer stopped). Every reopen
//     declares the queues with the policies last set, and must write
//     no declaration: the store kept them (the only records it may
//     write are the dead letters of a lowering of MaxDeliveries a power
//     loss cut short, which the first handle finishes and counts). After a clean reopen, a rebuild, or
//     under SyncAll a power loss, the state must equal the model's
//     exactly. After a power loss under SyncPublish it must equal the
//     model's state after one of the calls since the last publish or
//     policy change (which are fdatasynced, with all before them): the
//     run audits a copy of the clone against each such state, oldest
//     first, fails if none passes, and goes on from the first that does
//     (or ends there, with its audit, when another state differs from it
//     only in what no audit sees, its dedup clock or a lease's receipt;
//     see lost_test.go). Each audit drains both queues, walks the clock
//     through the deadlines the model knows (the first 64 of them; a
//     later one is not walked), then moves it 24 hours on and drains
//     again; each run ends with one.
//
// Each target starts from generated valid and invalid inputs. Those of
// FuzzReplayCheckpoint are built by replaySeeds and handed over with f.Add
// at every run; those of every other target are the files named seed-*
// under testdata/fuzz/<Target>/, which TestWriteSeedCorpus writes with
// WALBROKER_FUZZ_WRITE_CORPUS=1 and otherwise checks are, byte for byte,
// what the generators write. testdata/fuzz/<Target>/ also holds every
// input a fuzzing run found failing: a failure of the code under test
// stays there as its regression test until the code is fixed.
// regress_test.go states each failure found so far as a plain test.
//
// # Running
//
//	go test ./fuzz/        # the seed corpora, the regression tests and a few random broker runs
//	go test -run='^$' -fuzz='^FuzzSegmentScan$' -fuzztime=60s ./fuzz/
//
// A broker input takes about 30 ms, so the engine's default minimization
// of every new input (up to 60 s each) starves FuzzBrokerDifferential;
// bound it with -fuzzminimizetime=20x. While a failure of the code under
// test is in a corpus, fuzzing that target stops on it at once. The
// divergences it found are fixed; their names stay so that, should one come
// back, fuzzing can be told to look past it while it is studied:
//
//	WALBROKER_FUZZ_TOLERATE=settle-lapse,copy-lapse \
//		go test -run='^$' -fuzz='^FuzzBrokerDifferential$' -fuzztime=10m -fuzzminimizetime=20x ./fuzz/
//
// Environment:
//
//	WALBROKER_FUZZ_SEED      seed of TestBrokerDifferentialRandom (every run prints its seed)
//	WALBROKER_FUZZ_INPUTS    how many random inputs it runs: 40 by default, 4 with -short;
//	                         a soak sets it high (2000 take about 70 s)
//	WALBROKER_FUZZ_TOLERATE  comma-separated known failures of the code under test to look past,
//	                         strict when unset: settle-lapse, copy-lapse (the store, see
//	                         model_test.go and regress_test.go; both fixed)
//	WALBROKER_FUZZ_HISTORY=all      a broker failure lists every operation, not the last 120 lines
//	WALBROKER_FUZZ_WRITE_CORPUS=1   regenerate the seed-* files of every corpus
package fuzz
