package segment_test

import (
	"testing"

	"github.com/walbroker/walbroker/segment"
)

// TestASealVouchesForTheBatchBeforeIt lays out a segment as the log's
// writer seals it: a batch of records flushed since the last fdatasync,
// each claiming only the header synced, then, once an fdatasync has made
// them durable, the seal, claiming every byte before it synced (its own
// offset). Damage to the last record before the seal is damage to bytes a
// completed fdatasync covered: corruption, never a torn tail recovery may
// drop with the seal.
//
// A seal that claims less (one an earlier build wrote, with the synced
// value of its last batch) vouches for no more than it claims: the same
// damage then reads as a torn tail, as the package documentation says.
func TestASealVouchesForTheBatchBeforeIt(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ownOffset bool // the seal claims its own offset synced
		want      segment.EndKind
	}{
		{"seal claims every byte before it", true, segment.EndCorrupt},
		{"seal claims only the header", false, segment.EndTorn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const seq, salt = 7, 0x1234abcd
			h := segment.EncodeHeader(seq, salt)
			data := h[:]
			synced := uint32(segment.HeaderSize) // nothing synced since the header
			data = segment.AppendFrame(data, seq, salt, synced, segment.KindRecord, segment.Full, []byte("first record"))
			victim := len(data)
			data = segment.AppendFrame(data, seq, salt, synced, segment.KindRecord, segment.Full, []byte("second record"))
			if tc.ownOffset {
				synced = uint32(len(data))
			}
			data = segment.AppendFrame(data, seq, salt, synced, segment.KindSeal, segment.Full, nil)
			data = append(data, make([]byte, 64)...)

			clean, err := segment.Scan(data, seq, false, func(segment.Frame) error { return nil })
			if err != nil || !clean.Sealed || clean.Records != 2 || clean.Tail != segment.EndClean {
				t.Fatalf("intact segment: %+v, %v", clean, err)
			}

			data[victim+segment.FrameHeaderSize+3] ^= 0x10 // a bit of the second record's body
			r, err := segment.Scan(data, seq, false, func(segment.Frame) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if r.Tail != tc.want || r.DamageAt != victim {
				t.Errorf("damage at %d before a seal claiming %d bytes synced: want %v there, got %v at %d (sealed %v, %d records)",
					victim, synced, tc.want, r.Tail, r.DamageAt, r.Sealed, r.Records)
			}
		})
	}
}
