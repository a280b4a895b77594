package natsjs_test

// The 3-node test: a cluster of embedded servers on loopback ports, the
// queue's streams and consumer replicated 3 times, a workload of
// producers and consumers, and one server shut down in the middle of it.
// Every publish that returned nil must be consumed (or still be in the
// queue) at the end.
//
// Environment:
//
//	WALBROKER_NATS_SEED          replay a run (the seed is logged)
//	WALBROKER_NATS_CLUSTER_MSGS  publishes attempted (default 2000, 200 with -short)

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

func clusterMessages(t *testing.T) int {
	t.Helper()
	n := 2000
	if testing.Short() {
		n = 200
	}
	if v := os.Getenv("WALBROKER_NATS_CLUSTER_MSGS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("WALBROKER_NATS_CLUSTER_MSGS=%q: want a positive count", v)
		}
	}
	return n
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// startCluster starts three JetStream servers routed to each other on
// loopback, each with file storage of its own.
func startCluster(t *testing.T) []*server.Server {
	t.Helper()
	routePorts := freePorts(t, 3)
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	servers := make([]*server.Server, 3)
	for i := range servers {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       -1,
			NoLog:      true,
			NoSigs:     true,
			JetStream:  true,
			StoreDir:   storeDir(t),
			MaxPayload: testMaxPayload,
			Cluster:    server.ClusterOpts{Name: "walbroker", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		go s.Start()
		servers[i] = s
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
	}
	for i, s := range servers {
		if !s.ReadyForConnections(20 * time.Second) {
			t.Fatalf("server %d did not start", i)
		}
	}
	return servers
}

// clusterQueue opens a Store of Replicas 3 on nc and its queue name,
// retrying while the cluster's meta group elects a leader after the routes
// form; the Store is closed at cleanup.
func clusterQueue(t *testing.T, nc *nats.Conn, name string, p broker.PolicyValue) *natsjs.Queue {
	t.Helper()
	var st *natsjs.Store
	var q *natsjs.Queue
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		if st == nil {
			st, err = natsjs.Open(nc, natsjs.Options{Replicas: 3, Timeout: 2 * time.Second})
		}
		if err == nil {
			q, err = st.Queue(name, p)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not serve JetStream within 60 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { st.Close() })
	return q
}

// TestClusterSurvivesLosingANode publishes and consumes on a queue of
// Replicas 3 while one of the three servers is shut down, and requires
// every acknowledged publish to be consumed.
func TestClusterSurvivesLosingANode(t *testing.T) {
	rng := rand.New(rand.NewPCG(natsjs.Seed(t), 7))
	total := clusterMessages(t)
	servers := startCluster(t)
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	nc := connect(t, strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.DontRandomize())
	q := clusterQueue(t, nc, "orders", broker.PolicyValue{VisibilityTimeout: 3 * time.Second, MaxDeliveries: 1000})

	// Half the seeds shut down the leader of the queue's work stream (the
	// harder case: the stream elects a new one mid-workload), half a
	// server chosen at random.
	victim, why := rng.IntN(len(servers)), "chosen at random"
	if rng.IntN(2) == 0 {
		for i, s := range servers {
			if s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, "WALBROKER_Q_orders") {
				victim, why = i, "the work stream's leader"
			}
		}
	}
	killAt := int64(total/4 + rng.IntN(total/2+1))
	t.Logf("%d publishes; server n%d (%s) is shut down after %d acknowledged publishes", total, victim, why, killAt)

	var (
		mu       sync.Mutex
		acked    = map[string]bool{} // payloads whose publish returned nil
		consumed = map[string]bool{} // payloads received at least once
		attempts atomic.Int64
		nacked   atomic.Int64 // publishes that returned an error
		killed   = make(chan struct{})
		killOnce sync.Once
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var producers sync.WaitGroup
	for p := range 4 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for {
				i := attempts.Add(1)
				if i > int64(total) {
					return
				}
				payload := fmt.Sprintf("m-%d-%d", p, i)
				pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := q.Publish(pctx, []byte(payload))
				pcancel()
				if err != nil {
					nacked.Add(1)
					continue
				}
				mu.Lock()
				acked[payload] = true
				n := int64(len(acked))
				mu.Unlock()
				if n >= killAt {
					killOnce.Do(func() {
						servers[victim].Shutdown()
						close(killed)
					})
				}
			}
		}()
	}

	consume := func() {
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		defer rcancel()
		ds, err := q.Receive(rctx, 32)
		if err != nil {
			time.Sleep(20 * time.Millisecond) // the cluster is electing: ask again soon
			return
		}
		for _, d := range ds {
			mu.Lock()
			consumed[string(d.Message.Payload)] = true
			mu.Unlock()
			// A failed Ack only means a redelivery later.
			_ = q.Ack(rctx, d.Lease.Receipt)
		}
		if len(ds) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	stop := make(chan struct{})
	var consumers sync.WaitGroup
	for range 2 {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				consume()
			}
		}()
	}

	producers.Wait()
	select {
	case <-killed:
	default:
		t.Fatalf("the workload ended before the kill: %d acknowledged of %d, kill at %d", len(acked), total, killAt)
	}
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for p := range acked {
			if !consumed[p] {
				out = append(out, p)
			}
		}
		return out
	}
	drain := time.Now().Add(90 * time.Second)
	for len(missing()) > 0 && time.Now().Before(drain) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	consumers.Wait()
	mu.Lock()
	t.Logf("acknowledged %d, refused %d, consumed %d distinct", len(acked), nacked.Load(), len(consumed))
	mu.Unlock()
	if m := missing(); len(m) > 0 {
		// Not consumed in time: it must at least still be in the queue.
		left := 0
		for {
			ds, err := q.Receive(context.Background(), 256)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Logf("receive while counting what is left: %v", err)
			}
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				mu.Lock()
				consumed[string(d.Message.Payload)] = true
				mu.Unlock()
				left++
			}
		}
		if m := missing(); len(m) > 0 {
			if len(m) > 10 {
				m = m[:10]
			}
			t.Fatalf("%d acknowledged publishes were lost (first: %v); %d more were found in the queue after the drain", len(missing()), m, left)
		}
	}
}

// TestRacingPublishesOfOneKeyOnAReplicatedQueueEnqueueOnce: on a stream of
// Replicas 3 the server refuses a compare-and-set on a key's record that
// another publish of the subject is still proposing with another code than
// a single server (10164, not 10071). Racing publishes of one key must
// still all answer one message, exactly one of them with its payload.
func TestRacingPublishesOfOneKeyOnAReplicatedQueueEnqueueOnce(t *testing.T) {
	const racers = 16
	servers := startCluster(t)
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	q := clusterQueue(t, connect(t, strings.Join(urls, ",")), "keyed", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	for round := range 3 {
		raceKeyed(t, round, "order-"+itoa(round), slices.Repeat([]*natsjs.Queue{q}, racers))
	}
	receiveN(t, q, 3)
}
