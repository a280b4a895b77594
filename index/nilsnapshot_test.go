package index_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/internal/methodset"
)

// A nil *Snapshot is what a caller holds that went on past the error of
// Index.Snapshot. It makes no checkpoint file, so its sizes are 0, rather
// than a nil dereference that ends the process. The cases are checked
// against the method set, so a new method without a case fails here.
func TestANilSnapshotHasNoSize(t *testing.T) {
	var x *index.Index
	s, err := x.Snapshot(0, nil)
	require.Error(t, err)
	require.Nil(t, s)
	zeros := map[string]func(){
		"Size":     func() { require.Equal(t, 0, s.Size()) },
		"FileSize": func() { require.Equal(t, int64(0), s.FileSize([]uint64{1, 2})) },
	}
	require.NoError(t, methodset.Check(reflect.TypeFor[*index.Snapshot](), map[string]func() error(nil), zeros), "every exported method needs a nil-receiver case")
	for name, check := range zeros {
		t.Run(name, func(t *testing.T) { require.NotPanics(t, check) })
	}
}
