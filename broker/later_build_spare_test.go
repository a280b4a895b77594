package broker_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// An Open that refuses a later build's store changes no file of it, its
// spare segment files included (a refusal found only once the log is
// open: a record of a kind this build does not know). The log prepared its
// next segment as soon as it was open: it took a spare, renamed it and
// wrote a header for this build's next segment over it (or, with no spare,
// made a new segment file), and the Close that followed the refusal kept
// that file as a spare under the name of that segment. The later build
// then found a spare it had not made, or one of its own renamed.
func TestARefusedOpenOfALaterBuildsStoreLeavesItsSparesAsTheyWere(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "one")
	e.close()
	laterBuildsRecords(t, e.dir)
	// A spare the later build kept: a retired segment of full size.
	data, err := os.ReadFile(filepath.Join(e.dir, "0000000001.seg"))
	require.NoError(t, err)
	require.Len(t, data, testSegmentBytes)
	spare := filepath.Join(e.dir, "spare-0000000001.tmp")
	require.NoError(t, os.WriteFile(spare, data, 0o600))
	before := treeContents(t, e.dir)

	openEach(t, e, func(salvage bool, err error) {
		require.ErrorIs(t, err, errors.ErrUnsupported, "salvage %v", salvage)
		require.NotErrorIs(t, err, broker.Corrupt, "salvage %v", salvage)
		require.FileExists(t, spare, "salvage %v", salvage)
		require.Equal(t, before, treeContents(t, e.dir), "salvage %v: the refused Open changed the store's files", salvage)
	})
}
