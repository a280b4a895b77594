package gate

import (
	"fmt"
	"strings"
	"testing"
)

// TestEnterRefusesNilContext: every call of pebbleq and boltq starts with
// Enter, so a nil context, bad input, must come back from Enter as an
// error naming it, not as a panic, and must leave the gate unheld.
func TestEnterRefusesNilContext(t *testing.T) {
	var g Gate
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
				t.Errorf("Enter(nil) panicked (%v); want an error naming the nil context", r)
			}
		}()
		//lint:ignore SA1012 a nil context is the bad input under test
		return g.Enter(nil) //nolint:staticcheck
	}()
	if err == nil {
		g.Leave()
		t.Fatal("Enter(nil) = nil; want an error naming the nil context")
	}
	if !strings.Contains(err.Error(), "nil context") {
		t.Errorf("Enter(nil) = %q; want an error naming the nil context", err)
	}
	// Nothing holds the gate: Close does not wait.
	if err := g.Close(func() error { return nil }); err != nil {
		t.Errorf("Close after Enter(nil) = %v", err)
	}
}
