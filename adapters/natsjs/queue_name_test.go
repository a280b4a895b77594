package natsjs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/broker"
)

// TestAnInvalidQueueNameIsRefusedAsTheFileStoreRefusesIt: the adapter
// applies the file store's name rule with the file store's error, so that
// a program switching stores sees the same errors.Is: an invalid name is
// QueueMisconfigured, with the same text (but for the package prefix),
// the name clipped to 64 characters so that a huge one does not make a
// huge error.
func TestAnInvalidQueueNameIsRefusedAsTheFileStoreRefusesIt(t *testing.T) {
	st := openBackend(t).Store
	fs, err := broker.Open(t.TempDir(), broker.Options{Sync: broker.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	huge := strings.Repeat("a", 1<<20)
	for _, name := range []string{"", ".", "..", ".x", "a b", "a*", "a>", "a/b", "é", "a\xff", strings.Repeat("a", 65), huge} {
		_, ferr := fs.Queue(name, policy())
		_, nerr := st.Queue(name, policy())
		if !errors.Is(ferr, broker.QueueMisconfigured) {
			t.Fatalf("Queue(%.10q) on the file store: %v, want QueueMisconfigured", name, ferr)
		}
		if !errors.Is(nerr, broker.QueueMisconfigured) {
			t.Errorf("Queue(%.10q): file store %v (QueueMisconfigured); adapter %v (not QueueMisconfigured)", name, ferr, nerr)
			continue
		}
		if want, got := strings.TrimPrefix(ferr.Error(), "broker: "), strings.TrimPrefix(nerr.Error(), "natsjs: "); got != want {
			t.Errorf("Queue(%.10q): adapter says %q, the file store %q", name, got, want)
		}
	}
	_, err = st.Queue(huge, policy())
	if n := len(err.Error()); n > 512 {
		t.Errorf("the refusal of a name of %d bytes is %d bytes long, want the name clipped", len(huge), n)
	}
}
