package broker

import "reflect"

// maxChainErrors is the most errors the broker looks at in one error's
// tree: the error, what its Unwrap returns, and so on, each error of an
// Unwrap() []error counting as one. A real chain holds a handful. A tree
// that holds more is taken as one that does not end: an Unwrap that
// returns its own error, or any cycle of errors, which would hang
// errors.Is and errors.As, and the caller's goroutine with them. A
// cause's methods are the caller's code, and a caller's buggy error type
// is input like any other: it gets an answer, not a hang.
const maxChainErrors = 10_000

// walkChain calls visit on each error of err's tree, in the order
// errors.Is and errors.As look (err, then what its Unwrap returns, depth
// first through each error of an Unwrap() []error; a nil error is
// skipped), until visit reports true. found reports that it did. endless
// reports that the walk stopped because the tree holds more than
// maxChainErrors errors (see chainEnds); visit has then been called on
// maxChainErrors of them. The methods it calls (Unwrap, and those visit
// calls) are the error's own: a panic in one is the caller's to recover.
func walkChain(err error, visit func(error) bool) (found, endless bool) {
	// A stack rather than recursion: a deep tree of Unwrap() []error
	// costs a slice, not a goroutine stack.
	stack := []error{err}
	for seen := 0; len(stack) > 0; {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e == nil {
			continue
		}
		if seen++; seen > maxChainErrors {
			return false, true
		}
		if visit(e) {
			return true, false
		}
		switch x := e.(type) {
		case interface{ Unwrap() error }:
			stack = append(stack, x.Unwrap())
		case interface{ Unwrap() []error }:
			inner := x.Unwrap()
			if seen+len(stack)+len(inner) > maxChainErrors {
				return false, true
			}
			for i := len(inner) - 1; i >= 0; i-- {
				stack = append(stack, inner[i])
			}
		}
	}
	return false, false
}

// chainEnds reports whether err's tree holds at most maxChainErrors
// errors. One that does not is taken as a tree that does not end, and the
// broker treats such an error as carrying nothing: no reason, no code, no
// public text, no DoNotRetry mark, and it is no sentinel (see causeIs).
// Deciding on the whole tree, rather than on what a look for one part
// found before it gave up, makes the answer the same whatever is looked
// for: a cycle that holds a reason but no code is not half classified.
func chainEnds(err error) bool {
	_, endless := walkChain(err, func(error) bool { return false })
	return !endless
}

// causeIs is errors.Is for an error that is not the broker's own (a
// handler's error, or one returned by a Broker of the caller's): it
// reports whether target is in err's tree, as errors.Is would, but false
// for a tree that does not end (see chainEnds) and for one whose Unwrap or
// Is method panics, rather than hanging or panicking on the caller's
// goroutine.
func causeIs(err, target error) (is bool) {
	if err == nil || target == nil {
		return err == target
	}
	defer func() {
		if r := recover(); r != nil {
			is = false
		}
	}()
	if !chainEnds(err) {
		return false
	}
	comparable := reflect.TypeOf(target).Comparable()
	is, _ = walkChain(err, func(e error) bool {
		if comparable && e == target {
			return true
		}
		x, ok := e.(interface{ Is(error) bool })
		return ok && x.Is(target)
	})
	return is
}
