package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnUnusableDirOrOutputIsNamedAndLosesNothing: a -dir that is a file,
// lies below one or is missing, and a -json or -cpuprofile that cannot be
// made, fail the run (exit 1) with an error that names the flag and the
// path, before anything is measured; a report an earlier run left at -json
// is kept as it was, and nothing is left beside it.
func TestAnUnusableDirOrOutputIsNamedAndLosesNothing(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := benchDir(t)
	for _, tc := range []struct {
		flag, value string
		want        string // in stderr, beside "-flag value"
	}{
		{"-dir", file, "not a directory"},
		{"-dir", filepath.Join(file, "sub"), "not a directory"},
		{"-dir", filepath.Join(base, "missing"), "no such file or directory"},
		{"-cpuprofile", filepath.Join(base, "missing", "cpu.prof"), "no such file or directory"},
		{"-cpuprofile", filepath.Join(file, "cpu.prof"), "not a directory"},
	} {
		out := filepath.Join(t.TempDir(), "bench.json")
		if err := os.WriteFile(out, []byte("earlier"), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"probe", "-time", "10ms", "-dir", dir, "-json", out, tc.flag, tc.value}
		res := runWith(t, context.Background(), nil, args...)
		if res.code != exitError || res.stdout != "" {
			t.Errorf("%s %s: exit %d, stdout %q; want %d and nothing measured", tc.flag, tc.value, res.code, res.stdout, exitError)
		}
		if named := tc.flag + " " + tc.value; !strings.Contains(res.stderr, named) || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%s %s: stderr %q does not name %q and say %q", tc.flag, tc.value, res.stderr, named, tc.want)
		}
		if got, err := os.ReadFile(out); err != nil || string(got) != "earlier" {
			t.Errorf("%s %s: the earlier -json file reads %q, %v", tc.flag, tc.value, got, err)
		}
		assertDirEmptyBut(t, filepath.Dir(out), "bench.json")
	}
	assertDirEmpty(t, dir)
	if got, err := os.ReadFile(file); err != nil || string(got) != "not a directory" {
		t.Errorf("the file named as -dir reads %q, %v", got, err)
	}

	for _, tc := range []struct{ value, want string }{
		{filepath.Join(base, "missing", "bench.json"), "no such file or directory"},
		{filepath.Join(file, "bench.json"), "not a directory"},
		{base, "is a directory"},
	} {
		res := runWith(t, context.Background(), nil, "probe", "-time", "10ms", "-dir", dir, "-json", tc.value)
		if named := "-json " + tc.value; res.code != exitError || res.stdout != "" || !strings.Contains(res.stderr, named) || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("-json %s: exit %d, stdout %q, stderr %q; want %d, nothing measured, %q and %q", tc.value, res.code, res.stdout, res.stderr, exitError, named, tc.want)
		}
	}
	assertDirEmpty(t, dir)
}

// TestACountTooLargeForAnIntIsSaidToBeTooLarge: a count past the int
// range was refused as "not a positive count", which it is; it is said to
// be too large.
func TestACountTooLargeForAnIntIsSaidToBeTooLarge(t *testing.T) {
	for _, args := range [][]string{
		{"publish", "-producers", "99999999999999999999"},
		{"drain", "-batch", "1,99999999999999999999"},
	} {
		res := runWith(t, context.Background(), nil, args...)
		if res.code != exitUsage || !strings.Contains(res.stderr, `"99999999999999999999" is too large a count`) {
			t.Errorf("walbench %q: exit %d, stderr %q; want %d and the count called too large", args, res.code, res.stderr, exitUsage)
		}
	}
	res := runWith(t, context.Background(), nil, "publish", "-producers", "-99999999999999999999")
	if res.code != exitUsage || !strings.Contains(res.stderr, "is not a positive count") {
		t.Errorf("a negative count: exit %d, stderr %q", res.code, res.stderr)
	}
}
