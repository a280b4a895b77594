package wal

import (
	"errors"
	"fmt"

	"github.com/walbroker/walbroker/internal/mapfault"
	"github.com/walbroker/walbroker/segment"
)

// A segment file cut short while the log has it mapped (by another process,
// or by hand: Open checks every size before it maps) leaves pages of the
// mapping that no file backs, and reading one raises SIGBUS, which the Go
// runtime turns into the end of the process. The log's reads of a mapping
// while it runs (View, Iterate, CopyTo) ask for a panic instead
// (internal/mapfault) and return such a fault as a *CorruptionError naming
// the file and the offset: damage to the file, which a store stops for.
// A callback's reads of rec are not guarded: rec lies in the pages the
// frame's checksum was just computed over, which read whole then.

// decode is segment.Decode of the frame at off in data, the frames of s's
// mapping, with a fault reading the mapping returned in cut instead.
func decode(s *seg, data []byte, off int) (f segment.Frame, cut, err error) {
	defer mapfault.Catch(mapfault.Guard(), &cut, data)
	f, err = segment.Decode(data, off, s.seq)
	return f, nil, err
}

// cutShort is the *CorruptionError of fault, the error of a read of the
// mapping of the segment file at path that faulted, and err itself when it
// is no such fault.
func cutShort(path string, err error) error {
	var fault *mapfault.Fault
	if !errors.As(err, &fault) {
		return err
	}
	return &CorruptionError{File: path, Offset: fault.Offset,
		Cause: fmt.Errorf("the file is shorter than the log mapped it (cut short since it was opened): %w", fault)}
}
