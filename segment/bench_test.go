package segment_test

import (
	"testing"

	"github.com/walbroker/walbroker/segment"
)

var benchSizes = []struct {
	name string
	n    int
}{
	{"128B", 128},
	{"1KiB", 1 << 10},
	{"64KiB", 64 << 10},
}

func benchBody(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

func BenchmarkAppendFrame(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			body := benchBody(sz.n)
			dst := make([]byte, 0, segment.Size(sz.n))
			b.SetBytes(int64(sz.n))
			b.ReportAllocs()
			for b.Loop() {
				dst = segment.AppendFrame(dst[:0], 1, 0, segment.KindRecord, segment.Full, body)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			data := segment.AppendFrame(nil, 1, 0, segment.KindRecord, segment.Full, benchBody(sz.n))
			b.SetBytes(int64(sz.n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := segment.Decode(data, 0, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScan scans a 4 MiB segment whose first half holds records and
// whose second half is zero-filled space.
func BenchmarkScan(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			const size = 4 << 20
			h := segment.EncodeHeader(1)
			data := h[:]
			body := benchBody(sz.n)
			for len(data)+segment.Size(sz.n) <= size/2 {
				data = segment.AppendFrame(data, 1, uint32(len(data)), segment.KindRecord, segment.Full, body)
			}
			data = append(data, make([]byte, size-len(data))...)
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				r, err := segment.Scan(data, 1, false, func(segment.Frame) error { return nil })
				if err != nil || r.Tail != segment.EndClean {
					b.Fatal(err, r)
				}
			}
		})
	}
}
