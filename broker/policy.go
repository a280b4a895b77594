package broker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Validate reports every field of p that the rules in [PolicyValue]'s
// comments refuse: each violation is an error that wraps
// [QueueMisconfigured] and names the field and its value, and several are
// joined with errors.Join (errors.Is(err, QueueMisconfigured) holds either
// way). A valid policy returns nil.
//
// The zero values that stand for a default (MaxMessageBytes, DedupWindow,
// Capacity, MaxRetryDelay) and a negative RetryDelay (read as zero) are
// valid.
func (p PolicyValue) Validate() error {
	return p.validate("broker: policy: ")
}

// validate is Validate with each violation's text starting with prefix, so
// that a store refusing a queue's policy can name the queue once, on every
// line, without a second "broker:".
func (p PolicyValue) validate(prefix string) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(prefix+format+": %w", append(args, QueueMisconfigured)...))
	}

	switch {
	case p.VisibilityTimeout <= 0:
		bad("VisibilityTimeout %v must be positive", p.VisibilityTimeout)
	case p.VisibilityTimeout > MaxDeadlineOffset:
		bad("VisibilityTimeout %v exceeds MaxDeadlineOffset %v", p.VisibilityTimeout, MaxDeadlineOffset)
	}

	if p.RetryDelay > MaxDeadlineOffset {
		bad("RetryDelay %v exceeds MaxDeadlineOffset %v", p.RetryDelay, MaxDeadlineOffset)
	}

	switch {
	case p.MaxRetryDelay < 0:
		bad("MaxRetryDelay %v must not be negative (zero keeps RetryDelay constant)", p.MaxRetryDelay)
	case p.MaxRetryDelay > MaxDeadlineOffset:
		bad("MaxRetryDelay %v exceeds MaxDeadlineOffset %v", p.MaxRetryDelay, MaxDeadlineOffset)
	case p.MaxRetryDelay > 0 && p.RetryDelay <= 0:
		bad("MaxRetryDelay %v is a ceiling with no RetryDelay to grow from (RetryDelay %v)", p.MaxRetryDelay, p.RetryDelay)
	case p.MaxRetryDelay > 0 && p.MaxRetryDelay < p.RetryDelay:
		bad("MaxRetryDelay %v is below RetryDelay %v", p.MaxRetryDelay, p.RetryDelay)
	}

	if p.MaxDeliveries <= 0 {
		bad("MaxDeliveries %d must be positive", p.MaxDeliveries)
	}
	if p.MaxMessageBytes < 0 {
		bad("MaxMessageBytes %d must not be negative (zero means %d)", p.MaxMessageBytes, DefaultMaxMessageBytes)
	}
	if p.Capacity < 0 {
		bad("Capacity %d must not be negative (zero means unbounded)", p.Capacity)
	}

	switch {
	case p.DedupWindow < 0:
		bad("DedupWindow %v must not be negative (zero means %v)", p.DedupWindow, DefaultDedupWindow)
	case p.DedupWindow > MaxDeadlineOffset:
		bad("DedupWindow %v exceeds MaxDeadlineOffset %v", p.DedupWindow, MaxDeadlineOffset)
	}

	return errors.Join(errs...)
}

// maxMessageBytes returns the payload bound in force: MaxMessageBytes, or
// DefaultMaxMessageBytes when it is not positive.
func (p PolicyValue) maxMessageBytes() int {
	if p.MaxMessageBytes > 0 {
		return p.MaxMessageBytes
	}
	return DefaultMaxMessageBytes
}

// dedupWindow returns the dedup window in force: DedupWindow, or
// DefaultDedupWindow when it is not positive.
func (p PolicyValue) dedupWindow() time.Duration {
	if p.DedupWindow > 0 {
		return p.DedupWindow
	}
	return DefaultDedupWindow
}

// retryDelay returns how long a message nacked on its failedDelivery-th
// delivery stays invisible: RetryDelay (negative read as zero), doubled for
// each delivery after the first and held at MaxRetryDelay when that is
// positive; RetryDelay unchanged when it is not. A failedDelivery below 1 is
// read as 1. The doubling never overflows: it saturates at the ceiling.
func (p PolicyValue) retryDelay(failedDelivery int) time.Duration {
	base := max(p.RetryDelay, 0)
	ceiling := p.MaxRetryDelay
	if ceiling <= 0 {
		return base
	}
	if base == 0 {
		return 0
	}
	shift := max(failedDelivery, 1) - 1
	// base << shift <= ceiling exactly when base <= ceiling >> shift, and
	// ceiling >> 63 is 0 for a positive ceiling, so no shift overflows.
	if shift >= 63 || base > ceiling>>shift {
		return ceiling
	}
	return base << shift
}

// maxDeliveriesCounted is the most deliveries a store counts for one
// message: the log and the index keep a message's count in 32 bits.
const maxDeliveriesCounted = math.MaxUint32

// deliveriesCounted refuses a MaxDeliveries above maxDeliveriesCounted,
// which Validate accepts (the seed bounds it only below). Under such a
// policy a message delivered that many times would count its next
// delivery as 0, and every one after from 1 again: a count that goes
// backwards, and a message that never reaches the maximum. Both brokers
// of this package refuse it, so that a program tested against a Memory
// meets the store's refusal.
func deliveriesCounted(p PolicyValue) error {
	if int64(p.MaxDeliveries) > maxDeliveriesCounted {
		return fmt.Errorf("MaxDeliveries %d exceeds the most deliveries a store counts for one message (%d): %w",
			p.MaxDeliveries, int64(maxDeliveriesCounted), QueueMisconfigured)
	}
	return nil
}
