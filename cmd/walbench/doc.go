// Command walbench tells an operator what a disk can do for walbroker and
// which settings to use on it. Copy it to the machine that will run the
// program, run it on the disk the store will live on, and read its tables
// and its recommendation.
//
// Usage:
//
//	walbench [command] [flags]
//
//	walbench                      probe + publish + drain, then the recommendation (under a minute)
//	walbench probe                the disk alone
//	walbench publish -producers 1,64 -size 1024 -sync all
//	walbench drain -consumers 1,64 -batch 64 -method receive-ack
//	walbench mixed -producers 16 -rate 5000 -consumers 16
//	walbench reopen -messages 1000000
//	walbench sweep [-producers 1,16,64] [-size 256,1024,16384] [-segment-bytes 4MiB,64MiB] [-sync all,publish,none]
//	walbench wal -producers 1,64  the log alone (package wal), for comparison
//	walbench full -rounds 3 -json bench.json
//	walbench report -in bench.json [-bench BENCH.md | -md]
//
// walbench COMMAND -h (or walbench help COMMAND) lists a command's flags;
// walbench help doc prints this text, which a copied binary carries.
// A list flag (-producers 1,64) makes one workload per value, and refuses
// a value given twice, which would be measured twice, however spelled
// (-segment-bytes 0 is the default, 64 MiB: 0,64MiB is refused).
// Every measuring command takes -dir DIR (the temporary directory is made
// under DIR, the current directory by default, and removed at the end,
// also after an error or Ctrl-C; an empty DIR is refused), -json FILE
// (the results, in the schema below), -rounds N and -cpuprofile FILE (a
// CPU profile of the whole run, for go tool pprof).
//
// Values that would exhaust the memory, overflow or measure nothing are
// refused as bad flags: -producers at most 1024 (each producer records
// into latency histograms of its own, 254,020 bytes each), -consumers at
// most 1024, -batch at most 10,000, -size at most 1 MiB
// (broker.DefaultMaxMessageBytes, the largest message the benchmark's
// queue accepts; a message, or a wal record, must also fit in one
// segment: see broker.Options.MaxMessageBytes), sizes
// (-segment-bytes) that overflow 64 bits, a -time or -probe-time under
// 10ms (a shorter window measures the timers, not the disk), a -time,
// -probe-time, -warmup or drain -limit over an hour and -rounds over 100
// (a mistyped value would run for ever; a longer run is several runs), a
// mixed -rate at which a producer would publish less than once in -time
// or more than a million times a second, and a mixed -sample under 10ms, one
// that would keep more than 100,000 backlog samples in -time (each is
// kept in memory and written to the JSON), or one not shorter than -time,
// which would take none (without -sample, the default 250ms is half of a
// -time shorter than 500ms, at least 10ms). A -limit under 10ms is
// refused too. A drain or reopen whose prefilled store would not fit in
// the free space of -dir is refused before anything is made there (exit
// 1): aimed at a production disk, a mistyped -messages would fill it. One
// whose size does not even count in 64 bits fits on no disk, and is
// refused so whatever the free space. Where the free space cannot be
// read, one larger than the defaults make (100,000 messages of 1 KiB,
// about 0.3 GiB with its segments) is refused the same way: whether it
// fits cannot be told.
// A workload whose estimated peak memory (producers × message size × the
// copies a Publish makes, the deliveries in hand, a drain's -prefetch
// held ones among them, the prefill's batches, the histograms) is above
// 80% of what the machine has available (Linux: MemAvailable, or less
// where the run's cgroup has a closer limit; not checked on macOS) is
// refused the same way, naming the workload, the
// estimate, what is available and the flags to lower: 1,024 producers of
// 1 MiB messages take about 4.4 GB, and a run the kernel kills for want of
// memory loses what it measured. A sweep skips such a point instead, says
// so on stderr, and lists it under the recommendation's not_measured; a
// point skipped in some rounds only (the memory available changes) is
// summarized over the rounds that measured it, and compared. A sweep that
// skipped every point, or every point under a durable sync mode and so
// has no recommendation, fails (status 1) with an error naming them.
// -force-memory runs them anyway.
//
// Units: MB/s is 10^6 bytes a second (as disks are rated); sizes are in
// B, KiB and MiB (2^10 and 2^20 bytes); latencies in ns, µs, ms and s,
// with three significant digits.
//
// # Workloads
//
// Every workload but probe and wal runs on a new store (broker.Open in a
// new subdirectory) with one queue (VisibilityTimeout 1 min, MaxDeliveries
// 5, reopen's more than any run makes; with segments under 2 MiB,
// MaxMessageBytes is the message size), with random payloads.
//
//   - probe: the disk alone, on a file of the directory: pwrite 4 KiB +
//     fdatasync in a loop over a 64 MiB file written full of zeros and
//     synced beforehand (what a commit of the log costs: the log writes
//     into pre-written segments), for -probe-time (the probe command's
//     -time); the same with 64 KiB pwrites (about a commit of 64
//     publishes of 1 KiB), for half that;
//     sequential bandwidth, 1 MiB pwrites with an fdatasync every 8 MiB
//     over the same file, for half that; pwrite 4 KiB + fdatasync at the
//     end of a growing file, for half that (what pre-writing saves). From the fdatasync rate and the
//     bandwidth, the ceiling for durable messages of a size with perfect
//     group commit: with P closed-loop producers, every fdatasync carrying
//     one message of each, P / (1/fdatasyncs_per_sec + P × B / bandwidth),
//     B the bytes a message takes in the log (its frame and publish event
//     around the payload). Each round of the other measuring commands but
//     drain, mixed and reopen starts with the probe (-probe-time 0 skips
//     it), so that every ratio to it is to the disk as it was minutes
//     before, not hours.
//   - publish: for each sync mode × size × producer count, P goroutines
//     each calling Publish in a loop (closed loop) for -warmup, then
//     measured for -time. msgs/s, MB/s and commits/s from the deltas of
//     Store.Stats over the window; publish latency from every Publish
//     started in it; records per commit (the group-commit factor:
//     messages published per fdatasync, so that msgs/s is commits/s ×
//     records per commit; the records the store writes for itself, a
//     new segment's preamble, are no message and not counted); and,
//     where every Publish waits for an fdatasync (sync all or publish),
//     the ratios to the round's probe: msgs/s ÷ its fdatasyncs/s, msgs/s ÷
//     its ceiling for P producers of that size, p99 ÷ its p99 fdatasync,
//     and p99 ÷ its p99 fdatasync after 64 KiB (how much of the tail is
//     the size of the commits, not the broker).
//   - drain: a queue prefilled, untimed, with -messages messages
//     (PublishBatch of 256), then emptied: by broker.Consume (Batch,
//     Concurrency, and -prefetch as its Prefetch) with a handler that
//     only counts, or by goroutines each calling Receive(batch) and Ack
//     for each delivery (-method receive-ack), timed from the start until
//     every call returned: -limit ends the drain, and its time then runs
//     on until the calls in flight return. msgs/s (of the messages acked,
//     or passed to Consume's handler), and leases and acks per commit
//     (not the records the store writes for itself: preambles, copies
//     forward). A drain that -limit ends with messages left is marked
//     "cut at -limit", with a note: its rate is of the messages it
//     handled.
//   - mixed: -producers goroutines publish at -rate msgs/s together (a
//     list: one workload per rate), each call at its scheduled instant,
//     or, when the producer's last call returns after that, at once
//     (one call at a time per producer: a slow call makes those behind
//     it late, and they follow back to back until it is on schedule
//     again), while broker.Consume takes the messages; -time measured
//     after -warmup. A producer waits for its instant with a timer set a
//     little before it, then yields the processor until the instant comes:
//     a timer alone fires up to a millisecond late in an idle process, and
//     the lateness would count as the broker's. The margin follows how
//     late the timers fire, and all the producers together spin for at
//     most a quarter of one CPU on average, so that at a high rate they
//     may still begin late: "start_late_ns" says how late, on average,
//     they began the calls they were on schedule for, and a note under
//     the table says it when that is more than 100µs. published/s is of the calls begun in the window.
//     Publish latency is measured from the scheduled instant, not from
//     when the call began, so that a stall counts against every call it
//     delayed (corrected for coordinated omission; "call p99" is the
//     uncorrected one): of the calls begun in the window, and of those
//     scheduled in it that a stall held until it closed, which the
//     producers still make after it (for as long again at most; a note
//     says how many they had not made by then); end-to-end latency of
//     the same calls, from the scheduled instant (carried in the
//     payload) to the start of the handler; the backlog (Ready + Leased
//     of Queue.Stats) every -sample. After the window the consumers get
//     as long again to take what it published. Ctrl-C before those late
//     calls were made, or those messages taken, leaves them (the window's
//     slowest) out of the latencies: the row is then marked interrupted,
//     with a note of how many.
//   - reopen: a store filled with -messages pending messages and closed,
//     then, each round, opened cold (its files evicted from the page
//     cache) until the first Receive(1) returns a message: from the
//     checkpoint Close wrote, and with the index directory removed (a
//     rebuild from the whole log); the heap in use with it open. Each
//     open hands its message back (Nack, ready again at once) before it
//     closes the store, so that every open finds the backlog the fill
//     left, however few -messages there are.
//   - sweep: at each point of the grid -sync × -segment-bytes × -size ×
//     -producers, on a new store: a publish window as above, for -time,
//     then a Consume drain (-batch, -consumers) of everything it left, for
//     at most as long (a drain that this cuts with messages left says so
//     in a note: its rate is of those handled). "through" is the rate at
//     which messages pass through the queue when publish and drain take
//     turns on the disk: 1 / (1/publish + 1/drain), each round's (over
//     several rounds, the median of those, not the formula on the medians
//     of publish and drain).
//   - wal: the log alone (wal.Open, -sync always by default), appenders
//     calling Append with one record in a loop, for comparison with the
//     broker's publish rows ("÷ log": publish msgs/s ÷ the log's appends/s
//     with as many appenders and new segments, same round), once per
//     -segments source. With new segments the log only grows, and each
//     rotation takes a segment the log wrote full of zeros in the
//     background: the disk writes every byte twice, as under a store whose
//     backlog grows. With reused segments ("segments reused") a goroutine
//     retires every 2 ms all segments but the active one (RemoveBelow), as
//     a reader that keeps up lets a log do, and the log is filled, untimed,
//     until two rotations have reused a retired file: each rotation in the
//     window then reuses one, writing nothing ahead, as under a store whose
//     consumers keep up.
//   - full: probe, wal (1 and 64 appenders, new and reused segments),
//     publish (1, 16, 64), drain (Consume 64×64, sync all and publish),
//     mixed (2,000 and 20,000 msgs/s: the second fills a 64 MiB segment
//     of 1 KiB messages every three seconds, so its window holds a
//     rotation, the next segment's zero-fill and a checkpoint), sweep,
//     each round; then reopen. With the defaults and
//     -rounds 3 it takes about five minutes.
//
// With no command, walbench runs the profile: probe, publish (1, 16 and 64
// producers of 1 KiB under SyncAll, 3 s each) and drain (Consume, batch
// 64, concurrency 64, under SyncAll and SyncPublish, 20,000 messages with
// one round, 100,000 with more), in under a minute, and ends with the
// recommendation.
//
// # Recommendation
//
// The profile, the sweep and full end with a recommendation of the
// store's Options.Sync and SegmentBytes. Each durable setting measured
// (sync all or publish × segment size) is scored by the geometric mean,
// over the points every such setting was measured at (its own points when
// they share none), of the rate at which messages went
// through the queue (publish and drain taking turns, each round's publish
// with its own drain, the median over the rounds: a sweep point's
// "through msgs/s"; the publish rate where no drain was measured). The best score wins; scores within 3% of
// it count as equal, and then SyncAll beats SyncPublish and the default
// segment size beats the others. The profile measures publishes under
// SyncAll only and pairs them with the drain of each mode: a Publish
// waits for the same fdatasync under both. It measures one segment size
// (-segment-bytes), which its recommendation names, and says that the
// sweep compares them; a sweep given one segment size, or one durable
// sync mode, says that it compared none. A profile stopped (Ctrl-C, a
// failure) before a drain was measured whole scores its publishes alone,
// under SyncAll: its recommendation says it was made from the publish
// workloads alone, and names the sync modes its drains did not reach as
// not compared (SyncPublish), as a sweep stopped early names the settings
// it did not reach. SyncNone is never recommended
// (a power loss loses what its last SyncInterval acknowledged); its best
// publish rate is shown beside. With the settings come what to expect:
// the fewest producers measured that reached 80% of the best durable
// publish rate at those settings, with their msgs/s and p99, and the
// drain rate. A publish window that published nothing is no point of the
// recommendation, nor is a workload Ctrl-C cut short, nor a sweep point
// whose drain failed (of several rounds, the rounds that ran to their end
// count): a sweep point cut between its window and its drain would be
// scored on its publish rate alone against the others' publish and drain. A setting left without a whole point is
// not scored, and the recommendation names it. With no durable point
// left, the report says that there is no recommendation, and why (the
// run interrupted, or failed, before its publish workloads ran, or before
// one was measured whole; no durable sync mode asked for; or none
// published). On tmpfs or ramfs, where an fdatasync
// reaches no device, the report warns beside the machine facts, and the
// recommendation's last line says so again. Segments of about 1 MiB or
// less hold no message of the default bound (1 MiB): a recommendation of
// such a size also gives the PolicyValue.MaxMessageBytes each queue must
// be declared with, as a store with those segments refuses one declared
// with the default policy.
//
// # Rounds and ratios
//
// The disk of a shared machine is noisy: its fdatasync rate can change by
// half within minutes. So every ratio is computed within a round, and with
// -rounds N every figure is the median over the rounds (the mean of the
// two middle ones for an even count), every ratio the median of the
// rounds' ratios (not a ratio of medians), with its min–max over the
// rounds beside it. Counts (ops, commits, seconds) are summed. A workload
// fewer rounds measured (a run cut short, a sweep point skipped for its
// memory in some rounds) is summarized over those that did, and marked
// "k of N rounds"; so is each loop of the probe (and each ceiling), which
// a round cut in an earlier loop did not run.
//
// # Progress and Ctrl-C
//
// A step that lasts more than two seconds shows its progress on stderr: a
// progress bar when stderr is a terminal, else a line every two seconds.
// Ctrl-C (or SIGTERM, or SIGHUP: its terminal closed) stops the current
// measurement: walbench removes its directory, writes -json, prints what
// was measured (a row cut short marked "interrupted", a row fewer rounds
// measured "k of N rounds"), says which signal stopped it, and exits with
// 128 + the signal's number, as a shell reports a death by it (130 for
// Ctrl-C, 143 for SIGTERM, 129 for SIGHUP). A signal that comes once
// everything was measured (while the directory is removed, -json written
// or the tables printed) cuts nothing short: the report and the tables
// say the run was not interrupted, stderr says when the signal came, and
// walbench exits 0, as for any whole run. A second signal (any of the
// three) removes the directory (and the -json report's temporary file),
// says what it removed and what it could not (with why: the directory is
// then left behind), and exits at once; the same signal again within
// 200ms of the first is that one delivered twice (as timeout(1) and a
// signal to the process group do), and is ignored. The text the run prints, and
// walbench report's tables of its JSON, say under the machine facts that
// it was interrupted or failed, and why.
//
// After a window the calls still in flight (a slow disk may take long to
// commit what 1024 producers of 1 MiB left) get as long as they keep
// returning or the store keeps committing, with a progress line of how
// many returned: walbench says the broker hung, and ends the run, only
// after 20 s without either.
//
// An error ends the run after printing what was measured, with exit code
// 1; bad flags exit 2. At the end of a run the directory is removed, then
// -json written, then the tables printed: a stdout closed early (walbench
// ... | head) fails only the tables, which stderr says, with exit code 1.
//
// -json FILE names a regular file or a new one; a directory, a device, a
// named pipe or a link to nothing is refused, and so is an empty name
// (-json "$OUT" with OUT unset), as a bad flag, for -cpuprofile and
// report's -bench too: it names no file, and the run would keep nothing.
// Before anything is measured walbench makes a temporary file beside FILE
// (so a directory that cannot be written ends the run at once, exit code
// 1, as a -dir or -cpuprofile that cannot be used) and says on stderr if
// FILE exists. At the end, also
// after Ctrl-C or an error, when something was measured, the report is
// written to the temporary file, synced, and renamed over FILE (through a
// symbolic link: over the file it points to), and stderr says when that
// replaced a file. Until then FILE is not touched: a run that measured
// nothing, or could not write its report (a full disk), leaves the file
// that was there as it was, says so on stderr, and removes its temporary
// file. walbench removes no file it did not make. -cpuprofile FILE is
// written the same way, at the end of a run whose measuring did not fail
// (an interrupted one included, and one that could not write its report
// or print its tables). -json and -cpuprofile naming one file, however
// spelled (through a symbolic link to its directory too), are refused:
// the profile would replace the report.
//
// # BENCH.md
//
// The figures in BENCH.md come from one run's JSON:
//
//	go run ./cmd/walbench full -rounds 3 -json cmd/walbench/testdata/bench.json
//	go run ./cmd/walbench report -in cmd/walbench/testdata/bench.json -bench BENCH.md
//
// The second command rewrites the part of BENCH.md between the lines
// <!-- walbench:begin --> and <!-- walbench:end --> and leaves the rest as
// it is. It writes the new text to a temporary file beside BENCH.md and
// renames it over, as -json does, so that a failure (a full disk) leaves
// BENCH.md as it was, never cut short. The JSON of the run BENCH.md shows stays in testdata, and a test
// checks that the report command makes BENCH.md's section from it, byte
// for byte.
//
// # SCHEMA
//
// -json FILE writes one object; the tables are made from it alone, so it
// holds every figure they show. Latencies are in nanoseconds (int), rates
// per second (float), sizes in bytes; null where a figure does not apply
// or was not measured. The fields marked "omitted" are left out when they
// are 0 (or empty), which is also how they are left out of the rows they
// do not apply to: read a missing one as 0. The figures of a row from
// "vs_wal" on are left out, not null, where they do not apply.
//
// walbench report refuses, naming what is wrong, a file cut short or
// damaged (saying at which byte), and a JSON walbench could not have
// written: another schema (read before the rest, whose fields another
// version may type otherwise), a field of another type than below, a
// command it does not run, no rounds, nothing measured, a row of another
// kind than those below, more backlog samples than -sample allows, or a
// number out of range (every figure is at least 0, at most 10^15, and
// seconds at most 10^9), which the tables would print overflowed. It
// refuses a device for -in or -bench (one such as /dev/zero never ends);
// a named pipe is read.
//
//	{
//	  "schema":      "walbench/2"
//	  "command":     string: profile, probe, publish, drain, mixed, reopen, sweep, wal, full
//	  "args":        [string], the command line after the program name
//	  "machine": {
//	    "date":        string, RFC 3339 UTC, when the run started
//	    "num_cpu":     int
//	    "goos", "goarch", "go_version", "kernel": string
//	    "filesystem":  string: ext4, xfs, btrfs, tmpfs, ... or unknown
//	    "fs_magic":    string, statfs f_type in hex
//	    "device":      string, the block device mounted there ("" unknown)
//	    "write_cache": string, its queue/write_cache: "write back", "write through", ""
//	    "load_avg":    [float, float, float], 1, 5, 15 min, at the start
//	    "dir":         string, the temporary directory, removed before the
//	                   report is written and the tables printed
//	    "dir_left":    string, why it could not be removed; absent when it was
//	  }
//	  "rounds":      int, asked for
//	  "seconds":     float, the whole run
//	  "interrupted": bool, Ctrl-C cut the run short
//	  "interrupted_by": string, the signal that did: "SIGINT" (Ctrl-C), "SIGTERM"
//	                 or "SIGHUP"; absent if none, or not known
//	  "error":       string, the failure that ended it early (absent if none)
//	  "probe": {                                   (absent without a probe)
//	    "seconds", "interrupted", "fdatasyncs" (count)
//	    "interrupted_in": string, the step Ctrl-C stopped: "prefill" (its file
//	                     written full of zeros), "fdatasync", "large", "write"
//	                     or "append" (the loops below, in the order they run;
//	                     those after it did not run); absent if none; a
//	                     summary has the last cut round's, per_round each's
//	    "fdatasyncs_per_sec", "fdatasync_p50_ns", "fdatasync_p99_ns",
//	    "fdatasync_p999_ns", "fdatasync_max_ns":   the overwrite loop (4 KiB pwrites)
//	    "large_fdatasyncs_per_sec", "large_p50_ns", "large_p99_ns",
//	    "large_p999_ns", "large_max_ns":          the overwrite loop with 64 KiB pwrites
//	    "append_fdatasyncs_per_sec", "append_p50_ns", "append_p99_ns",
//	    "append_p999_ns", "append_max_ns":         the growing-file loop
//	    "write_mb_per_sec":  float, sequential bandwidth, 10^6 bytes/s
//	    "ceilings": [{"producers": int (0: any number), "size": int, "msgs_per_sec": float}]
//	    "notes", "per_round", "round", "rounds":   as for a row; "rounds" counts
//	                     the rounds whose probe measured any loop, and "per_round"
//	                     holds every round's probe, one stopped in its prefill too
//	  }
//	  "rows": [{                                   in the order they ran
//	    "kind":          "wal" | "publish" | "drain" | "mixed" | "sweep"
//	    "workload":      string, as in the table
//	    "sync":          "all" | "publish" | "none"; wal: "always" | "interval" | "never"
//	    "producers":     int, producers or appenders (wal, publish, mixed, sweep); omitted
//	    "consumers", "batch": int, Consume's Concurrency and Batch, or the
//	                     Receive+Ack goroutines and Receive's max (drain, mixed,
//	                     sweep: of its drain, omitted where none ran); omitted
//	    "prefetch":      int, Consume's Prefetch (drain, when -prefetch set it); omitted
//	    "method":        "consume" | "receive-ack" (drain, mixed); omitted
//	    "size":          int, message (record) size
//	    "segment_bytes": int, the segment size used
//	    "segments":      "new" | "reused", where the rotations took their segments (wal); omitted
//	    "messages":      int, prefilled (drain); omitted
//	    "target_per_sec": float (mixed); omitted
//	    "round":         int, 1-based (a per-round row); omitted
//	    "rounds":        int, rounds that measured it (a summary row); omitted
//	    "seconds":       float, the measured windows, summed (drain: from its
//	                     start until its calls returned)
//	    "fill_seconds":  float, the untimed prefills, summed (drain); omitted
//	    "interrupted":   bool, Ctrl-C cut a window of it short (mixed: or the
//	                     late calls and the consumers' wait after it)
//	    "drain_failed":  bool, sweep: the drain after a window of it failed (the
//	                     run's error says how): that round has no drain figures
//	                     and is not scored; absent otherwise
//	    "limited":       bool, drain: -limit ended a drain of it with messages
//	                     left, its rate is of those handled (absent otherwise)
//	    "ops":           int, messages published (drain: handled), summed
//	    "commits":       int, commits in the windows, summed: the store's
//	                     (StoreStats.Commits: fdatasyncs that made records
//	                     durable); wal: every fdatasync of the log's
//	                     segments, a rotation's of its seal included
//	    "rotations", "new_segments": int, wal: the log's rotations in the
//	                     windows, and of them those to a segment written full
//	                     of zeros (not reused), summed; omitted
//	    "rushed_segments": int, wal: of the new segments, those the log
//	                     reached before their zeros were done, so that the
//	                     rest was allocated (wal.Stats.ZeroFillsRushed), summed;
//	                     omitted
//	    "latency_samples": int, summed (mixed: the calls begun in the
//	                     window, ops, and those made late after it)
//	    "msgs_per_sec":  float, published (drain: handled) per second
//	    "mb_per_sec":    float, their payload, 10^6 bytes/s
//	    "p50_ns", "p99_ns", "p999_ns", "max_ns": publish (append) latency;
//	                     mixed: from the scheduled instant
//	    "commits_per_sec", "records_per_commit": float; the records are
//	                     those of the calls: publishes (wal: appends; a
//	                     drain's: its leases and acks; mixed: all three),
//	                     not those the store writes for itself (segment
//	                     preambles, copies forward, sequence reservations)
//	    "ceiling_per_sec":       float, the round's probe ceiling for this
//	                     row's producers and size
//	    "vs_fdatasync":          msgs_per_sec ÷ the round's probe fdatasyncs_per_sec
//	    "vs_ceiling":            msgs_per_sec ÷ ceiling_per_sec
//	    "p99_vs_fdatasync_p99":  p99_ns ÷ the round's probe fdatasync_p99_ns
//	    "p99_vs_large_p99":      p99_ns ÷ the round's probe large_p99_ns
//	                     (these four: publish and sweep rows under sync all or
//	                     publish, wal rows under always; else null)
//	    "vs_wal":        float, publish (sync all) msgs_per_sec ÷ the same
//	                     round's wal row (sync always, new segments) with as
//	                     many appenders and the same size (absent without one)
//	    "drain_msgs_per_sec":   float, sweep: the drain after the window;
//	                     mixed: messages consumed per second of the window
//	                     (those it published, handled while it was open)
//	    "drain_seconds": float, sweep: the drains, summed; omitted
//	    "through_msgs_per_sec": float, sweep: 1 / (1/msgs_per_sec + 1/drain_msgs_per_sec)
//	                     of a round; in a summary row, the median of its rounds'
//	                     values, not the formula on the summary's medians
//	    "service_p99_ns": int, mixed: p99 of the Publish calls alone
//	    "e2e_p50_ns", "e2e_p99_ns", "e2e_p999_ns", "e2e_max_ns": int, mixed:
//	                     scheduled publish instant to handler start
//	    "start_late_ns": int, mixed: how late, on average, the producers began
//	                     the calls they were on schedule for (their last call
//	                     having returned before the instant): the load
//	                     generator's own lateness, which every latency from the
//	                     instant includes; omitted when none
//	    "backlog_max":   float, mixed: the largest backlog sample
//	    "backlog_interval_ns": int, mixed: between two samples; omitted
//	    "backlog":       [int], mixed: Ready + Leased at each sample
//	                     (a summary: the element-wise median over the rounds);
//	                     omitted when none
//	    "notes":         [string], what looked wrong in the store's counters,
//	                     a drain that -limit ended and a sweep's drain that
//	                     -time did, prefixed "round K: " in a summary of
//	                     several rounds; and in a summary, a sweep point
//	                     skipped for its memory in some of the rounds
//	                     ("skipped in 1 of 3 rounds, ..."); omitted when none
//	    "ranges":        {name: [min, max]}, a summary's ratios over the rounds
//	                     (absent with one round)
//	    "per_round":     [row], a summary's rounds, in order (omitted in a
//	                     per-round row)
//	  }]
//	  "reopen": {                                  (reopen, full)
//	    "workload", "messages", "size", "segment_bytes", "round", "rounds",
//	    "interrupted", "notes", "ranges", "per_round": as for a row
//	    "warm":          true when the opens were timed with the store's files
//	                     in the page cache (not on Linux); omitted otherwise
//	    "fill_seconds":  float, the untimed fill, Close included; omitted
//	    "segments", "segment_file_bytes", "index_bytes": int, the store after
//	                     the fill; omitted
//	    "checkpoint_open_ns": int, Open + Queue + first Receive from the checkpoint, cold
//	    "rebuild_open_ns":    int, the same with the index directory removed
//	    "rebuild_vs_checkpoint": float
//	    "heap_before_open_bytes", "heap_inuse_bytes": int, HeapInuse after
//	                     runtime.GC just before the open from the checkpoint and
//	                     with the store just opened (the whole process's heap)
//	    "heap_bytes_per_message": float, heap_inuse_bytes ÷ messages: the
//	                     whole process's heap, walbench's own included, so
//	                     an upper bound on what a pending message costs
//	  }
//	  "recommendation": {                          (profile, sweep, full)
//	    "basis":         "sweep" | "profile"
//	    "publish_only":  true when the profile measured no drain whole (the run
//	                     stopped first): the scores are publish rates, and the
//	                     sync modes its drains tell apart were not compared
//	                     (see "unscored", "not_measured"); omitted otherwise
//	    "sync":          "all" | "publish", Options.Sync to use
//	    "segment_bytes": int, Options.SegmentBytes to use
//	    "max_message_bytes": int, the largest message segments of that size
//	                     hold (broker.Options.MaxMessageBytes), where it is
//	                     below the default policy's 1 MiB: each queue must be
//	                     declared with a PolicyValue.MaxMessageBytes of at most
//	                     this; omitted otherwise
//	    "size":          int, the message size the expectations are for
//	    "producers", "msgs_per_sec", "p99_ns": the fewest producers that
//	                     reached 80% of the best, and their figures
//	    "best_producers", "best_msgs_per_sec", "best_p99_ns": the best's
//	    "drain_msgs_per_sec": float or null
//	    "publish_measured_as": string, the sync mode the publish figures are of
//	    "scores": [{"sync", "segment_bytes", "msgs_per_sec", "points"}], best first
//	    "not_durable_msgs_per_sec": float or null, the best under sync none
//	    "in_memory":     string, "tmpfs" or "ramfs" when the directory keeps its
//	                     files in memory (the figures are then the CPU's, not a
//	                     disk's), "" otherwise
//	    "unscored":      [{"sync", "segment_bytes"}], the durable settings measured
//	                     only in workloads Ctrl-C cut short or sweep points whose
//	                     drain failed: not scored; omitted when none
//	    "not_measured":  [{"sync", "segment_bytes"}], the durable settings the
//	                     sweep was to measure that the run ended before (a
//	                     failure or Ctrl-C; not those the profile's workloads
//	                     scored, where they decided), those the profile's
//	                     drains were to compare that the run ended before
//	                     (basis "profile"), and [{"sync", "segment_bytes",
//	                     "producers", "size", "memory_bytes", "available_bytes"}],
//	                     the points it skipped because their estimated memory
//	                     was above 80% of the memory available then, in every
//	                     round: not compared; omitted when none
//	  }
//	}
//
// Percentiles come from HdrHistograms (github.com/HdrHistogram/hdrhistogram-go)
// with three significant digits: within 0.1% of the value recorded.
package main
