package index_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
)

// TestACheckpointBeingWrittenMakesTheIndexSuspect: from BeginCheckpoint to
// EndCheckpoint the directory is suspect; ending a checkpoint does not
// clear a suspicion damage raised, nor clearing that end a checkpoint.
func TestACheckpointBeingWrittenMakesTheIndexSuspect(t *testing.T) {
	fs, dir := vfs.Default, t.TempDir()
	require.False(t, index.Suspect(fs, dir))
	require.NoError(t, index.BeginCheckpoint(fs, dir))
	require.True(t, index.Suspect(fs, dir))
	require.NoError(t, index.EndCheckpoint(fs, dir))
	require.False(t, index.Suspect(fs, dir))
	require.NoError(t, index.EndCheckpoint(fs, dir), "ending no checkpoint")

	require.NoError(t, index.MarkSuspect(fs, dir))
	require.NoError(t, index.BeginCheckpoint(fs, dir))
	require.NoError(t, index.EndCheckpoint(fs, dir))
	require.True(t, index.Suspect(fs, dir), "a checkpoint's end cleared damage found meanwhile")
	require.NoError(t, index.BeginCheckpoint(fs, dir))
	require.NoError(t, index.ClearSuspect(fs, dir))
	require.True(t, index.Suspect(fs, dir), "clearing damage ended a checkpoint still being written")
	require.NoError(t, index.EndCheckpoint(fs, dir))
	require.False(t, index.Suspect(fs, dir))
}
