package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// storeWithThreeMessages makes a store with queue "a" holding three
// messages, closed, and returns its directory.
func storeWithThreeMessages(t *testing.T, opts Options) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Queue("a", PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Second, MaxMessageBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := q.Publish(context.Background(), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Open rebuilds from the log when the checkpoint is unusable ("one that
// fails its checks"), and fails only on an error reading the store's
// files. A directory where a table file the checkpoint names belongs is
// no file, as a directory in the checkpoint's own place is: the index is
// rebuilt. Open used to fail, for good, with the text of an I/O error
// ("not damage found in them ... open again once they read"), which no
// retry ever satisfied.
func TestADirectoryInATableFilesPlaceIsRebuiltFrom(t *testing.T) {
	opts := Options{Now: func() time.Time { return time.Unix(1_700_000_000, 0) }, SegmentBytes: MinSegmentBytes}
	ManualMaintenance(&opts)
	dir := storeWithThreeMessages(t, opts)
	idx := filepath.Join(dir, "index")
	names, err := os.ReadDir(idx)
	if err != nil {
		t.Fatal(err)
	}
	replaced := ""
	for _, n := range names {
		if strings.HasPrefix(n.Name(), "tbl-") {
			replaced = filepath.Join(idx, n.Name())
			if err := os.Remove(replaced); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(replaced, 0o700); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if replaced == "" {
		t.Fatal("no table file to replace")
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open with a directory in the place of table file %s: want the index rebuilt from the log (as for a directory in the checkpoint's place), got %v", replaced, err)
	}
	defer s.Close()
	q, err := s.Queue("a", PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Second, MaxMessageBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Stats().Ready; got != 3 {
		t.Errorf("after the rebuild: %d ready, want 3", got)
	}
}
