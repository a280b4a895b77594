package boltq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/compare"
	bolt "go.etcd.io/bbolt"
)

// Package compare promises of each queue: "Each uses its store's own group
// commit and nothing of its own." bbolt's group commit is db.Batch, which
// gathers concurrent calls into one write transaction (two fdatasyncs,
// one after the other). Concurrent Receives, and then concurrent Acks,
// must share transactions as concurrent Publishes do, or each consumer
// waits for every other's fdatasyncs in turn. The test counts bbolt write
// transactions (the meta page's txid) over 16 concurrent Receive calls,
// then 16 concurrent Acks, with the benchmark's MaxBatchDelay (bbolt's
// default).
func TestConcurrentReceivesAndAcksShareBboltsGroupCommit(t *testing.T) {
	const consumers, per = 16, 64
	q, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	payloads := make([][]byte, consumers*per)
	for i := range payloads {
		payloads[i] = []byte("m")
	}
	if _, err := q.PublishBatch(ctx, payloads); err != nil {
		t.Fatal(err)
	}
	txid := func() uint64 {
		var id int
		if err := q.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }); err != nil {
			t.Fatal(err)
		}
		return uint64(id)
	}
	held := make([][]uint64, consumers)
	together := func(what string, call func(i int) error) {
		t.Helper()
		before := txid()
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, consumers)
		for i := range consumers {
			wg.Go(func() {
				<-start
				if err := call(i); err != nil {
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: %v", what, err)
		}
		if commits := txid() - before; commits > consumers/2 {
			t.Errorf("%d concurrent %s calls made %d bbolt write transactions (each two fdatasyncs, one after the other): they share no commit, though db.Batch would let them", consumers, what, commits)
		}
	}
	together("Receive", func(i int) error {
		msgs, err := q.Receive(ctx, per)
		for _, m := range msgs {
			held[i] = append(held[i], m.ID)
		}
		return err
	})
	together("Ack", func(i int) error { return q.Ack(ctx, held[i]) })
	if msgs, err := q.Receive(ctx, 1); err != nil || len(msgs) != 0 {
		t.Errorf("Receive after every message was acknowledged = %v, %v; want nothing", msgs, err)
	}
}

// db.Batch may run a call's function again when another function of its
// batch fails (package documentation): Receive and Ack must be safe to
// rerun. Each round puts 4 Receives, then 4 Acks, into a batch (MaxBatchSize
// 5) with a function that fails once when it runs after a Receive's or an
// Ack's, which then runs twice; it joins the batch a moment after them, but
// where it lands is up to the scheduler, so the rounds go on until both
// kinds were rerun.
// Every message must still come back once, to one Receive, with its
// payload, and the Acks must leave nothing behind, before and after a
// reopen.
func TestReceiveAndAckAreSafeToRerunInABatch(t *testing.T) {
	const receivers, per, minRounds, maxRounds = 4, 2, 20, 1000
	dir := t.TempDir()
	q, err := Open(dir, Options{MaxBatchDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	q.db.MaxBatchSize = receivers + 1
	ctx := context.Background()
	// inBatch runs call(i) for each receiver and, in the same batch, a
	// function that fails once if it runs after another function (ran
	// says so from the transaction), and reports whether it failed.
	inBatch := func(round int, call func(i int) error, ran func(tx *bolt.Tx) bool) (reran bool) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, receivers+1)
		for i := range receivers {
			wg.Go(func() {
				if err := call(i); err != nil {
					errs <- err
				}
			})
		}
		// Give the calls time to join the batch first: the failing
		// function reruns the others only when it runs after them, and
		// the batch runs them in the order they joined. (Late calls only
		// make a round that reruns nothing; the rounds go on.)
		time.Sleep(5 * time.Millisecond)
		failed := false
		wg.Go(func() {
			err := q.db.Batch(func(tx *bolt.Tx) error {
				if failed || !ran(tx) {
					return nil
				}
				failed, reran = true, true
				return errors.New("failing once")
			})
			if err != nil {
				errs <- err
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		return reran
	}
	keys := func(tx *bolt.Tx, bucket []byte) int {
		n := 0
		c := tx.Bucket(bucket).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		return n
	}
	receivesRerun, acksRerun := 0, 0
	for round := 0; round < minRounds || (round < maxRounds && (receivesRerun == 0 || acksRerun == 0)); round++ {
		payloads := make([][]byte, receivers*per)
		for i := range payloads {
			payloads[i] = []byte(fmt.Sprintf("round %d message %d", round, i))
		}
		ids, err := q.PublishBatch(ctx, payloads)
		if err != nil {
			t.Fatal(err)
		}
		want := make(map[uint64]string)
		for i, id := range ids {
			want[id] = string(payloads[i])
		}
		got := make([][]compare.Message, receivers)
		if inBatch(round, func(i int) error {
			var err error
			got[i], err = q.Receive(ctx, per)
			return err
		}, func(tx *bolt.Tx) bool { return keys(tx, leasesBucket) > 0 }) {
			receivesRerun++
		}
		held := make([][]uint64, receivers)
		for i, msgs := range got {
			if len(msgs) != per {
				t.Fatalf("round %d: Receive %d returned %d messages, want %d: %v", round, i, len(msgs), per, msgs)
			}
			for _, m := range msgs {
				if w, ok := want[m.ID]; !ok || w != string(m.Payload) {
					t.Fatalf("round %d: Receive %d returned message %d %q, which is not one of this round's or was returned twice", round, i, m.ID, m.Payload)
				}
				delete(want, m.ID)
				held[i] = append(held[i], m.ID)
			}
		}
		if inBatch(round, func(i int) error { return q.Ack(ctx, held[i]) },
			func(tx *bolt.Tx) bool { return keys(tx, messagesBucket) < receivers*per }) {
			acksRerun++
		}
	}
	if receivesRerun == 0 || acksRerun == 0 {
		t.Fatalf("of %d rounds, %d reran a Receive's function and %d an Ack's: the test did not test both", maxRounds, receivesRerun, acksRerun)
	}
	check := func(when string) {
		if msgs, err := q.Receive(ctx, 1); err != nil || len(msgs) != 0 {
			t.Errorf("Receive %s every message was acknowledged = %v, %v; want nothing", when, msgs, err)
		}
		err := q.db.View(func(tx *bolt.Tx) error {
			if n, m := keys(tx, messagesBucket), keys(tx, leasesBucket); n != 0 || m != 0 {
				t.Errorf("%s every message was acknowledged the file holds %d messages and %d leases", when, n, m)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check("once")
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if q, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	check("after a reopen, once")
}
