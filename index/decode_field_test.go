package index

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// TestDecodeNamesTheFieldThatIsMalformed: Decode refuses a malformed record
// with an error that names the field that is wrong, not only the class of
// problem: a dead letter whose delivery count and whose code are each one
// past 32 bits, or whose reason and cause are cut, get four different
// errors.
func TestDecodeNamesTheFieldThatIsMalformed(t *testing.T) {
	over := binary.AppendUvarint(nil, 1<<32)
	dl := func(deliveries, code []byte, tail []byte) []byte {
		b := []byte{byte(KindDeadLetter), 3, 7}
		b = append(b, deliveries...)
		b = binary.AppendVarint(b, 99)
		b = append(b, code...)
		return append(b, tail...)
	}
	lease := []byte{byte(KindLease), 3, 7, 1, 2, 1, 2, 3} // a nonce of 3 bytes, not 8
	cases := []struct {
		field string
		rec   []byte
	}{
		{"deliveries", dl(over, []byte{1}, []byte{1, 'R', 0})},
		{"code", dl([]byte{1}, over, []byte{1, 'R', 0})},
		{"reason", dl([]byte{1}, []byte{1}, []byte{5, 'R'})},
		{"cause", dl([]byte{1}, []byte{1}, []byte{1, 'R', 5, 'c'})},
		{"failedAt", []byte{byte(KindDeadLetter), 3, 7, 1, 0x80}},
		{"seq", []byte{byte(KindAck), 3, 0x80, 0}}, // not the shortest form
		{"nonce", lease},
		{"key", []byte{byte(KindPublish), 3, 7, 2, 9, 'k'}},
		{"name", []byte{byte(KindDeclare), 3, 4, 'q'}},
	}
	for _, c := range cases {
		_, err := Decode(c.rec)
		if err == nil {
			t.Errorf("%s: Decode(%x) accepted a malformed record", c.field, c.rec)
			continue
		}
		if !errors.Is(err, ErrBadEvent) {
			t.Errorf("%s: Decode(%x) = %v, not ErrBadEvent", c.field, c.rec, err)
		}
		if !strings.Contains(err.Error(), c.field+":") {
			t.Errorf("a record whose %s is malformed is refused with %q, which does not say the %s is what is wrong", c.field, err, c.field)
		}
	}
}
