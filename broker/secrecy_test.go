package broker_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// lockedBuffer is a bytes.Buffer safe for the logger's writes and the
// test's reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lockedBuffer) records(t testing.TB) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var r map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		out = append(out, r)
	}
	return out
}

// secretCase is a cause whose Error text holds a marker that must never
// reach the disk, and the Public text (if any) that alone may.
type secretCase struct {
	name   string
	marker string
	cause  func(payload []byte) error
	public string
	logged bool // unclassified: the text must reach Options.Logger
	how    string
}

func secretCases() []secretCase {
	return []secretCase{
		{name: "unclassified", marker: "SECRET-UNCLASSIFIED-1f2e", logged: true, how: "reject",
			cause: func(p []byte) error {
				return fmt.Errorf("decoding %q: %w", p, errors.New("SECRET-UNCLASSIFIED-1f2e"))
			}},
		{name: "unclassified nack", marker: "SECRET-NACK-RETRY-5c6d", logged: true, how: "nack",
			cause: func(p []byte) error { return fmt.Errorf("SECRET-NACK-RETRY-5c6d %s", p) }},
		{name: "unclassified last nack", marker: "SECRET-LAST-NACK-8a9b", logged: true, how: "nack-dead",
			cause: func(p []byte) error { return fmt.Errorf("SECRET-LAST-NACK-8a9b %s", p) }},
		{name: "private detail", marker: "SECRET-PRIVATE-3c4d", public: "the card was declined", how: "reject",
			cause: func(p []byte) error {
				return broker.NewError("CARD_DECLINED", 0x05020001, "the card was declined", "SECRET-PRIVATE-3c4d "+string(p))
			}},
		{name: "private detail on last nack", marker: "SECRET-PRIVATE-NACK-7e7e", public: "try later", how: "nack-dead",
			cause: func(p []byte) error {
				return broker.NewError("DOWNSTREAM", 9, "try later", "SECRET-PRIVATE-NACK-7e7e")
			}},
		{name: "DoNotRetry unclassified", marker: "SECRET-DNR-5e6f", logged: true, how: "reject",
			cause: func(p []byte) error { return broker.DoNotRetry(fmt.Errorf("SECRET-DNR-5e6f %s", p)) }},
		{name: "DoNotRetry classified", marker: "SECRET-DNR-PRIVATE-7a8b", public: "bad input", how: "reject",
			cause: func(p []byte) error {
				return broker.DoNotRetry(broker.NewError("BAD_INPUT", 1, "bad input", "SECRET-DNR-PRIVATE-7a8b"))
			}},
		{name: "classified wrapping a secret", marker: "SECRET-WRAPPED-9c0d", public: "io failed", how: "reject",
			cause: func(p []byte) error {
				return broker.NewError("IO", 2, "io failed", "").Wrap(errors.New("SECRET-WRAPPED-9c0d"))
			}},
		{name: "code only", marker: "SECRET-CODE-ONLY-1a1a", logged: true, how: "reject",
			cause: func(p []byte) error { return codeOnly{code: 3, text: "SECRET-CODE-ONLY-1a1a"} }},
		{name: "public only", marker: "SECRET-PUBLIC-ONLY-2b2b", public: "shown to all", logged: true, how: "reject",
			cause: func(p []byte) error { return publicOnly{public: "shown to all", text: "SECRET-PUBLIC-ONLY-2b2b"} }},
		{name: "user type", marker: "SECRET-USER-PRIVATE-3d3d", public: "user public", how: "reject",
			cause: func(p []byte) error {
				return userClassified{reason: "USER", public: "user public", private: "SECRET-USER-PRIVATE-3d3d"}
			}},
	}
}

// TestCausesNeverReachDisk: only a cause's Reason, Code and Public text are
// persisted; the Error text of any cause (an unclassified one may hold
// payload bytes) and a private detail never are.
func TestCausesNeverReachDisk(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, func(o *broker.Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2; p.RetryDelay = 0 }))
	const payloadMarker = "PAYLOAD-MARKER-c0ffee"

	cases := secretCases()
	idOf := map[string]string{}
	for _, c := range cases {
		payload := []byte(payloadMarker + " for " + c.name)
		m := mustPublish(t, q, string(payload))
		idOf[c.name] = m.ID
		d := mustReceiveOne(t, q)
		require.Equal(t, m.ID, d.Message.ID)
		cause := c.cause(d.Message.Payload)
		switch c.how {
		case "reject":
			require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, cause))
		case "nack":
			require.False(t, mustNack(t, q, d.Lease.Receipt, cause).DeadLettered)
			require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
		case "nack-dead":
			mustNack(t, q, d.Lease.Receipt, nil)
			require.True(t, mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, cause).DeadLettered)
		}
	}

	dead := map[string]broker.DeadLetterValue{}
	for _, dl := range mustDeadLetters(t, q) {
		dead[dl.Message.ID] = dl
	}
	for _, c := range cases {
		if c.how == "nack" {
			continue
		}
		dl, ok := dead[idOf[c.name]]
		require.True(t, ok, c.name)
		require.Equal(t, c.public, dl.Cause, "%s: the dead letter's Cause is only the Public text", c.name)
		require.NotContains(t, dl.Cause, payloadMarker, c.name)
		require.NotContains(t, dl.Reason, c.marker, c.name)
	}

	scan := func(when string) {
		for _, c := range cases {
			requireNotOnDisk(t, e.dir, c.marker, c.name+" ("+when+")")
		}
	}
	scan("store open")
	e.reopen()
	q = e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2; p.RetryDelay = 0 }))
	for _, dl := range mustDeadLetters(t, q) {
		dl.Message.Payload = nil
		require.NotContains(t, fmt.Sprint(dl), "SECRET", "nothing secret comes back after a restart")
	}
	e.close()
	scan("store closed")
	requireOnDisk(t, e.dir, payloadMarker) // the scan does look at the records
	requireOnDisk(t, e.dir, "the card was declined")

	// The text of every unclassified cause reached the logger, joined to
	// its message by ID; that of a classified one, whose reason, code and
	// public text were recorded, did not (its private detail is the
	// handler's to log).
	recs := logs.records(t)
	for _, c := range cases {
		if !c.logged {
			for _, r := range recs {
				text, _ := r["err"].(string)
				require.NotContains(t, text, c.marker, "%s: a classified cause's text is not logged", c.name)
			}
			continue
		}
		found := false
		for _, r := range recs {
			if text, _ := r["err"].(string); strings.Contains(text, c.marker) {
				require.Equal(t, idOf[c.name], r["message"], "%s: the log record carries the message ID", c.name)
				found = true
			}
		}
		require.True(t, found, "%s: the unclassified text reaches Options.Logger; got %v", c.name, recs)
	}
}

// requireNotOnDisk scans every file under dir, raw bytes, for marker.
func requireNotOnDisk(t testing.TB, dir, marker, what string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		if bytes.Contains(b, []byte(marker)) {
			t.Fatalf("%q found in %s at byte %d: %s", marker, path, bytes.Index(b, []byte(marker)), what)
		}
		return nil
	}))
}

func requireOnDisk(t testing.TB, dir, marker string) {
	t.Helper()
	found := false
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if !d.IsDir() {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			found = found || bytes.Contains(b, []byte(marker))
		}
		return nil
	}))
	require.True(t, found, "%q should be on disk", marker)
}
