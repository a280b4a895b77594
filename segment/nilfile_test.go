package segment_test

import (
	"io/fs"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/internal/methodset"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// A nil *File is what a caller holds that went on past the error of the
// call that made it. Every method of one that returns an error refuses
// with one wrapping fs.ErrClosed that says so, and those that return no
// error answer as for a closed File, rather than end the process with a
// nil dereference. The cases are checked against the method set, so a new
// method without a case fails here.
func TestANilFileRefusesEveryCall(t *testing.T) {
	var s *segment.File
	dir := t.TempDir()
	calls := map[string]func() error{
		"WriteAt": func() error { return s.WriteAt([]byte("x"), segment.HeaderSize) },
		"Sync":    s.Sync,
		"Scan": func() error {
			r, err := s.Scan(false, func(segment.Frame) error { return nil })
			require.Equal(t, segment.Report{}, r)
			return err
		},
		"Close":  s.Close,
		"Rename": func() error { return s.Rename(vfs.Default, filepath.Join(dir, "renamed")) },
	}
	zeros := map[string]func(){
		"Seq":  func() { require.Equal(t, uint32(0), s.Seq()) },
		"Salt": func() { require.Equal(t, uint32(0), s.Salt()) },
		"Path": func() { require.Equal(t, "", s.Path()) },
		"Size": func() { require.Equal(t, 0, s.Size()) },
		"Data": func() { require.Nil(t, s.Data()) },
	}
	require.NoError(t, methodset.Check(reflect.TypeFor[*segment.File](), calls, zeros), "every exported method needs a nil-receiver case")
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = call() })
			require.ErrorIs(t, err, fs.ErrClosed)
			require.ErrorContains(t, err, "nil *segment.File")
		})
	}
	for name, check := range zeros {
		t.Run(name, func(t *testing.T) { require.NotPanics(t, check) })
	}
	entries, err := vfs.Default.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "Rename of a nil *File made a file")
}
