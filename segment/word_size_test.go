package segment_test

import (
	"errors"
	"io/fs"
	"math"
	"path/filepath"
	"testing"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// A frame that claims more bytes synced than its own offset was written by
// no log, and RecoverSalt does not take it as confirming a salt. A claim
// of 2 GiB or more read as a negative int on a 32-bit build, which is
// below every offset, so such a frame confirmed the salt there.
func TestRecoverSaltTakesNoFrameThatClaimsASyncPastItself(t *testing.T) {
	const seq, salt = 5, 0x5a17
	h := segment.EncodeHeader(seq, salt)
	for _, synced := range []uint32{segment.HeaderSize + 1, 1 << 31, math.MaxUint32} {
		data := segment.AppendFrame(h[:], seq, salt, synced, segment.KindRecord, segment.Full, []byte("body"))
		data = append(data, make([]byte, 64)...)
		if got, ok := segment.RecoverSalt(data, seq); ok {
			t.Errorf("synced %d: salt %#x recovered from a frame that claims a sync past its own offset", synced, got)
		}
	}
}

// Create refuses, before it makes a file, a size the mapping cannot hold:
// on a 32-bit build, past 2 GiB, not only past 4 GiB (the frames' 32-bit
// offsets), since the mapping's length is an int. It wrote such a file
// whole, and only then did its mapping fail.
func TestCreateRefusesASizeTheMappingCannotHoldBeforeWriting(t *testing.T) {
	over := int64(1 << 32) // past the frames' offsets
	if maxInt := int64(math.MaxInt); maxInt < over {
		over = maxInt + 1 // past what an int holds
	}
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpWrite}) // never write the zeros, if it tries
	path := filepath.Join(t.TempDir(), "1.seg")
	_, err := segment.Create(ffs, path, 1, 7, over)
	if !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("Create of %d bytes: %v, want an error wrapping fs.ErrInvalid", over, err)
	}
	if ffs.Count(vfs.OpOpen) != 0 {
		t.Errorf("Create of %d bytes opened a file before refusing it", over)
	}
}
