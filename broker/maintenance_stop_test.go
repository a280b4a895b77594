package broker_test

import (
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// A checkpoint that fails in the background stops checkpoints, and with
// them the removal of old segments, until the store is reopened: the store
// goes on, and its directory grows. An operator must be able to see that:
// StoreStats.MaintenanceStopped says why, and the log says it once, at
// ERROR, with what to do, rather than a warning at every later rotation,
// or at Close, which tries no checkpoint then.
func TestAStoppedMaintenanceIsReportedOnceAndInStats(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	var logs lockedBuffer
	e := newEnv(t, func(o *broker.Options) {
		o.FS = ffs
		o.SegmentBytes = broker.MinSegmentBytes
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 2 << 10 }))
	require.Empty(t, e.s.Stats().MaintenanceStopped)
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: "checkpoint.tmp", Nth: 1})
	payload := strings.Repeat("x", 2<<10)
	deadline := time.Now().Add(30 * time.Second)
	for e.s.Stats().MaintenanceStopped == "" {
		require.True(t, time.Now().Before(deadline), "no background checkpoint failed")
		mustPublish(t, q, payload)
	}
	require.Contains(t, e.s.Stats().MaintenanceStopped, syscall.EIO.Error())
	checkpoints := e.s.Stats().Checkpoints
	segs := e.s.Stats().Segments
	for e.s.Stats().Segments < segs+4 { // rotations that each kick a round
		mustPublish(t, q, payload)
	}
	s := e.s
	e.close()
	require.Equal(t, checkpoints, s.Stats().Checkpoints, "no checkpoint after the failure, Close's neither")

	errors, warnings, closeWarnings := 0, 0, 0
	for _, r := range logs.records(t) {
		msg, _ := r["msg"].(string)
		switch {
		case r["level"] == "ERROR" && strings.Contains(msg, "its directory now grows"):
			errors++
		case r["level"] == "WARN" && strings.Contains(msg, "maintenance"):
			warnings++
		case strings.Contains(msg, "checkpoint at close failed"):
			closeWarnings++
		}
	}
	require.Equal(t, 1, errors, "logged once: %v", logs.records(t))
	require.Zero(t, warnings, "and not again at each rotation")
	require.Zero(t, closeWarnings, "nor as a checkpoint Close tried and saw fail: it tried none: %v", logs.records(t))
}

// A Close whose checkpoint fails and whose log then fails to close (a
// full disk fails both) still logs the checkpoint's failure: the error
// it returns is the log's, and the warning is the only word of the other.
func TestACloseThatFailsStillLogsItsFailedCheckpoint(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	var logs lockedBuffer
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) {
		o.FS = ffs
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	mustPublish(t, e.queue("jobs", policy()), "one")
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: "checkpoint.tmp", Nth: 1})
	ffs.Inject(vfs.Rule{Op: vfs.OpClose, NameContains: "0000000001.seg", Nth: 1})
	s := e.s
	e.s = nil
	err := s.Close()
	require.ErrorIs(t, err, syscall.EIO)
	warned := false
	for _, r := range logs.records(t) {
		if msg, _ := r["msg"].(string); r["level"] == "WARN" && strings.Contains(msg, "checkpoint at close failed") {
			warned = true
		}
	}
	require.True(t, warned, "logged: %v", logs.records(t))
}
