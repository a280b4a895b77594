package broker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// linkDotDot makes base/a/b, a link base/link to it, and returns
// base and the path base/link/../store, which the kernel resolves to
// base/a/store (a ".." after a link climbs out of the link's target), not
// to base/store, which is what cleaning the text gives.
func linkDotDot(t *testing.T) (base, dir string) {
	t.Helper()
	base = t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "a", "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "a", "b"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	return base, filepath.Join(base, "link") + string(filepath.Separator) + ".." + string(filepath.Separator) + "store"
}

func storeAtWith(t *testing.T, dir, payload string) {
	t.Helper()
	s, err := broker.Open(dir, broker.Options{SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Publish(context.Background(), []byte(payload)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// Open of a directory named through a symbolic link and ".." opens the
// directory that name names (the one os.Stat, os.MkdirAll and every other
// program take it for), as Backup does since it resolves its dir. Open
// creates (or finds) that directory with the raw path, but builds every
// file name with filepath.Join, which cleans the text: the LOCK, the
// segments and index/ are looked for in another directory, so the store
// opened is another store than the one the path names.
func TestOpenThroughALinkAndDotDotOpensTheDirectoryThePathNames(t *testing.T) {
	base, dir := linkDotDot(t)
	storeAtWith(t, filepath.Join(base, "a", "store"), "the store the path names")
	storeAtWith(t, filepath.Join(base, "store"), "another store")
	if fi, err := os.Stat(dir); err != nil || !func() bool {
		want, _ := os.Stat(filepath.Join(base, "a", "store"))
		return os.SameFile(fi, want)
	}() {
		t.Fatalf("setup: %s is not base/a/store to the kernel (%v)", dir, err)
	}

	s, err := broker.Open(dir, broker.Options{SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	defer s.Close()
	q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || string(ds[0].Message.Payload) != "the store the path names" {
		var got []string
		for _, d := range ds {
			got = append(got, string(d.Message.Payload))
		}
		t.Fatalf("Open(%s), a path the kernel resolves to base/a/store, opened a store holding %q; want the message of base/a/store, %q (Open made or found the directory by the raw path but named its files by the cleaned one, base/store)",
			dir, got, "the store the path names")
	}
}

// A second Open of the directory an open store holds fails with Locked,
// whatever name reaches it: here the same directory named through a link
// and "..". It fails instead with "no such file or directory" for
// base/store/LOCK, and has made nothing it needed to (the directory it
// asked for exists).
func TestASecondOpenThroughALinkAndDotDotIsLocked(t *testing.T) {
	base, dir := linkDotDot(t)
	first, err := broker.Open(filepath.Join(base, "a", "store"), broker.Options{SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()

	s, err := broker.Open(dir, broker.Options{SegmentBytes: 1 << 20})
	if s != nil {
		s.Close()
	}
	if !errors.Is(err, broker.Locked) {
		t.Fatalf("second Open(%s) of base/a/store, which a store holds: got %v, want an error wrapping Locked", dir, err)
	}
}

// TestOpenOfAPathWithANulByteSaysSo: no file name holds a NUL byte; Open
// says so, with QueueMisconfigured, and makes nothing.
func TestOpenOfAPathWithANulByteSaysSo(t *testing.T) {
	base := t.TempDir()
	_, err := broker.Open(filepath.Join(base, "a\x00b"), broker.Options{})
	if !errors.Is(err, broker.QueueMisconfigured) || !strings.Contains(err.Error(), "NUL byte") {
		t.Fatalf("Open of a path with a NUL byte: %v, want QueueMisconfigured naming the NUL byte", err)
	}
	if names, _ := os.ReadDir(base); len(names) != 0 {
		t.Errorf("Open made %v", names)
	}
}
