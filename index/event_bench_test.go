package index

import "testing"

// BenchmarkDecode decodes the records a replay reads most, one kind each.
func BenchmarkDecode(b *testing.B) {
	events := []Event{
		{Kind: KindPublish, Queue: 1, Seq: 123456, Time: 1_700_000_000_000_000_000, Key: "key-1", Payload: make([]byte, 100)},
		{Kind: KindLease, Queue: 1, Seq: 123456, Deliveries: 1, Time: 1_700_000_030_000_000_000, Nonce: 0x1234567890abcdef},
		{Kind: KindAck, Queue: 1, Seq: 123456},
		{Kind: KindDeadLetter, Queue: 1, Seq: 123456, Deliveries: 5, Time: 1_700_000_060_000_000_000, Code: 3, Reason: "LEASE_EXPIRED", Cause: "c"},
	}
	for _, e := range events {
		rec := e.Append(nil)
		b.Run(e.Kind.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
