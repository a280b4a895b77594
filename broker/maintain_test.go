package broker

import (
	"testing"

	"github.com/walbroker/walbroker/index"
)

func TestWorthCopying(t *testing.T) {
	const seg = 1000
	uses := func(live ...int64) map[uint32]index.SegmentUse {
		m := map[uint32]index.SegmentUse{}
		for i, b := range live {
			if b > 0 {
				m[uint32(10+i)] = index.SegmentUse{Messages: 1, Bytes: b}
			}
		}
		return m
	}
	for _, c := range []struct {
		name string
		live []int64
		want bool
	}{
		{"a quarter live", []int64{250}, true},
		{"more than a quarter, alone", []int64{251}, false},
		{"one large record before empty segments", []int64{900, 0, 0, 0}, true},
		{"one large record before too few empty segments", []int64{900, 0, 0}, false},
		{"a real backlog", []int64{900, 900, 900, 900, 900, 900}, false},
		{"a backlog behind which much is free", []int64{900, 900, 0, 0, 0, 0, 0, 0}, true},
		{"nothing sealed to judge", nil, false},
	} {
		got := worthCopying(uses(c.live...), 10, uint32(10+len(c.live)), seg)
		if got != c.want {
			t.Errorf("%s: worthCopying(%v) = %v, want %v", c.name, c.live, got, c.want)
		}
	}
}
