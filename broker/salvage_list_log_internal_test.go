package broker

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/vfs"
)

// closeMuLogHandler records, for each record it handles, its message and
// whether s.closeMu was free as it ran.
type closeMuLogHandler struct {
	mu      sync.Mutex
	store   *Store
	records []string
	held    []string // the messages logged with closeMu held
}

func (h *closeMuLogHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *closeMuLogHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *closeMuLogHandler) WithGroup(string) slog.Handler            { return h }
func (h *closeMuLogHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Message)
	if s := h.store; s != nil {
		if s.closeMu.TryLock() {
			s.closeMu.Unlock()
		} else {
			h.held = append(h.held, r.Message)
		}
	}
	return nil
}

// Close removes the lists a salvage left once Open has returned its report
// (finishSalvage). When the removal of the list of lost messages failed,
// it was logged with closeMu held: the Logger's handler, the caller's code,
// ran under a lock of the store, which Options.Logger says it never does.
func TestAFailedRemovalOfTheLostListAtCloseIsLoggedOffCloseMu(t *testing.T) {
	dir := t.TempDir()
	pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}
	s, err := Open(dir, Options{manualMaintenance: true})
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Queue("jobs", pol)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []string{strings.Repeat("A", 300), strings.Repeat("B", 300), strings.Repeat("C", 300)} {
		if _, err := q.Publish(ctx, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil { // its checkpoint names B live
		t.Fatal(err)
	}
	// Damage B's publish: a salvage skips it, and names B lost from the
	// checkpoint, keeping the list in salvage/lost.json.
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	damaged := false
	for _, seg := range segs {
		raw, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(raw, bytes.Repeat([]byte("B"), 300)); i >= 0 {
			raw[i+150] ^= 0x40
			if err := os.WriteFile(seg, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			damaged = true
		}
	}
	if !damaged {
		t.Fatal("B's publish is in no segment")
	}

	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, Match: func(n string) bool { return filepath.Base(n) == lostName }})
	h := &closeMuLogHandler{}
	s, err = Open(dir, Options{manualMaintenance: true, Salvage: true, FS: ffs, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	if rec := s.Recovery(); len(rec.LostMessages) != 1 {
		t.Fatalf("the salvage names %v lost, want B alone", rec.LostMessages)
	}
	h.mu.Lock()
	h.store = s
	h.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ffs.Injected(vfs.OpRemove) == 0 {
		t.Fatal("Close did not try to remove the list of lost messages")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	logged := false
	for _, m := range h.records {
		logged = logged || strings.Contains(m, "list of the messages a salvage lost")
	}
	if !logged {
		t.Fatalf("the failed removal of %s was not logged; the log: %q", lostName, h.records)
	}
	if len(h.held) > 0 {
		t.Fatalf("logged with Close's lock held: %q", h.held)
	}
}
