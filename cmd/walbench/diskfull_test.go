package main

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/vfs"
)

// TestAFullDiskEndsTheTimedWorkloadsCleanly: publish, wal, mixed and
// sweep are bounded by -time, not by the free space (docs/DESIGN.md,
// "walbench"), so a disk that fills up in the middle of one must end the
// run as any failed write does: exit 1, stderr naming the workload and
// the full disk, the temporary directory removed, and the rows measured
// before it kept, in the tables and in the JSON, with the failure. Each
// command here runs two workloads; the disk fills (every write,
// allocation and truncation refused with ENOSPC, writing nothing) as the
// second one's window opens.
func TestAFullDiskEndsTheTimedWorkloadsCleanly(t *testing.T) {
	common := []string{"-time", "100ms", "-warmup", "0", "-segment-bytes", "64KiB"}
	for _, tc := range []struct {
		command string
		args    []string
		second  string // a part of the second workload's name
	}{
		{"publish", []string{"-probe-time", "0", "-producers", "1,3", "-size", "100"}, "3 producers"},
		{"wal", []string{"-probe-time", "0", "-producers", "1,3", "-segments", "new", "-size", "100"}, "3 appenders"},
		{"mixed", []string{"-rate", "500,1000", "-producers", "1", "-consumers", "1", "-batch", "16", "-size", "100", "-sample", "50ms"}, "1000 msgs/s"},
		{"sweep", []string{"-probe-time", "0", "-producers", "1,3", "-size", "100", "-sync", "all", "-consumers", "1", "-batch", "16"}, "sweep, 3 producers, 100 B, 64 KiB segments"},
	} {
		t.Run(tc.command, func(t *testing.T) {
			fs := vfs.NewFaultFS(vfs.Default)
			var windows atomic.Int32
			e := &env{fs: fs, hangTimeout: 10 * time.Second, onWindow: func(string) {
				if windows.Add(1) == 2 {
					for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpAllocate, vfs.OpTruncate} {
						fs.Inject(vfs.Rule{Op: op, Err: syscall.ENOSPC})
					}
				}
			}}
			dir, jsonFile := benchDir(t), jsonPath(t)
			args := append(append([]string{tc.command, "-dir", dir, "-json", jsonFile}, common...), tc.args...)
			res := runWith(t, context.Background(), e, args...)
			if windows.Load() < 2 {
				t.Fatalf("%d windows opened; want the second, where the disk fills", windows.Load())
			}
			if res.code != exitError {
				t.Errorf("exit %d; want %d: the full disk ended the run", res.code, exitError)
			}
			if !strings.Contains(res.stderr, syscall.ENOSPC.Error()) || !strings.Contains(res.stderr, tc.second) {
				t.Errorf("stderr does not name the workload (%q) and the full disk (%q):\n%s", tc.second, syscall.ENOSPC.Error(), res.stderr)
			}
			assertDirEmpty(t, dir)
			rep := assertTablesFromJSON(t, res.stdout, jsonFile)
			if len(rep.Rows) != 1 || strings.Contains(rep.Rows[0].Workload, tc.second) || rep.Rows[0].Ops == 0 || rep.Rows[0].Interrupted {
				t.Errorf("rows %+v; want the first workload's, whole", rep.Rows)
			}
			if !strings.Contains(rep.Error, syscall.ENOSPC.Error()) {
				t.Errorf("the JSON's error is %q; want the full disk", rep.Error)
			}
		})
	}
}
