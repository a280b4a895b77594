package broker_test

import (
	"errors"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// An Options field outside what Options documents is refused by Open with
// QueueMisconfigured, naming the field and its value, before the store's
// directory is touched.
func TestOptionsOutsideTheirBoundsAreRefusedWithQueueMisconfigured(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  broker.Options
		field string
		value string
	}{
		{"an unknown sync mode", broker.Options{Sync: broker.SyncNone + 1}, "Options.Sync", "3"},
		{"a negative sync interval", broker.Options{SyncInterval: -time.Millisecond}, "Options.SyncInterval", "-1ms"},
		{"segments below the least", broker.Options{SegmentBytes: broker.MinSegmentBytes - 1}, "Options.SegmentBytes", "16383"},
		{"segments of the least a log takes", broker.Options{SegmentBytes: 1 << 10}, "Options.SegmentBytes", "1024"},
		{"segments above the most", broker.Options{SegmentBytes: wal.MaxSegmentBytes + 1}, "Options.SegmentBytes", "1073741825"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			s, err := broker.Open(dir, tc.opts)
			if s != nil {
				s.Close()
			}
			require.ErrorIs(t, err, broker.QueueMisconfigured)
			require.ErrorContains(t, err, tc.field+" "+tc.value)
			require.NoDirExists(t, dir, "nothing was made")
		})
	}
}

// An empty directory path is refused by Open, and by Backup, with
// QueueMisconfigured, as every other argument outside its bounds is.
func TestAnEmptyDirectoryPathIsRefusedWithQueueMisconfigured(t *testing.T) {
	_, err := broker.Open("", broker.Options{})
	require.ErrorIs(t, err, broker.QueueMisconfigured)
	require.ErrorContains(t, err, "the directory path is empty")

	s, err := broker.Open(t.TempDir(), broker.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	err = s.Backup(t.Context(), "")
	require.ErrorIs(t, err, broker.QueueMisconfigured)
	require.ErrorContains(t, err, "the directory path is empty")
}

// The bounds Options documents are inclusive: segments of exactly
// MinSegmentBytes or of exactly the most a log takes are not refused. (The
// largest is only taken as far as making the directory, which fails here:
// two segments of a gigabyte are not made for a test.)
func TestOptionsAtTheirBoundsAreAccepted(t *testing.T) {
	s, err := broker.Open(t.TempDir(), broker.Options{SegmentBytes: broker.MinSegmentBytes})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	refused := errors.New("no directory for this test")
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpMkdirAll, Err: refused})
	s, err = broker.Open(filepath.Join(t.TempDir(), "store"), broker.Options{FS: ffs, SegmentBytes: wal.MaxSegmentBytes})
	if s != nil {
		s.Close()
	}
	require.ErrorIs(t, err, refused, "the options were accepted, and the open went on to make the directory")
	require.NotErrorIs(t, err, broker.QueueMisconfigured)
}

// A queue's MaxMessageBytes may be as large as one log segment holds, and
// not one byte larger: Store.Queue refuses that with QueueMisconfigured,
// naming the most a segment holds, which Options.MaxMessageBytes gives.
func TestAMaxMessageBytesUpToWhatASegmentHoldsIsAccepted(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	_, err := e.s.Queue("huge", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = broker.MinSegmentBytes }))
	require.ErrorIs(t, err, broker.QueueMisconfigured)
	m := regexp.MustCompile(`what one log segment holds \((\d+);`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, err.Error())
	most, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	require.Positive(t, most)
	require.Equal(t, most, e.opts.MaxMessageBytes(), "Options.MaxMessageBytes says it before Open")
	require.Greater(t, broker.Options{}.MaxMessageBytes(), broker.DefaultMaxMessageBytes, "the default segments hold the default largest message")

	_, err = e.s.Queue("over", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = most + 1 }))
	require.ErrorIs(t, err, broker.QueueMisconfigured)
	require.ErrorContains(t, err, strconv.Itoa(most+1))
	q := e.queue("fits", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = most }))
	_, err = q.Publish(ctx(t), make([]byte, most))
	require.NoError(t, err)
	require.Equal(t, most, len(mustReceiveOne(t, q).Message.Payload))
}

// A nil pointer of an FS type in Options.FS is a bad option, refused with
// an error naming the field: a nil FS means the real one, but a nil
// *FaultFS in the interface is not nil, and its first call would panic.
func TestOpenWithANilPointerAsItsFSRefuses(t *testing.T) {
	for name, fsys := range map[string]vfs.FS{"*vfs.FaultFS": (*vfs.FaultFS)(nil), "*vfs.CrashFS": (*vfs.CrashFS)(nil)} {
		t.Run(name, func(t *testing.T) {
			var s *broker.Store
			var err error
			require.NotPanics(t, func() { s, err = broker.Open(t.TempDir(), broker.Options{FS: fsys}) }, "Open with a nil %s as Options.FS", name)
			if s != nil {
				_ = s.Close()
			}
			requireErrorIs(t, err, broker.QueueMisconfigured, "Options.FS")
		})
	}
}
