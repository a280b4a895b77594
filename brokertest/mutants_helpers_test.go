package brokertest

// Steps that the in-process demonstrations of the mutants in
// mutants_test.go, promise_audit_mutants_test.go and
// promise_port_mutants_test.go share.

import (
	"context"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/broker"
)

// publishAndReceive publishes a message of each payload on q, in order,
// and receives them in one Receive, failing t unless every publish
// succeeds and the Receive returns as many deliveries as were published.
func publishAndReceive(t *testing.T, q broker.Broker, payloads ...string) []broker.DeliveryValue {
	t.Helper()
	ctx := context.Background()
	for _, p := range payloads {
		if _, err := q.Publish(ctx, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := q.Receive(ctx, len(payloads))
	if err != nil || len(ds) != len(payloads) {
		t.Fatalf("Receive: %v %v", ds, err)
	}
	return ds
}

// requirePanics fails t unless call panics: the demonstration that a
// mutant which panics does so (what names the call, for the failure).
func requirePanics(t *testing.T, what string, call func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("harness: %s did not panic; it is not broken", what)
		}
	}()
	call()
}

// requireSuiteWentOn fails t unless the run of the suite against mutant
// that a panic interrupted (passed cases, output out) checked the rest of
// its cases after it (at least 100 passed) and says that a call panicked,
// with the panic's value, panicked. where names the panic for the failure.
func requireSuiteWentOn(t *testing.T, mutant, where, panicked string, passed int, out []byte) {
	t.Helper()
	if passed < 100 {
		t.Errorf("after %s panicked, the suite passed only %d cases: it stopped instead of checking the rest\n%s", where, passed, out)
	}
	if !strings.Contains(string(out), "mutant-"+mutant+": a call panicked: "+panicked) {
		t.Errorf("the suite's failure does not say that a call panicked, with the panic:\n%s", out)
	}
}
