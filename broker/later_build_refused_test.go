package broker_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// A record of a kind a later build added, whose frame verifies, is not
// damage: it is what a rollback after an upgrade meets, as a segment of a
// later format version is (TestAStoreOfALaterFormatVersionIsRefusedAsUnsupportedAndLeftAsItIs).
// Open should refuse it as it refuses that segment, with or without
// Salvage: wrapping errors.ErrUnsupported rather than Corrupt (whose
// "the store's files failed verification" sends an operator to restore
// a backup, losing what was written since), naming the file and the kind,
// and saying that a later build wrote it.
func TestARecordOfAKindALaterBuildAddedIsRefusedAsUnsupportedNotAsDamage(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "one")
	e.close()
	laterBuildsRecords(t, e.dir)

	openEach(t, e, func(salvage bool, err error) {
		require.Error(t, err, "salvage %v", salvage)
		require.ErrorContains(t, err, filepath.Join(e.dir, "0000000001.seg"), "salvage %v", salvage)
		require.ErrorContains(t, err, "kind 14", "salvage %v", salvage)
		require.NotErrorIs(t, err, broker.Corrupt, "salvage %v: a record whose frame verifies is not damage", salvage)
		require.ErrorIs(t, err, errors.ErrUnsupported, "salvage %v", salvage)
		require.ErrorContains(t, err, "later build", "salvage %v", salvage)
	})
}

// A later build that added an event kind may also have written its
// checkpoint in a later version. This build refuses the store; the
// refusal leaves the later build's index as it was, as the refusal of a
// later segment version leaves every file (it was taken for damage and
// rebuilt over, the checkpoint and table files removed before the replay
// met the kind). The checkpoint's position is what tells that build's
// next Open damage to synced records from a torn tail when no clean mark
// is there.
func TestARefusedOpenOfALaterBuildsStoreLeavesItsIndexInPlace(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "one")
	e.close()
	cp := filepath.Join(e.dir, "index", "checkpoint")
	data, err := os.ReadFile(cp)
	require.NoError(t, err)
	binary.LittleEndian.PutUint32(data[8:], 2) // a later checkpoint version
	require.NoError(t, os.WriteFile(cp, data, 0o600))
	laterBuildsRecords(t, e.dir)
	before := storeFiles(t, e.dir)

	s, err := broker.Open(e.dir, e.opts)
	if s != nil {
		_ = s.Close()
	}
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.NotErrorIs(t, err, broker.Corrupt)
	require.ErrorContains(t, err, "written by a later build")
	require.Equal(t, before, storeFiles(t, e.dir), "the refused Open removed the later build's checkpoint and table files")
}

// A checkpoint of a later version, before a log this build reads, is
// refused too (its version is outside its checksum, and what follows may
// be laid out otherwise): the error names the file and both versions and
// says what to do if no later build wrote it; nothing changes; and once
// the index directory is removed, as it says, Open rebuilds the same
// state from the log.
func TestACheckpointOfALaterVersionIsRefusedAndLeftAsItIs(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	m := mustPublish(t, q, "one")
	e.close()
	cp := filepath.Join(e.dir, "index", "checkpoint")
	data, err := os.ReadFile(cp)
	require.NoError(t, err)
	binary.LittleEndian.PutUint32(data[8:], 2)
	require.NoError(t, os.WriteFile(cp, data, 0o600))
	before := storeFiles(t, e.dir)

	openEach(t, e, func(salvage bool, err error) {
		require.ErrorIs(t, err, errors.ErrUnsupported, "salvage %v", salvage)
		require.NotErrorIs(t, err, broker.Corrupt, "salvage %v", salvage)
		require.ErrorContains(t, err, cp+": version 2, written by a later build; this build reads version 1", "salvage %v", salvage)
		require.ErrorContains(t, err, "remove the directory "+filepath.Join(e.dir, "index"), "salvage %v", salvage)
		require.NotContains(t, err.Error(), "an error reading the store's files", "salvage %v: it was read", salvage)
		require.Equal(t, before, storeFiles(t, e.dir), "salvage %v", salvage)
	})

	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	e.open()
	require.True(t, e.s.Recovery().IndexRebuilt)
	d := mustReceiveOne(t, e.queue("jobs", policy()))
	require.Equal(t, m.ID, d.Message.ID)
	require.Equal(t, "one", string(d.Message.Payload))
}
