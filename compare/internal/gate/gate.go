// Package gate keeps a store from being closed under the calls that use
// it: every call holds the gate shared while it runs, Close holds it
// exclusively.
package gate

import (
	"context"
	"errors"
	"sync"

	"github.com/walbroker/walbroker/compare"
)

// Gate is the zero value ready to use. mu is held shared by every call for
// as long as it uses the store, and exclusively by Close; it guards closed.
type Gate struct {
	mu     sync.RWMutex
	closed bool
}

// errNilContext is what Enter returns for a nil ctx: bad input, which a
// call refuses with an error rather than a panic, as walbroker does.
var errNilContext = errors.New("nil context")

// Enter checks ctx (nil is an error naming it, an ended one is its
// ctx.Err()) and that the gate is open, and holds it shared. When it
// returns nil the caller must call Leave once done with the store.
func (g *Gate) Enter(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return compare.ErrClosed
	}
	return nil
}

// Leave ends a call that Enter let in.
func (g *Gate) Leave() { g.mu.RUnlock() }

// Close waits for the calls in flight, shuts the gate, and runs closeStore
// with no call in flight. A second Close returns compare.ErrClosed and
// runs nothing.
func (g *Gate) Close(closeStore func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return compare.ErrClosed
	}
	g.closed = true
	return closeStore()
}
