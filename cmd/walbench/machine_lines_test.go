package main

import (
	"strings"
	"testing"
)

// TestMountSourceTakesTheVisibleMount: of two mounts at one point, the
// later hides the earlier, and the device named is the later's; a mount
// point with a space (escaped by the kernel as \040) still matches.
func TestMountSourceTakesTheVisibleMount(t *testing.T) {
	table := strings.Join([]string{
		`22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw`,
		`30 22 8:16 / /data rw,relatime shared:2 - ext4 /dev/vdb rw`,
		`31 30 8:32 / /data rw,relatime shared:3 - xfs /dev/vdc rw`,
		`32 22 8:48 / /my\040disk rw,relatime shared:4 - ext4 /dev/vdd rw`,
	}, "\n")
	for _, c := range []struct{ dir, want string }{
		{"/data/store", "/dev/vdc"},
		{"/data", "/dev/vdc"},
		{"/my disk/store", "/dev/vdd"},
		{"/my/store", "/dev/vda1"},
		{"/database", "/dev/vda1"},
	} {
		if got := mountSourceIn(strings.NewReader(table), c.dir); got != c.want {
			t.Errorf("mountSourceIn(%q) = %q, want %q", c.dir, got, c.want)
		}
	}
}

// TestAFailureOfManyLinesKeepsTheTableWhole: a panic's text carries its
// stack; the machine table and BENCH.md show its first line only, and say
// where the rest is.
func TestAFailureOfManyLinesKeepsTheTableWhole(t *testing.T) {
	got := oneLine("consumer 3: panic: boom\ngoroutine 7 [running]:\nmain.f()")
	if got != `consumer 3: panic: boom (the rest is in the -json report's "error")` {
		t.Errorf("oneLine = %q", got)
	}
	if got := oneLine("sweep: every point skipped"); got != "sweep: every point skipped" {
		t.Errorf("oneLine of one line = %q, want it unchanged", got)
	}
	var b strings.Builder
	printTo(&b, &Report{Error: "consumer 3: panic: boom\ngoroutine 7 [running]:\nmain.f()"})
	if strings.Contains(b.String(), "goroutine 7") {
		t.Errorf("the table holds the stack:\n%s", b.String())
	}
}

// TestMountSourceAMountOverAParentHidesTheChild: a mount at /a/b made
// before a mount over /a is hidden by it (the later /a mount's tree has no
// /a/b mount; the old one stays in mountinfo); the device named is the
// visible one.
func TestMountSourceAMountOverAParentHidesTheChild(t *testing.T) {
	table := strings.Join([]string{
		`22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw`,
		`30 22 8:16 / /a rw,relatime shared:2 - ext4 /dev/vdb rw`,
		`31 30 8:32 / /a/b rw,relatime shared:3 - xfs /dev/vdc rw`,
		`40 30 0:50 / /a rw,relatime shared:4 - tmpfs tmpfs rw`, // mounted over /a after /a/b: hides it
	}, "\n")
	if got := mountSourceIn(strings.NewReader(table), "/a/b/store"); got != "tmpfs" {
		t.Errorf("mountSourceIn(/a/b/store) with /a/b hidden by a later mount over /a = %q, want %q (the mount visible at /a/b/store)", got, "tmpfs")
	}
}
