package broker_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// An operator who meets a full disk reads the error, not the README: it
// says that space must be freed before the store is reopened, and it still
// wraps ENOSPC. Another failure (EIO) is not mistaken for one.
func TestAFullDiskSaysToFreeSpaceBeforeReopening(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		says  bool
	}{{syscall.ENOSPC, true}, {syscall.EIO, false}} {
		t.Run(tc.errno.Error(), func(t *testing.T) {
			ffs := vfs.NewFaultFS(vfs.Default)
			s, err := broker.Open(t.TempDir(), broker.Options{SegmentBytes: 4 << 20, FS: ffs})
			require.NoError(t, err)
			defer s.Close()
			q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
			require.NoError(t, err)
			ffs.Inject(vfs.Rule{Op: vfs.OpWrite, Err: tc.errno})
			_, err = q.Publish(context.Background(), []byte("x"))
			require.ErrorIs(t, err, tc.errno)
			require.Contains(t, err.Error(), "must be reopened")
			require.Equal(t, tc.says, strings.Contains(err.Error(), "free space"), "%v", err)
			require.Equal(t, tc.says, strings.Contains(s.Err().Error(), "free space"), "%v", s.Err())
		})
	}
}
