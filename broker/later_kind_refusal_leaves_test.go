package broker_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// A store refused for a later build's record is refused only once the
// log's Open has succeeded (the replay meets the record), and that Open
// may already have changed the directory. What it changes is what any
// build changes in the same store, and nothing a later build reads
// otherwise (docs/DESIGN.md, Recovery, "what recovery refuses"): after a
// clean close, nothing at all (the clean mark is removed and written
// again, the same 12 bytes); after a crash, exactly the torn tail (bytes
// past the last record no fdatasync covered, which every build zeroes)
// and the temporary files of segments being prepared (which every build
// removes), with or without Salvage. Every other byte, the clean mark's
// absence included, stays as it was. A crash in the middle of a rotation
// (the last segment sealed, the next one renamed into place with nothing
// written to it yet) leaves both segments as they were: the empty one is
// the log's last segment, neither removed nor replaced, and the clean
// mark the log's Close writes says the log ends at its header, which is
// true.
func TestARefusalOfALaterBuildsRecordChangesOnlyWhatEveryBuildWould(t *testing.T) {
	const torn = 40
	for _, crash := range []string{"", "torn tail", "mid-rotation"} {
		crashed := crash == "torn tail"
		for _, salvage := range []bool{false, true} {
			e := newEnv(t)
			q := e.queue("jobs", policy())
			mustPublish(t, q, "one")
			e.close()
			later := laterBuildsRecords(t, e.dir)
			seg := filepath.Join(e.dir, "0000000001.seg")
			clean := filepath.Join(e.dir, "CLEAN")
			var end int
			var mark []byte
			if crashed {
				var err error
				mark, err = os.ReadFile(clean)
				require.NoError(t, err)
				end = int(uint32(binary.LittleEndian.Uint64(mark)))
				// A batch the crash cut before its fdatasync: a frame of
				// the segment past the log's end, its body not all
				// written (it fails its checksum); no clean mark; and a
				// segment whose preparation the crash cut short.
				data, err := os.ReadFile(seg)
				require.NoError(t, err)
				frame := segment.AppendFrame(nil, 1, segment.SaltOf(data), uint32(end), segment.KindRecord, segment.Full, bytes.Repeat([]byte{'t'}, torn-segment.FrameHeaderSize))
				frame[len(frame)-1] = 0
				f, err := os.OpenFile(seg, os.O_RDWR, 0)
				require.NoError(t, err)
				_, err = f.WriteAt(frame, int64(end))
				require.NoError(t, err)
				require.NoError(t, f.Close())
				require.NoError(t, os.Remove(clean))
				require.NoError(t, os.WriteFile(filepath.Join(e.dir, "0000000002.seg.tmp"), []byte("cut short"), 0o600))
			}
			next := filepath.Join(e.dir, "0000000002.seg")
			if crash == "mid-rotation" {
				// The rotation sealed the segment, then renamed the next
				// one, empty, into place; the crash came before its
				// preamble.
				data, err := os.ReadFile(seg)
				require.NoError(t, err)
				end = int(uint32(binary.LittleEndian.Uint64(mustReadFile(t, clean))))
				seal := segment.AppendFrame(nil, 1, segment.SaltOf(data), uint32(end), segment.KindSeal, segment.Full, nil)
				f, err := os.OpenFile(seg, os.O_RDWR, 0)
				require.NoError(t, err)
				_, err = f.WriteAt(seal, int64(end))
				require.NoError(t, err)
				require.NoError(t, f.Close())
				require.NoError(t, os.Remove(clean))
				nf, err := segment.Create(vfs.Default, next, 2, segment.NewSalt(), int64(len(data)))
				require.NoError(t, err)
				require.NoError(t, nf.Close())
			}
			before := treeContents(t, e.dir)

			opts := e.opts
			opts.Salvage = salvage
			s, err := broker.Open(e.dir, opts)
			if s != nil {
				_ = s.Close()
			}
			require.ErrorIs(t, err, errors.ErrUnsupported, "crash %q, salvage %v", crash, salvage)
			require.ErrorContains(t, err, "kind 14, written by a later build", "crash %q, salvage %v", crash, salvage)

			after := treeContents(t, e.dir)
			want := before
			if crashed {
				want = map[string]string{}
				for name, data := range before {
					want[name] = data
				}
				delete(want, filepath.Join(e.dir, "0000000002.seg.tmp"))
				data := []byte(want[seg])
				clear(data[end : end+torn])
				want[seg] = string(data)
				// The log's Close, after the refusal, marks it closed
				// cleanly where it ends, once the zeroed tail is synced:
				// true, and what the clean Close before the crash wrote.
				want[clean] = string(mark)
			}
			if crash == "mid-rotation" {
				// The log's Close marks it closed cleanly at the end of
				// the empty segment's header: the sealed segment and the
				// empty one are the log as it was.
				require.Equal(t, before[next], after[next], "salvage %v: the empty segment is kept as it was", salvage)
				require.Contains(t, after, clean, "salvage %v", salvage)
				require.Equal(t, uint64(wal.MakePosition(2, segment.HeaderSize)), binary.LittleEndian.Uint64([]byte(after[clean])),
					"salvage %v: the clean mark says the log ends where the empty segment's header does", salvage)
				want[clean] = after[clean]
			}
			require.Empty(t, treeDiff(want, after), "crash %q, salvage %v: the refused Open changed more than every build would", crash, salvage)
			require.Contains(t, after[seg], string(later), "crash %q, salvage %v", crash, salvage)
		}
	}
}

// treeDiff lists, for each file of want or got (treeContents) that differs,
// what differs: the file added or gone, its size, or the first byte that
// differs and how many bytes do.
func treeDiff(want, got map[string]string) []string {
	var diffs []string
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			diffs = append(diffs, name+": gone")
		case len(g) != len(w):
			diffs = append(diffs, fmt.Sprintf("%s: %d bytes, want %d", name, len(g), len(w)))
		case g != w:
			first, n := -1, 0
			for i := range len(w) {
				if w[i] != g[i] {
					if first < 0 {
						first = i
					}
					n++
				}
			}
			diffs = append(diffs, fmt.Sprintf("%s: %d bytes differ, the first at offset %d", name, n, first))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			diffs = append(diffs, name+": added")
		}
	}
	slices.Sort(diffs)
	return diffs
}

// mustReadFile returns the bytes of the file at path.
func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}
