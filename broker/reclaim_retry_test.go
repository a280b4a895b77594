package broker

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// logRecords is a slog.Handler that keeps every record.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// at returns the records at level whose message contains text.
func (h *logRecords) at(level slog.Level, text string) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range h.recs {
		if r.Level == level && strings.Contains(r.Message, text) {
			out = append(out, r)
		}
	}
	return out
}

// attr returns the value of r's attribute key, and whether r has one.
func attr(r slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
			return false
		}
		return true
	})
	return v, found
}

// A segment file the file system never lets go (an unlink refused with
// EACCES, as on a directory whose permissions changed) fails every removal
// after it: RemoveBelow removes nothing newer until it is gone. Each round
// that tried again synced the log first and logged a WARN, every second
// for as long as the file stayed. Reclamation is now tried again with a
// backoff on the broker's clock: a round before the retry is due does
// nothing for it (no sync, no unlink, no record), the first failure is a
// WARN, a reminder at most every retryRemindEvery says how many rounds
// failed and since when, and one INFO says when it works again. Space
// that was not freed is never counted as reclaimed.
func TestASegmentThatCannotBeRemovedIsTriedAgainWithABackoff(t *testing.T) {
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	tick := func(d time.Duration) { clock.Add(int64(d)) }
	logs := &logRecords{}
	ffs := vfs.NewFaultFS(vfs.Default)
	opts := Options{
		Now:          func() time.Time { return time.Unix(0, clock.Load()) },
		SegmentBytes: MinSegmentBytes,
		// Leases are written and not synced: a round that syncs the log
		// shows in its Syncs.
		Sync:         SyncPublish,
		SyncInterval: time.Hour,
		FS:           ffs,
		Logger:       slog.New(logs),
	}
	ManualMaintenance(&opts)
	s, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	pol := PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 3, MaxMessageBytes: 1024}
	churn := mustQueue(t, s, "churn", pol)
	work := mustQueue(t, s, "work", pol)
	churnTo(t, s, churn, 4)

	// Retired files are not kept as spares (each is removed), and segment
	// 1's removal is refused for good.
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, Match: func(n string) bool { return strings.HasPrefix(filepath.Base(n), "spare-") }})
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, Match: func(n string) bool { return filepath.Base(n) == "0000000001.seg" }, Err: syscall.EACCES})
	s.maintenanceRound()
	warned := logs.at(slog.LevelWarn, "")
	require.Len(t, warned, 1, "the first failure is logged")
	st := s.Stats()
	require.Zero(t, st.BytesReclaimed, "the segment that failed first holds every later one on disk")
	require.Contains(t, st.ReclaimFailing, syscall.EACCES.Error())
	stuck := st.UnremovedBytes
	require.Positive(t, stuck, "the segment files out of the log, on disk still")

	// More segments become removable behind the one that stays, and a
	// backlog of messages is published for the rounds to lease.
	churnTo(t, s, churn, s.log.Stats().LastSegment+2)
	_, err = work.PublishBatch(ctx, make([][]byte, 100))
	require.NoError(t, err)

	// Rounds a second apart, as the maintenance goroutine runs them,
	// each after a lease that the log wrote and did not sync.
	const rounds = 100
	removes := ffs.Count(vfs.OpRemove)
	syncingRounds := 0
	for range rounds {
		tick(time.Second)
		ds, err := work.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		syncs, checkpoints := s.log.Stats().Syncs, s.Stats().Checkpoints
		s.maintenanceRound()
		if s.log.Stats().Syncs > syncs && s.Stats().Checkpoints == checkpoints {
			syncingRounds++
		}
	}
	require.NoError(t, s.Err())
	attempts := ffs.Count(vfs.OpRemove) - removes
	t.Logf("%d rounds: %d removal attempts, %d rounds that synced the log without a checkpoint, %d WARN records", rounds, attempts, syncingRounds, len(logs.at(slog.LevelWarn, "")))
	// Tried again after 2, 4, 8, 16, 32 and 60 seconds: 6 attempts in
	// 100 seconds.
	require.LessOrEqual(t, attempts, int64(8), "removal attempts in %d rounds of a second", rounds)
	require.Positive(t, attempts, "the removal is still tried now and then")
	require.LessOrEqual(t, syncingRounds, 8, "rounds that synced the log for a removal that fails")
	require.Len(t, logs.at(slog.LevelWarn, ""), 1, "a failure that goes on is not logged again within %d seconds", rounds)
	require.Zero(t, s.Stats().BytesReclaimed, "no space was freed")

	// An hour later, a round a minute: a reminder now and then, saying
	// how many rounds failed and since when.
	for range 60 {
		tick(time.Minute)
		s.maintenanceRound()
	}
	reminders := logs.at(slog.LevelWarn, "still")
	require.NotEmpty(t, reminders, "an hour of failures brings a reminder")
	require.LessOrEqual(t, len(reminders), int(time.Hour/retryRemindEvery), "at most one reminder every %v", retryRemindEvery)
	last := reminders[len(reminders)-1]
	failed, ok := attr(last, "failed_attempts")
	require.True(t, ok, "the reminder says how many rounds failed: %v", last)
	require.Greater(t, failed.Int64(), int64(60), "rounds failed by the last reminder")
	since, ok := attr(last, "since")
	require.True(t, ok, "the reminder says since when: %v", last)
	require.Equal(t, time.Unix(1_700_000_000, 0).UTC(), since.Time().UTC(), "the first failure's instant, on the broker's clock")
	require.Zero(t, s.Stats().BytesReclaimed, "no space was freed")

	// The file system lets the file go: the next retry due removes it,
	// and every segment held behind it, and says so once.
	ffs.Clear()
	s.maintenanceRound()
	require.Zero(t, s.Stats().BytesReclaimed, "the retry is not due yet")
	tick(time.Minute)
	s.maintenanceRound()
	st = s.Stats()
	require.Greater(t, st.BytesReclaimed, stuck, "the retry removes the segments left, and those behind them")
	require.Zero(t, st.UnremovedBytes)
	require.Empty(t, st.ReclaimFailing)
	require.Len(t, logs.at(slog.LevelInfo, "again"), 1, "one INFO says reclamation works again")
	for range 3 {
		tick(time.Second)
		s.maintenanceRound()
	}
	require.Len(t, logs.at(slog.LevelInfo, "again"), 1, "said once")
	require.Len(t, logs.at(slog.LevelWarn, ""), 1+len(reminders), "no WARN once it works")
}

// A first failure of reclamation met while the broker's clock cannot be
// read (a reading outside the instants a broker records) has no instant:
// the schedule took the zero one, so the reminders and the INFO said the
// failure went on since 1970, and the first round with a clock again,
// ten minutes past the zero instant, reminded at once. The failure's
// start is now left out of the records rather than made up, and the
// schedule starts from the first attempt that could read the clock.
func TestAReclaimFailureMetWithoutAClockSaysNothingFalseOfWhenItBegan(t *testing.T) {
	var clock atomic.Int64
	start := time.Unix(1_700_000_000, 0)
	clock.Store(start.UnixNano())
	var unreadable atomic.Bool
	tick := func(d time.Duration) { clock.Add(int64(d)) }
	logs := &logRecords{}
	ffs := vfs.NewFaultFS(vfs.Default)
	opts := Options{
		Now: func() time.Time {
			if unreadable.Load() {
				return time.Time{} // year 1: no instant a broker records
			}
			return time.Unix(0, clock.Load())
		},
		SegmentBytes: MinSegmentBytes,
		FS:           ffs,
		Logger:       slog.New(logs),
	}
	ManualMaintenance(&opts)
	s, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	churn := mustQueue(t, s, "churn", PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 3, MaxMessageBytes: 1024})
	churnTo(t, s, churn, 4)
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, Match: func(n string) bool { return strings.HasPrefix(filepath.Base(n), "spare-") }})
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, Match: func(n string) bool { return filepath.Base(n) == "0000000001.seg" }, Err: syscall.EACCES})

	unreadable.Store(true)
	s.maintenanceRound()
	unreadable.Store(false)
	require.Len(t, logs.at(slog.LevelWarn, ""), 1, "the first failure is logged")
	require.Contains(t, s.Stats().ReclaimFailing, syscall.EACCES.Error())
	churnTo(t, s, churn, s.log.Stats().LastSegment+2) // more to remove behind the file that stays

	for range 100 {
		tick(time.Second)
		s.maintenanceRound()
	}
	require.Len(t, logs.at(slog.LevelWarn, ""), 1, "no reminder within 100 seconds of the first failure")
	for range 60 {
		tick(time.Minute)
		s.maintenanceRound()
	}
	require.NotEmpty(t, logs.at(slog.LevelWarn, "still"), "an hour of failures brings a reminder")
	ffs.Clear()
	tick(time.Minute)
	s.maintenanceRound()
	require.Len(t, logs.at(slog.LevelInfo, "again"), 1)
	for _, r := range append(logs.at(slog.LevelWarn, ""), logs.at(slog.LevelInfo, "again")...) {
		if since, ok := attr(r, "since"); ok {
			require.False(t, since.Time().Before(start), "%q says the failure began at %v, before the broker's clock ever read", r.Message, since)
		}
	}
}

// A segment file left on disk by a removal that failed is retried on the
// schedule even when nothing newer has become removable: a round found
// nothing to remove and took that for success, so the INFO said
// reclamation worked again, and ReclaimFailing was cleared, with the file
// still on disk, in UnremovedBytes, until some later segment became
// removable.
func TestASegmentLeftOnDiskIsNotTakenForReclamationWorkingAgain(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	tick := func(d time.Duration) { clock.Add(int64(d)) }
	logs := &logRecords{}
	ffs := vfs.NewFaultFS(vfs.Default)
	opts := Options{
		Now:          func() time.Time { return time.Unix(0, clock.Load()) },
		SegmentBytes: MinSegmentBytes,
		FS:           ffs,
		Logger:       slog.New(logs),
	}
	ManualMaintenance(&opts)
	s, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	churn := mustQueue(t, s, "churn", PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 3, MaxMessageBytes: 1024})
	churnTo(t, s, churn, 4)
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, Match: func(n string) bool { return strings.HasPrefix(filepath.Base(n), "spare-") }})
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, Match: func(n string) bool { return filepath.Base(n) == "0000000001.seg" }, Err: syscall.EACCES})
	s.maintenanceRound()
	require.Len(t, logs.at(slog.LevelWarn, ""), 1, "the first failure is logged")

	removes := ffs.Count(vfs.OpRemove)
	for range 100 {
		tick(time.Second)
		s.maintenanceRound()
	}
	st := s.Stats()
	require.Empty(t, logs.at(slog.LevelInfo, "again"), "the file is on disk still")
	require.Contains(t, st.ReclaimFailing, syscall.EACCES.Error())
	require.Positive(t, st.UnremovedBytes)
	attempts := ffs.Count(vfs.OpRemove) - removes
	require.Positive(t, attempts, "the file's removal is tried again")
	require.LessOrEqual(t, attempts, int64(8), "on the schedule")

	ffs.Clear()
	tick(time.Minute)
	s.maintenanceRound()
	st = s.Stats()
	require.Zero(t, st.UnremovedBytes)
	require.Positive(t, st.BytesReclaimed)
	require.Empty(t, st.ReclaimFailing)
	require.Len(t, logs.at(slog.LevelInfo, "again"), 1)
}
