package segment_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/walbroker/walbroker/segment"
)

// checksumField returns the checksum field of the frame AppendFrame writes for body
// under salt.
func checksumField(seq, salt uint32, body []byte) uint32 {
	f := segment.AppendFrame(nil, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, body)
	return binary.LittleEndian.Uint32(f)
}

// saltZeroingChecksum returns a salt under which the frame of body has a checksum
// field of zero. A CRC is affine in its initial value: solve L(s) = f(0)
// over GF(2), L(s) = f(s) xor f(0).
func saltZeroingChecksum(t *testing.T, seq uint32, body []byte) uint32 {
	t.Helper()
	f0 := checksumField(seq, 0, body)
	// Rows: column i of L is L(1<<i). Solve by elimination on the
	// augmented system, kept as (combination of basis salts, image).
	type row struct{ salt, img uint32 }
	var basis [32]*row // basis[b]: a row whose image's highest set bit is b
	for i := range 32 {
		r := &row{salt: 1 << i, img: checksumField(seq, 1<<i, body) ^ f0}
		for b := 31; b >= 0 && r.img != 0; b-- {
			if r.img&(1<<b) == 0 {
				continue
			}
			if basis[b] == nil {
				basis[b] = r
				break
			}
			r.img ^= basis[b].img
			r.salt ^= basis[b].salt
		}
	}
	want, salt := f0, uint32(0)
	for b := 31; b >= 0; b-- {
		if want&(1<<b) == 0 {
			continue
		}
		if basis[b] == nil {
			t.Fatalf("no salt zeroes the checksum")
		}
		want ^= basis[b].img
		salt ^= basis[b].salt
	}
	if checksumField(seq, salt, body) != 0 {
		t.Fatalf("solved salt %#x does not zero the checksum", salt)
	}
	return salt
}

// A segment of several intact records and a seal whose salt field alone
// was zeroed gives its salt back, though one of its frames has a checksum
// that is zero (once in 2^32 frames; here made so by choosing the salt):
// such a frame is taken for zeros only where the chain it starts ends
// without giving the salt, never where it confirms the frame before it.
func TestRecoverSaltThroughAFrameWhoseChecksumIsZero(t *testing.T) {
	const seq = 5
	second := []byte("the second record")
	salt := saltZeroingChecksum(t, seq, second)
	h := segment.EncodeHeader(seq, salt)
	data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("the first record"))
	firstEnd := len(data)
	data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, second)
	for i := range 4 {
		data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte{byte(i), 'r', 'e', 'c'})
	}
	data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindSeal, segment.Full, nil)
	data = append(data, make([]byte, 128)...)
	if binary.LittleEndian.Uint32(data[segment.HeaderSize:]) == 0 {
		t.Fatalf("setup: the first frame's checksum is zero too")
	}
	if binary.LittleEndian.Uint32(data[firstEnd:]) != 0 {
		t.Fatalf("setup: the second frame's checksum is not zero")
	}
	// Every frame verifies: a legitimate segment.
	for off := segment.HeaderSize; off < len(data)-128; {
		f, err := segment.Decode(data, off, seq)
		if err != nil {
			t.Fatalf("setup: frame at %d: %v", off, err)
		}
		off = f.End()
	}

	damaged := bytes.Clone(data)
	clear(damaged[16:20]) // the salt field alone
	got, ok := segment.RecoverSalt(damaged, seq)
	if !ok || got != salt {
		t.Fatalf("RecoverSalt of an intact segment of 6 records and a seal with only its salt field zeroed: got %#x, %v; want %#x, true (the chain passes through a genuine frame whose checksum is 0)", got, ok, salt)
	}
}

// A sealed segment of one intact record, whose checksum is zero, and its
// seal gives its salt back when the salt field alone was zeroed: the chain
// the record starts gives it.
func TestRecoverSaltOfASealedRecordWhoseChecksumIsZero(t *testing.T) {
	const seq = 9
	rec := []byte("the only record of a sealed segment")
	salt := saltZeroingChecksum(t, seq, rec)
	h := segment.EncodeHeader(seq, salt)
	data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, rec)
	data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindSeal, segment.Full, nil)
	data = append(data, make([]byte, 128)...)
	if _, err := segment.Decode(data, segment.HeaderSize, seq); err != nil {
		t.Fatalf("setup: the record does not verify: %v", err)
	}

	damaged := bytes.Clone(data)
	clear(damaged[16:20]) // the salt field alone
	got, ok := segment.RecoverSalt(damaged, seq)
	if !ok || got != salt {
		t.Fatalf("RecoverSalt of an intact sealed segment of one record with only its salt field zeroed: got %#x, %v; want %#x, true (the record's checksum is 0)", got, ok, salt)
	}
}
