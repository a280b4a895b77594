package broker_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// Reclamation reads every live record of a segment it empties to copy it
// forward, so damage to an old segment that no call has read since it was
// written shows there: maintenance fails with Corrupt naming the message,
// removes nothing, and the store stops as a Receive that met the damage
// would stop it. The next Open refuses the log, naming the file, and
// Options.Salvage opens it with the damaged message listed as lost and the
// message beside it intact.
func TestCopyForwardOfADamagedMessageStopsTheStoreAndRemovesNothing(t *testing.T) {
	clock := newFakeClock()
	dir := fastDir(t)
	opts := reclaimOptions(clock, nil)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	stuck, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	intact, damaged := intactAndVictim(t, stuck)
	churnSegments(t, s, 4)
	path := damagePayload(t, dir, victimPayload)
	before := s.Stats().Segments

	err = s.Maintain()
	requireErrorIs(t, err, broker.Corrupt, damaged.ID, "reopen it")
	requireErrorIs(t, s.Err(), broker.Corrupt)
	require.FileExists(t, path, "the damaged segment is not removed")
	require.Equal(t, before, s.Stats().Segments, "nothing is removed")
	_, err = stuck.Publish(ctx(t), []byte("after"))
	requireErrorIs(t, err, broker.Corrupt, "reopen it")
	require.NoError(t, s.Close())

	_, err = broker.Open(dir, opts)
	requireErrorIs(t, err, broker.Corrupt, filepath.Base(path))

	opts.Salvage = true
	s, err = broker.Open(dir, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	rep := s.Recovery()
	t.Logf("recovery: %v", rep)
	require.Contains(t, rep.LostMessages, damaged.ID)
	require.NotContains(t, rep.LostMessages, intact.ID)
	requireOnlyIntact(t, s, intact, "")
}

// victimPayload is the payload intactAndVictim publishes to be damaged.
var victimPayload = bytes.Repeat([]byte("victim-payload."), 20)

// intactAndVictim publishes to q a message to keep intact, then one whose
// payload (victimPayload) damagePayload can find in the log.
func intactAndVictim(t *testing.T, q *broker.Queue) (intact, victim broker.MessageValue) {
	t.Helper()
	intact, err := q.Publish(ctx(t), []byte("intact"))
	require.NoError(t, err)
	victim, err = q.Publish(ctx(t), victimPayload)
	require.NoError(t, err)
	return intact, victim
}

// requireOnlyIntact requires queue "stuck" of s to hold intact (its ID
// and payload) and nothing else that a Receive hands out.
func requireOnlyIntact(t *testing.T, s *broker.Store, intact broker.MessageValue, what string) {
	t.Helper()
	q, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	ds, err := q.Receive(ctx(t), 10)
	require.NoError(t, err, what)
	require.Len(t, ds, 1, "only the intact message is left: %s", what)
	require.Equal(t, intact.ID, ds[0].Message.ID, what)
	require.Equal(t, []byte("intact"), ds[0].Message.Payload, what)
}

// damagePayload overwrites bytes in the middle of payload where it lies in
// a segment file of dir (in one only), and returns that file.
func damagePayload(t *testing.T, dir string, payload []byte) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	var path string
	for _, p := range segs {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		if i := bytes.Index(b, payload); i >= 0 {
			require.Empty(t, path, "the payload is in one segment")
			path = p
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte("DAMAGE"), int64(i+len(payload)/2))
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}
	}
	require.NotEmpty(t, path, "the payload is in the log")
	return path
}
