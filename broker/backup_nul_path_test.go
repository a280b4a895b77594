package broker_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/broker"
)

// A Backup to a path holding a NUL byte is refused as Open refuses such a
// path: QueueMisconfigured, saying where the NUL is, and without the raw
// byte in the text (it would cut short a log line written through a C
// string).
func TestABackupToAPathHoldingANulByteIsRefusedSayingSo(t *testing.T) {
	e := newEnv(t)
	e.queue("jobs", policy())
	err := e.s.Backup(ctx(t), filepath.Join(t.TempDir(), "copy\x00x"))
	if err == nil {
		t.Fatal("Backup to a path with a NUL byte succeeded")
	}
	if !errors.Is(err, broker.QueueMisconfigured) || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("Backup to a path with a NUL byte: %q, want QueueMisconfigured naming the NUL byte, as Open's", err)
	}
	if strings.ContainsRune(err.Error(), 0) {
		t.Errorf("Backup to a path with a NUL byte: the error text holds the raw NUL byte: %q", err)
	}
}
