// Package methodset compares a type's exported methods with the cases a
// test wrote for them, so that a method added later without its case fails
// the test meant to cover every method (the nil-receiver tests of segment,
// wal, index and the NATS adapter).
package methodset

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
)

// Check returns nil when the exported methods of typ are exactly the keys
// of calls and zeros together, and otherwise an error naming the methods
// no case covers and the cases that name no method.
func Check[C, Z any](typ reflect.Type, calls map[string]C, zeros map[string]Z) error {
	methods := map[string]bool{}
	for i := range typ.NumMethod() {
		methods[typ.Method(i).Name] = true
	}
	cases := map[string]bool{}
	for name := range calls {
		cases[name] = true
	}
	for name := range zeros {
		cases[name] = true
	}
	var missing, extra []string
	for name := range methods {
		if !cases[name] {
			missing = append(missing, name)
		}
	}
	for name := range cases {
		if !methods[name] {
			extra = append(extra, name)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return nil
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return fmt.Errorf("%v: methods without a case %v, cases without a method %v (methods: %v)",
		typ, missing, extra, slices.Sorted(maps.Keys(methods)))
}
