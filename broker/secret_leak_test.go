package broker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Neither the store's secret nor a payload reaches a log line or an error
// text: through publishes, leases, nacks with classified causes, a
// checkpoint, a backup, damage refused at open (Corrupt) and salvaged,
// and the recovery report.
func TestNoSecretOrPayloadInLogsOrErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	var logs bytes.Buffer
	opts := Options{SegmentBytes: MinSegmentBytes, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	marker := "PAYLOAD-MARKER-7f3a"
	var texts []string
	note := func(err error) {
		if err != nil {
			texts = append(texts, err.Error())
		}
	}
	s, err := Open(dir, opts)
	require.NoError(t, err)
	secret := append([]byte(nil), s.idx.Secret...)
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 2, MaxMessageBytes: 1024})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 40 {
		_, err := q.PublishKeyed(ctx, fmt.Sprint("key-", i), []byte(fmt.Sprintf("%s-%03d-%s", marker, i, strings.Repeat("p", 200))))
		require.NoError(t, err)
	}
	_, err = q.Publish(ctx, []byte(strings.Repeat(marker, 100)))
	note(err) // MessageTooLarge
	ds, err := q.Receive(ctx, 10)
	require.NoError(t, err)
	for _, d := range ds {
		_, err := q.Nack(ctx, d.Lease.Receipt, NewError("BAD_INPUT", 0x2A000001, "input rejected", "private "+string(d.Message.Payload)))
		require.NoError(t, err)
		note(q.Ack(ctx, d.Lease.Receipt)) // LeaseExpired
	}
	note(q.Ack(ctx, ReceiptValue("a caller's receipt")))
	note(q.ReplayDeadLetter(ctx, "a caller's id"))
	note(s.Backup(ctx, filepath.Join(t.TempDir(), "backup")))
	require.NoError(t, s.Close())

	// Damage a record in the middle of the log.
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	damaged := false
	for _, seg := range segs {
		raw, err := os.ReadFile(seg)
		require.NoError(t, err)
		if i := bytes.Index(raw, []byte(marker+"-020")); i >= 0 && !damaged {
			raw[i+30] ^= 0x40
			require.NoError(t, os.WriteFile(seg, raw, 0o600))
			damaged = true
		}
	}
	require.True(t, damaged)
	// Covered by the checkpoint, the damage is found when the record is
	// read; it stops the store, and the next Open refuses the log.
	s, err = Open(dir, opts)
	require.NoError(t, err)
	q, err = s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 2, MaxMessageBytes: 1024})
	require.NoError(t, err)
	for err == nil {
		_, err = q.Receive(ctx, 100)
	}
	require.ErrorIs(t, err, Corrupt)
	note(err)
	note(s.Close())
	_, err = Open(dir, opts)
	require.ErrorIs(t, err, Corrupt)
	note(err)
	opts.Salvage = true
	s, err = Open(dir, opts)
	require.NoError(t, err)
	texts = append(texts, fmt.Sprintf("%+v", s.Recovery()))
	require.NoError(t, s.Close())

	all := logs.String() + strings.Join(texts, "\n")
	require.Contains(t, all, "salvage", "the damage was logged")
	for _, form := range []string{marker, string(secret), hex.EncodeToString(secret), base64.StdEncoding.EncodeToString(secret),
		base64.RawURLEncoding.EncodeToString(secret), fmt.Sprintf("%q", secret), fmt.Sprint(secret)} {
		require.NotContains(t, all, form)
	}
}
