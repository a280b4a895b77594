package natsjs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/brokertest"
)

// caps is what the adapter declares to the conformance suite, and its
// column of the README's capability table. Every optional interface is
// implemented; timings run on real time, the server's timers for lapses
// and retry delays (no Clock, so no ExactExpiry); redeliveries come before new messages (no OldestFirst);
// racing replays of one dead letter race for one claim (ReplayOnce).
var caps = brokertest.Capabilities{
	LeaseExtender:     true,
	Rejecter:          true,
	DeadLetterReader:  true,
	DeadLetterManager: true,
	Waker:             true,
	Keyed:             true,
	Batch:             true,
	Capacity:          true,
	Clock:             false,
	ExactExpiry:       false,
	OldestFirst:       false,
	ReplayOnce:        true,
	Tolerance:         time.Second,
	Closer:            true,
}

// factory opens every backend as a Store of its own (a fresh prefix, so an
// empty one) on the package's shared embedded server.
var factory = brokertest.Factory{
	Name: "natsjs",
	Caps: caps,
	Open: func(t *testing.T, now func() time.Time) brokertest.Backend {
		if now != nil {
			t.Fatalf("natsjs runs on the server's clock; the suite handed it one")
		}
		return openBackend(t)
	},
}

// backend is a Store seen as a brokertest.Backend, with its connection
// and prefix.
type backend struct {
	*natsjs.Store
	nc     *nats.Conn
	prefix string
}

func (b backend) Queue(name string, p broker.PolicyValue) (broker.Broker, error) {
	q, err := b.Store.Queue(name, p)
	if err != nil {
		return nil, err
	}
	return q, nil
}

var (
	sharedOnce sync.Once
	shared     *server.Server
	sharedErr  error
	sharedDir  string
	prefixes   atomic.Int64
)

// TestMain shuts the shared server down after the package's tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Shutdown()
		shared.WaitForShutdown()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// sharedServer starts, once, the embedded server the conformance suite
// and the focused tests share: 127.0.0.1, a random port, JetStream with
// file storage in a temporary directory.
func sharedServer(t testing.TB) *server.Server {
	t.Helper()
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp(tmpRoot(), "natsjs-shared-")
		if err != nil {
			sharedErr = err
			return
		}
		sharedDir = dir
		// nats-server removes an account's streams directory, when it is
		// empty, in a goroutine of its own after it deletes a stream: a
		// stream created meanwhile (the next case's) fails with "error
		// creating store for stream" (err_code 10049), its MkdirAll having
		// met the removal. A file in the directory keeps it from ever
		// being empty; nothing reads it while the server runs.
		streams := filepath.Join(dir, server.JetStreamStoreDir, server.DEFAULT_GLOBAL_ACCOUNT, "streams")
		if err := os.MkdirAll(streams, 0o750); err != nil {
			sharedErr = err
			return
		}
		if err := os.WriteFile(filepath.Join(streams, ".not-empty"), nil, 0o600); err != nil {
			sharedErr = err
			return
		}
		opts := &server.Options{
			ServerName: "natsjs-shared",
			Host:       "127.0.0.1",
			Port:       -1,
			NoLog:      true,
			NoSigs:     true,
			JetStream:  true,
			StoreDir:   dir,
			MaxPayload: testMaxPayload,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			sharedErr = err
			return
		}
		s.SetLogger(stderrWarnings{}, false, false)
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			sharedErr = fmt.Errorf("the shared nats server did not start")
			return
		}
		shared = s
	})
	if sharedErr != nil {
		t.Fatalf("shared nats server: %v", sharedErr)
	}
	return shared
}

// stderrWarnings logs the shared server's warnings and errors to stderr,
// which go test shows only for a package that failed: the server answers
// some failures (a stream's store it could not create, say) with a fixed
// text and logs the cause.
type stderrWarnings struct{}

func (stderrWarnings) Noticef(string, ...any) {}
func (stderrWarnings) Debugf(string, ...any)  {}
func (stderrWarnings) Tracef(string, ...any)  {}
func (stderrWarnings) Warnf(format string, v ...any) {
	fmt.Fprintf(os.Stderr, "nats-server (shared) warning: "+format+"\n", v...)
}
func (stderrWarnings) Errorf(format string, v ...any) {
	fmt.Fprintf(os.Stderr, "nats-server (shared) error: "+format+"\n", v...)
}
func (stderrWarnings) Fatalf(format string, v ...any) {
	fmt.Fprintf(os.Stderr, "nats-server (shared) fatal: "+format+"\n", v...)
}

// tmpRoot is /dev/shm when there is one, else the default temporary
// directory.
func tmpRoot() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return ""
}

// openBackend opens a Store with a prefix of its own on the shared server;
// cleanup closes it and deletes its streams.
func openBackend(t testing.TB) backend {
	t.Helper()
	nc := connect(t, sharedServer(t).ClientURL())
	prefix := fmt.Sprintf("T%d", prefixes.Add(1))
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: prefix})
	if err != nil {
		t.Fatalf("natsjs.Open: %v", err)
	}
	t.Cleanup(func() {
		st.Close()
		deleteStreams(t, nc, prefix)
	})
	return backend{st, nc, prefix}
}

// stream returns the backend's JetStream stream named its prefix, then
// suffix ("_Q_jobs": the work stream of queue jobs).
func (b backend) stream(t testing.TB, suffix string) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), b.prefix+suffix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// awaitDeath waits until the server has recorded a death in the deaths
// stream of queue name, and returns that stream.
func (b backend) awaitDeath(t *testing.T, name string) jetstream.Stream {
	t.Helper()
	deaths := b.stream(t, "_A_"+name)
	until(t, 20*time.Second, "the server records the death", func() bool {
		info, err := deaths.Info(context.Background())
		return err == nil && info.State.Msgs > 0
	})
	return deaths
}

// deleteStreams deletes every stream whose name starts with prefix_.
func deleteStreams(t testing.TB, nc *nats.Conn, prefix string) {
	js, err := jetstream.New(nc)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	var doomed []string
	for name := range names.Name() {
		if len(name) > len(prefix) && name[:len(prefix)+1] == prefix+"_" {
			doomed = append(doomed, name)
		}
	}
	for _, name := range doomed {
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Errorf("cleanup: delete stream %s: %v", name, err)
		}
	}
}

// TestConformance runs walbroker's conformance suite against the adapter
// on one embedded server.
func TestConformance(t *testing.T) {
	brokertest.Run(t, factory)
}

// TestReadmeCapabilities checks the natsjs column of the README's
// capability table against the declaration.
func TestReadmeCapabilities(t *testing.T) {
	brokertest.CheckReadme(t, "../../README.md", factory)
}
