package broker_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// seqOf is the sequence a message ID names.
func seqOf(t testing.TB, id string) uint64 {
	t.Helper()
	seq, ok := broker.MessageSeq(id)
	require.True(t, ok, "message ID %q", id)
	return seq
}

// A store opened from a backup numbered its messages on from where the
// store stood at the backup, and handed the IDs the original gave after
// it to other messages: a consumer that drops a message whose ID it has
// already processed dropped the copy's new ones. The copy cannot know how
// far the original went, so its first Open moves the next sequence on by
// far more than any store publishes between a backup and its restore
// (README, "restore"; DESIGN.md, "Message IDs"). The IDs before the
// backup are the copy's own messages, and stay theirs; the copy's own
// IDs still order by publish, and its next Open moves them no further.
func TestACopyHandsOutNoIDTheOriginalGaveAfterTheBackup(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", policy())
	kept := mustPublish(t, q, "before the backup")
	dst := filepath.Join(t.TempDir(), "b")
	require.NoError(t, e.s.Backup(ctx(t), dst))
	var after []broker.MessageValue
	for range 3 {
		after = append(after, mustPublish(t, q, "after the backup, in the original"))
	}
	require.FileExists(t, filepath.Join(dst, broker.CopyMark), "the copy is marked")

	b, err := broker.Open(dst, e.opts)
	require.NoError(t, err)
	require.NoFileExists(t, filepath.Join(dst, broker.CopyMark), "the first Open forgets the mark")
	bq, err := b.Queue("jobs", policy())
	require.NoError(t, err)
	var again []broker.MessageValue
	for range 3 {
		again = append(again, mustPublish(t, bq, "after the restore, in the copy"))
	}
	for i, m := range again {
		require.Greater(t, seqOf(t, m.ID), seqOf(t, after[len(after)-1].ID), "the copy's message %d takes an ID above every one the original gave", i)
		require.GreaterOrEqual(t, seqOf(t, m.ID), seqOf(t, kept.ID)+broker.CopyJump, "by the whole jump")
		if i > 0 {
			require.Equal(t, seqOf(t, again[i-1].ID)+1, seqOf(t, m.ID), "the copy's IDs order by publish")
		}
	}
	ds := mustReceive(t, bq, 10)
	require.Len(t, ds, 4)
	require.Equal(t, kept.ID, ds[0].Message.ID)
	require.Equal(t, "before the backup", string(ds[0].Message.Payload))
	for i, d := range ds[1:] {
		require.Equal(t, again[i].ID, d.Message.ID)
	}
	require.NoError(t, b.Close())

	// Opened again, the copy is a store like any other: no second jump.
	b, err = broker.Open(dst, e.opts)
	require.NoError(t, err)
	defer b.Close()
	bq, err = b.Queue("jobs", policy())
	require.NoError(t, err)
	require.Equal(t, seqOf(t, again[len(again)-1].ID)+1, seqOf(t, mustPublish(t, bq, "reopened").ID))
}
