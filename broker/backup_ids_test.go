package broker_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// A store opened from a backup numbers its messages on from where the
// store stood at the backup: the IDs the original handed out after it are
// handed out again, for other messages (README, "restore"; DESIGN.md,
// "Message IDs"). The copy cannot know how far the original went. A
// consumer that drops a message whose ID it has already processed must
// forget, at a restore, the IDs it saw after the backup, or it drops new
// messages. The IDs before the backup are the copy's own messages, and
// stay theirs.
func TestACopyHandsOutAgainTheIDsTheOriginalGaveAfterTheBackup(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", policy())
	kept := mustPublish(t, q, "before the backup")
	dst := filepath.Join(t.TempDir(), "b")
	require.NoError(t, e.s.Backup(ctx(t), dst))
	after := mustPublish(t, q, "after the backup, in the original")

	b, err := broker.Open(dst, e.opts)
	require.NoError(t, err)
	defer b.Close()
	bq, err := b.Queue("jobs", policy())
	require.NoError(t, err)
	again := mustPublish(t, bq, "after the restore, in the copy")
	require.Equal(t, after.ID, again.ID, "the copy's first new message takes the ID the original gave after the backup")
	ds := mustReceive(t, bq, 10)
	require.Len(t, ds, 2)
	require.Equal(t, kept.ID, ds[0].Message.ID)
	require.Equal(t, "before the backup", string(ds[0].Message.Payload))
	require.Equal(t, again.ID, ds[1].Message.ID)
	require.Equal(t, "after the restore, in the copy", string(ds[1].Message.Payload), "same ID, another message")
}
