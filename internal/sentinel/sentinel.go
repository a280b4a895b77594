// Package sentinel names the broker error an error wraps, so that tests
// can compare the outcomes of two stores, or of a store and a model, by
// kind rather than by text.
package sentinel

import (
	"errors"

	"github.com/walbroker/walbroker/broker"
)

// all is every sentinel the broker package exports.
var all = []*broker.Error{
	broker.MessageTooLarge, broker.InvalidBatchSize, broker.LeaseExpired,
	broker.UnknownReceipt, broker.QueueMisconfigured, broker.DeadLetterNotFound,
	broker.QueueFull, broker.Closed, broker.Corrupt, broker.Locked,
	broker.InvalidDedupKey,
}

// Of returns "ok" for nil, the reason of the sentinel err wraps, or
// "other: " and err's text when it wraps none.
func Of(err error) string {
	if err == nil {
		return "ok"
	}
	for _, s := range all {
		if errors.Is(err, s) {
			return s.Reason()
		}
	}
	return "other: " + err.Error()
}
