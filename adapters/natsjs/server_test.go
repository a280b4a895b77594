package natsjs_test

import (
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// testMaxPayload is the embedded servers' max_payload: large enough for
// the port's default MaxMessageBytes (1 MiB) plus headers.
const testMaxPayload = 4 << 20

// storeDir returns a directory for a server's JetStream files: on tmpfs
// when there is one (the tests check logic, not the disk), else under
// t.TempDir.
func storeDir(t testing.TB) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "natsjs-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// runServer starts an embedded server on 127.0.0.1 at a random port with
// JetStream and file storage in dir, and shuts it down at cleanup. mods
// adjust the options before the start.
func runServer(t testing.TB, dir string, mods ...func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName: "natsjs-test",
		Host:       "127.0.0.1",
		Port:       -1,
		NoLog:      true,
		NoSigs:     true,
		JetStream:  true,
		StoreDir:   dir,
		MaxPayload: testMaxPayload,
	}
	for _, m := range mods {
		m(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatalf("nats server did not start")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// connect connects to urls and closes the connection at cleanup.
func connect(t testing.TB, urls string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", urls, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
