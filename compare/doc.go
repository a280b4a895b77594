// Package compare measures walbroker against two durable queues built on
// general-purpose embedded stores, Pebble (package pebbleq) and bbolt
// (package boltq), on the same disk and with the same workloads, so that
// the claim that walbroker is the faster durable queue is checked rather
// than assumed. It is a Go module of its own so that walbroker's module
// does not depend on either store.
//
// The two queues are as small as a queue can be while keeping the promise
// walbroker keeps under broker.SyncAll: every call that returns nil has
// reached the device. Each uses its store's own group commit and nothing
// of its own. They implement [Queue], the little the benchmark needs:
// publish one message or a batch, lease up to max of the oldest, and
// acknowledge what was leased. They are not brokers: no nack, no dead
// letters, no dedup keys, and an acknowledgement names a message, not a
// lease (see [ErrNotLeased]).
//
// BenchmarkQueues runs walbroker (broker.Open with broker.SyncAll), pebbleq
// and boltq side by side, each workload on each implementation in turn, in
// the test's temporary directory; every row reports msgs/s. From this
// directory:
//
//	go test ./...                                             # the queues' tests
//	go test -run '^$' -bench Queues -benchtime 3s -count 3    # the comparison
//
// With -count, Go repeats each sub-benchmark back to back; to repeat the
// whole comparison instead, so that the implementations of one workload
// stay neighbours in time in every round, build the test binary once and
// run it several times:
//
//	go test -c -o /tmp/compare.test
//	for i in 0 1 2; do COMPARE_ROUND=$i /tmp/compare.test -test.run '^$' -test.bench Queues -test.benchtime 3s; done
//
// COMPARE_ROUND (0 when unset) rotates the order in which each workload
// runs its implementations: round r starts with the r-th (counting from 0,
// modulo the workload's three to five), so that over as many rounds as a
// workload has implementations each runs first once. An implementation
// that always ran first would always meet the disk as the previous
// workload left it.
//
// BENCH.md at the repository root records a run and reads it.
package compare
