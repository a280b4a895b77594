package natsjs

import (
	"net"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// A WriteGate holds, once armed, the first write of its connections that
// contains a given text, until released: a request stopped on its way to
// the server, for as long as a test needs.
type WriteGate struct {
	mu      sync.Mutex
	match   string
	fired   bool
	held    chan struct{}
	release chan struct{}
}

// NewWriteGate returns a gate that holds nothing until armed.
func NewWriteGate() *WriteGate {
	return &WriteGate{held: make(chan struct{}), release: make(chan struct{})}
}

// Arm makes g hold the next write that contains match.
func (g *WriteGate) Arm(match string) { g.mu.Lock(); g.match = match; g.mu.Unlock() }

// Held is closed once g holds a write.
func (g *WriteGate) Held() <-chan struct{} { return g.held }

// Release lets the held write, and every later one, through.
func (g *WriteGate) Release() { close(g.release) }

// Dialer dials connections whose writes pass g.
func (g *WriteGate) Dialer() nats.CustomDialer { return gatedDialer{g} }

func (g *WriteGate) check(b []byte) {
	g.mu.Lock()
	hit := g.match != "" && !g.fired && strings.Contains(string(b), g.match)
	if hit {
		g.fired = true
	}
	g.mu.Unlock()
	if hit {
		close(g.held)
		<-g.release
	}
}

type gatedDialer struct{ g *WriteGate }

func (d gatedDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return gatedConn{c, d.g}, nil
}

type gatedConn struct {
	net.Conn
	g *WriteGate
}

func (c gatedConn) Write(b []byte) (int, error) {
	c.g.check(b)
	return c.Conn.Write(b)
}
