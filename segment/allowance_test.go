package segment_test

import (
	"math"
	"testing"

	"github.com/walbroker/walbroker/segment"
)

// A scan may checksum, over would-be frames that fail, four times the
// file's bytes, and RecoverSalt as many: a product that overflowed int on
// a 32-bit build for files of 512 MiB and more (a segment of 1 GiB, the
// log's largest, got an allowance of 0, others a negative one). The scan
// then could not afford to verify even the first frame, and ended every
// such segment that held a record as corrupt at offset 32, with
// ErrTooManyCandidates. The sizes here overflow int as 1 GiB overflows a
// 32-bit one.
func TestAScanOfALargeFileAffordsItsFrames(t *testing.T) {
	for _, n := range []int{64 << 10, 1 << 30, math.MaxInt32, math.MaxInt/4 + 1, math.MaxInt / 2, math.MaxInt} {
		allowance, affords, saltWork := segment.ScanAllowance(n, n)
		if allowance < n || saltWork < n {
			t.Errorf("file of %d bytes: allowance %d, salt budget %d: want at least the file's size", n, allowance, saltWork)
		}
		if !affords {
			t.Errorf("file of %d bytes: a scan that spent nothing does not afford a checksum over the whole file", n)
		}
	}
}
