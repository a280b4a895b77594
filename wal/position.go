package wal

import "fmt"

// Position orders every record of a log: the segment sequence in the high 32
// bits, the byte offset of the record's frame in that segment in the low 32.
// Comparing two Positions with < compares their places in the log. The zero
// Position is before every record.
type Position uint64

// MakePosition returns the position of the frame at offset off of segment
// seq.
func MakePosition(seq uint32, off int) Position {
	return Position(uint64(seq)<<32 | uint64(uint32(off)))
}

// Segment returns the sequence number of the record's segment.
func (p Position) Segment() uint32 { return uint32(p >> 32) }

// Offset returns the byte offset of the record's frame in its segment.
func (p Position) Offset() int { return int(uint32(p)) }

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Segment(), p.Offset()) }
