package segment_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/walbroker/walbroker/segment"
)

// The benchmarks of the frame format, with the body size as a
// sub-benchmark (size=N), so that benchstat compares them one by one
// between two commits:
//
//	go test ./segment -run XXX -bench . -count 10 > new.txt
//	benchstat old.txt new.txt

var benchSizes = []int{128, 1 << 10, 64 << 10}

func benchBody(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

// reportFrames reports the frames per second of the b.N frames of the
// benchmark's loop.
func reportFrames(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "frames/s")
	}
}

// BenchmarkAppendFrame encodes one frame (header, CRC-32C, body) into a
// reused buffer: what the log's writer does for each record of a batch.
func BenchmarkAppendFrame(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", n), func(b *testing.B) {
			body := benchBody(n)
			dst := make([]byte, 0, segment.Size(n))
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				dst = segment.AppendFrame(dst[:0], 1, 0, 0, segment.KindRecord, segment.Full, body)
			}
			reportFrames(b)
			f, err := segment.Decode(dst, 0, 1)
			if err != nil || f.Kind != segment.KindRecord || f.Place != segment.Full || !bytes.Equal(f.Body, body) {
				b.Fatalf("the frame encoded last does not decode to its record (error %v)", err)
			}
		})
	}
}

// BenchmarkDecode decodes and verifies one frame.
func BenchmarkDecode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", n), func(b *testing.B) {
			data := segment.AppendFrame(nil, 1, 0, 0, segment.KindRecord, segment.Full, benchBody(n))
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := segment.Decode(data, 0, 1); err != nil {
					b.Fatal(err)
				}
			}
			reportFrames(b)
		})
	}
}

// BenchmarkScan scans a 4 MiB segment whose first half holds records and
// whose second half is zero-filled space, as Open does for the last
// segment.
func BenchmarkScan(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", n), func(b *testing.B) {
			const size = 4 << 20
			h := segment.EncodeHeader(1, 0)
			data := h[:]
			body := benchBody(n)
			for len(data)+segment.Size(n) <= size/2 {
				data = segment.AppendFrame(data, 1, 0, uint32(len(data)), segment.KindRecord, segment.Full, body)
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

// BenchmarkScanStaleBytes scans a 4 MiB segment of one record whose stale
// bytes after it are random, name the segment every 8 bytes with long
// lengths (named), or pass every check of a frame header but the
// checksum every 16 bytes (would-be): what a scan after a crash meets in a
// reused file. The last two cost the resynchronisation its allowance.
func BenchmarkScanStaleBytes(b *testing.B) {
	const size, seq, salt = 4 << 20, 5, 0x5555
	named, random, _ := staleFile(size, seq, salt, lengthSeq(size/2, seq))
	wouldBe, _, _ := staleFile(size, seq, salt, wouldBeFrames(size/2, seq, func(int) uint32 { return segment.HeaderSize }))
	for _, c := range []struct {
		name string
		data []byte
	}{{"random", random}, {"named", named}, {"would-be", wouldBe}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				if _, err := segment.Scan(c.data, seq, false, nop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
