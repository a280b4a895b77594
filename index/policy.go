package index

import "encoding/binary"

// Policy is a queue's policy as the log records it: durations in
// nanoseconds. The broker validates it; the index only keeps it.
type Policy struct {
	VisibilityTimeout int64
	RetryDelay        int64
	MaxRetryDelay     int64
	MaxDeliveries     int64
	MaxMessageBytes   int64
	Capacity          int64
	DedupWindow       int64
}

func (p Policy) append(dst []byte) []byte {
	for _, v := range [...]int64{p.VisibilityTimeout, p.RetryDelay, p.MaxRetryDelay, p.MaxDeliveries, p.MaxMessageBytes, p.Capacity, p.DedupWindow} {
		dst = binary.AppendVarint(dst, v)
	}
	return dst
}

func (d *decoder) policy() Policy {
	return Policy{
		VisibilityTimeout: d.varint("visibilityTimeout"),
		RetryDelay:        d.varint("retryDelay"),
		MaxRetryDelay:     d.varint("maxRetryDelay"),
		MaxDeliveries:     d.varint("maxDeliveries"),
		MaxMessageBytes:   d.varint("maxMessageBytes"),
		Capacity:          d.varint("capacity"),
		DedupWindow:       d.varint("dedupWindow"),
	}
}
