package broker_test

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestMemoryLogsNothingOfARefusedNackOrReject: the text of an unclassified
// cause is logged for the message it was recorded against; a Nack or
// Reject that the queue refused (the lease no longer held) recorded
// nothing, and logs nothing.
func TestMemoryLogsNothingOfARefusedNackOrReject(t *testing.T) {
	var logged bytes.Buffer
	m, err := broker.NewMemory(policy(), broker.MemoryOptions{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	require.NoError(t, err)
	defer m.Close()
	_, err = m.Publish(ctx(t), []byte("x"))
	require.NoError(t, err)
	ds, err := m.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.NoError(t, m.Ack(ctx(t), ds[0].Lease.Receipt))

	_, err = m.Nack(ctx(t), ds[0].Lease.Receipt, errors.New("declined card 4111"))
	require.ErrorIs(t, err, broker.LeaseExpired)
	err = m.Reject(ctx(t), ds[0].Lease.Receipt, errors.New("declined card 4111"))
	require.ErrorIs(t, err, broker.LeaseExpired)
	require.Empty(t, logged.String())
}

// TestMemoryListsDeadLettersOfOneInstantInPublishOrder: dead letters that
// failed at the same instant are listed oldest message first, whatever
// order they died in, as the file-backed store lists them.
func TestMemoryListsDeadLettersOfOneInstantInPublishOrder(t *testing.T) {
	m := newMemory(t, newFakeClock()) // the clock moves only when told
	a, err := m.Publish(ctx(t), []byte("a"))
	require.NoError(t, err)
	b, err := m.Publish(ctx(t), []byte("b"))
	require.NoError(t, err)
	ds, err := m.Receive(ctx(t), 2)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	require.NoError(t, m.Reject(ctx(t), ds[1].Lease.Receipt, nil)) // b dies first
	require.NoError(t, m.Reject(ctx(t), ds[0].Lease.Receipt, nil))
	dls, err := m.DeadLetters(ctx(t), 2)
	require.NoError(t, err)
	require.Len(t, dls, 2)
	require.Equal(t, dls[0].FailedAt, dls[1].FailedAt)
	require.Equal(t, []string{a.ID, b.ID}, []string{dls[0].Message.ID, dls[1].Message.ID})
}

// TestMemoryStatsAfterCloseCountNoMessages: Close drops the messages, so
// the gauges read zero after it, whatever the queue held.
func TestMemoryStatsAfterCloseCountNoMessages(t *testing.T) {
	m := newMemory(t, newFakeClock(), func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
	for range 3 {
		_, err := m.Publish(ctx(t), []byte("x"))
		require.NoError(t, err)
	}
	ds, err := m.Receive(ctx(t), 2)
	require.NoError(t, err)
	require.NoError(t, m.Reject(ctx(t), ds[0].Lease.Receipt, nil))
	before := m.Stats()
	require.Equal(t, 1, before.Ready)
	require.Equal(t, 1, before.Leased)
	require.Equal(t, 1, before.DeadLetters)
	require.NoError(t, m.Close())
	after := m.Stats()
	require.Zero(t, after.Ready)
	require.Zero(t, after.Leased)
	require.Zero(t, after.Delayed)
	require.Zero(t, after.DeadLetters)
	require.True(t, after.OldestReady.IsZero())
	require.Equal(t, before.Published, after.Published, "the counters stay")
}
