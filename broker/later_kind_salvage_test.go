package broker_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/wal"
)

// laterKind is an event kind this build does not know: the next one a
// later build would add (index/doc.go: "a change needs a new kind").
const laterKind = byte(index.KindSalvaged) + 1

// laterBuildsRecords appends to the closed store in dir what a later
// build that added laterKind would: a record of that kind (its frame
// checksummed like any other), then a publish, in a segment of this
// build's format version. It returns the later record's bytes.
func laterBuildsRecords(t *testing.T, dir string) []byte {
	t.Helper()
	later := []byte{laterKind, 1, 7, 'f', 'u', 't', 'u', 'r', 'e'}
	pub := index.Event{Kind: index.KindPublish, Queue: 1, Seq: 2, Time: t0.UnixNano(), Payload: []byte("published after it")}
	l, err := wal.Open(dir, wal.Options{SegmentBytes: testSegmentBytes})
	require.NoError(t, err)
	_, err = l.Append(later, pub.Append(nil))
	require.NoError(t, err)
	require.NoError(t, l.Close())
	return later
}

// storeFiles is treeContents, each file's bytes given by their SHA-256.
func storeFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := treeContents(t, dir)
	for name, data := range files {
		files[name] = fmt.Sprintf("%x", sha256.Sum256([]byte(data)))
	}
	return files
}

// openEach opens e's store once without Salvage and once with it, closes
// any store an Open returned, and calls check with each Open's error.
func openEach(t *testing.T, e *env, check func(salvage bool, err error)) {
	t.Helper()
	for _, salvage := range []bool{false, true} {
		opts := e.opts
		opts.Salvage = salvage
		s, err := broker.Open(e.dir, opts)
		if s != nil {
			_ = s.Close()
		}
		check(salvage, err)
	}
}

// Salvage leaves a log holding a record of a kind it does not know (and
// every record after it) as it was: it refuses the store and changes no
// file, rather than pad over records it cannot read. So does an Open
// without it. The refusal names the file, the offset and the kind.
func TestSalvageLeavesARecordOfAnUnknownKindAndWhatFollowsItAsTheyWere(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "one")
	e.close()
	later := laterBuildsRecords(t, e.dir)
	before := storeFiles(t, e.dir)

	openEach(t, e, func(salvage bool, err error) {
		require.Error(t, err, "salvage %v", salvage)
		require.ErrorContains(t, err, filepath.Join(e.dir, "0000000001.seg")+" at offset", "salvage %v", salvage)
		require.ErrorContains(t, err, "kind 14, written by a later build", "salvage %v", salvage)
		require.NotContains(t, err.Error(), "Options.Salvage may open", "salvage %v: salvage does not apply", salvage)
		require.Equal(t, before, storeFiles(t, e.dir), "salvage %v: the refused Open changed the store's files", salvage)
	})
	seg, err := os.ReadFile(filepath.Join(e.dir, "0000000001.seg"))
	require.NoError(t, err)
	require.True(t, bytes.Contains(seg, later), "the later build's record is still in the log")
	require.True(t, bytes.Contains(seg, []byte("published after it")), "and the record after it")
	_, err = os.Stat(filepath.Join(e.dir, "salvage"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was copied aside: nothing was repaired")
}

// A store that holds a later build's record and damage before it as well:
// the log's salvage runs before the store reads a record, so Salvage
// repairs the damage as it would in any build (the file copied aside,
// the span listed, the messages it held kept in salvage/lost.json), then
// meets the later kind and refuses the store as unsupported, naming it.
// The later build's record and every intact record stay as they were, and
// so does the list: an Open without Salvage refuses the store (the loss is
// not yet reported), and only an Open with Salvage of a build that reads
// the kind finishes the salvage and reports it (docs/DESIGN.md,
// Recovery). The refusal says so: it used to offer Salvage alone, which
// this build's then refused.
func TestASalvageOfADamagedStoreWithALaterKindRepairsTheDamageKeepsItsListAndRefuses(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, strings.Repeat("A", 300))
	b := strings.Repeat("B", 300)
	mustPublish(t, q, b)
	e.close()
	later := laterBuildsRecords(t, e.dir)
	path := filepath.Join(e.dir, "0000000001.seg")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	i := bytes.Index(raw, []byte(b))
	require.Positive(t, i)
	raw[i+150] ^= 0x40 // B's record fails its checksum
	require.NoError(t, os.WriteFile(path, raw, 0o600))

	for range 2 { // and again: the next Salvage of this build does the same
		opts := e.opts
		opts.Salvage = true
		s, err := broker.Open(e.dir, opts)
		require.Nil(t, s)
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorContains(t, err, "kind 14, written by a later build")
		seg, rerr := os.ReadFile(path)
		require.NoError(t, rerr)
		require.True(t, bytes.Contains(seg, later), "the later build's record is still in the log")
		require.True(t, bytes.Contains(seg, []byte("published after it")), "and the record after it")
		require.False(t, bytes.Contains(seg, []byte(b[:100])), "B's damaged record is padded over")
		for _, name := range []string{"unfinished.json", "lost.json"} {
			_, serr := os.Stat(filepath.Join(e.dir, "salvage", name))
			require.NoError(t, serr, "salvage/%s stays for the build that finishes the salvage", name)
		}
	}
	_, err = broker.Open(e.dir, e.opts)
	require.ErrorIs(t, err, broker.Corrupt)
	require.ErrorIs(t, err, wal.ErrUnfinishedSalvage)
	var ce *wal.CorruptionError
	require.ErrorAs(t, err, &ce)
	// This build's Salvage refuses the store, so the error says first what
	// to do, then that a later build's record is why, and where, and does
	// not offer Salvage alone, not even as the log's advice.
	require.True(t, strings.HasPrefix(err.Error(), "broker: open "+e.dir+": open it with Salvage in a build that reads the record a later build wrote, which this build's Salvage refuses ("), err.Error())
	require.ErrorContains(t, err, "kind 14, written by a later build")
	require.ErrorContains(t, err, "a salvage began repairing the log, from "+path+" at offset ")
	require.ErrorContains(t, err, "and stopped at that record; the spans it repaired are listed in "+filepath.Join(e.dir, "salvage"))
	require.NotContains(t, err.Error(), "open with Salvage to finish")
	require.NotContains(t, err.Error(), "Options.Salvage may open the store")
}

// The note that a salvage met a later build's record (see the test above)
// belongs to the salvage it could not finish: a salvage that finishes no
// earlier one removes it before it begins, as it removes an earlier list
// of lost messages, so that an Open without Salvage does not blame a
// later build for damage found since.
func TestASalvageThatFinishesNoEarlierOneForgetsALaterBuildsNote(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, strings.Repeat("A", 300))
	b := strings.Repeat("B", 300)
	mustPublish(t, q, b)
	e.close()
	note := filepath.Join(e.dir, "salvage", "later-build.txt")
	require.NoError(t, os.MkdirAll(filepath.Dir(note), 0o700))
	require.NoError(t, os.WriteFile(note, []byte("an earlier refusal"), 0o600))
	path := filepath.Join(e.dir, "0000000001.seg")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	i := bytes.Index(raw, []byte(b))
	require.Positive(t, i)
	raw[i+150] ^= 0x40
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	// No checkpoint: every record is read.
	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))

	_, err = broker.Open(e.dir, e.opts)
	require.ErrorIs(t, err, broker.Corrupt)
	require.ErrorContains(t, err, "an earlier refusal", "the note, while it is there, is read")
	opts := e.opts
	opts.Salvage = true
	s, err := broker.Open(e.dir, opts)
	require.NoError(t, err)
	_, err = os.Stat(note)
	require.ErrorIs(t, err, os.ErrNotExist, "removed before the salvage began")
	require.NoError(t, s.Close())
}
