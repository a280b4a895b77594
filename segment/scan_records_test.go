package segment_test

import (
	"errors"
	"testing"

	"github.com/walbroker/walbroker/segment"
)

// TestRecordsCountsTheFramesTheCallbackTookInAGroupItFailedIn:
// Report.Records is the record frames the callback took. When it fails on
// the last frame of a group, the frame of that group it took before (it
// returned nil) counts; the one it failed on does not.
func TestRecordsCountsTheFramesTheCallbackTookInAGroupItFailedIn(t *testing.T) {
	const seq, salt = 7, 0x5eed
	h := segment.EncodeHeader(seq, salt)
	data := h[:]
	data = segment.AppendFrame(data, seq, salt, 32, segment.KindRecord, segment.First, []byte("one"))
	data = segment.AppendFrame(data, seq, salt, 32, segment.KindRecord, segment.Last, []byte("two"))
	data = append(data, make([]byte, 32)...)
	handed, took := 0, 0
	stop := errors.New("stop")
	r, err := segment.Scan(data, seq, false, func(segment.Frame) error {
		handed++
		if handed == 2 {
			return stop
		}
		took++
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("scan: %v, want the callback's error", err)
	}
	if handed != 2 || r.Records != took {
		t.Errorf("Report.Records = %d, but the callback took %d of the %d record frames handed to it (the first with nil, the second failed)", r.Records, took, handed)
	}
}
