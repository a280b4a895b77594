package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
)

// An Open after a crash writes the last segment's frames again, as the page
// cache holds them, and fdatasyncs them (a failed writeback may have left
// them clean there, never to be written otherwise). Should the page cache
// drop such pages between the scan and the rewrite, a read shows the
// device's bytes instead, and the rewrite makes those durable under
// frames the scan counted: the writer would append after a hole, and the
// next Open find frames that claim to be synced past it. Open must notice
// that the segment changed under it, fail saying so, and the next Open
// must read what is there.
func TestAnOpenWhoseSegmentChangesWhileItIsMadeDurableAgainFails(t *testing.T) {
	for _, verified := range []bool{false, true} {
		t.Run(map[bool]string{false: "scanned whole", true: "scanned from Options.Verified"}[verified], func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: 1 << 16}
			l, err := Open(dir, opts)
			require.NoError(t, err)
			acked := appendRecords(t, l, 0, 10)
			require.NoError(t, l.Close())
			require.NoError(t, os.Remove(filepath.Join(dir, cleanName))) // as after a crash
			if verified {
				opts.Verified = acked[4].pos // a checkpoint vouched for the records before it
			}

			// The page cache drops the pages of the last three records,
			// and the device holds zeros there.
			from := acked[7].pos.Offset()
			beforeRewrite = func(f *segment.File) {
				w, err := os.OpenFile(f.Path(), os.O_WRONLY, 0)
				require.NoError(t, err)
				defer w.Close()
				_, err = w.WriteAt(make([]byte, acked[9].pos.Offset()+200-from), int64(from))
				require.NoError(t, err)
			}
			_, err = Open(dir, opts)
			beforeRewrite = func(*segment.File) {}
			require.Error(t, err, "Open went on over a segment that changed under it")
			require.ErrorContains(t, err, "changed while it was made durable again")
			require.ErrorContains(t, err, segName(1))

			l, err = Open(dir, opts)
			require.NoError(t, err, "the next Open reads what is there")
			defer l.Close()
			requireEntries(t, acked[:7], readAll(t, l))
		})
	}
}
