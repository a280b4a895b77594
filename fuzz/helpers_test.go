package fuzz

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fastDir returns a fresh directory on tmpfs when the machine has one (the
// targets fdatasync a great deal and check logic, not the disk), else under
// t.TempDir. It is removed when t ends.
func fastDir(t testing.TB) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "walbroker-fuzz-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// tolerated reports whether WALBROKER_FUZZ_TOLERATE lists the known
// divergence bug.
func tolerated(bug string) bool {
	return slices.Contains(strings.Split(os.Getenv("WALBROKER_FUZZ_TOLERATE"), ","), bug)
}

// corpusFile encodes one input of a fuzz target in the corpus format of
// "go test fuzz v1", as the fuzzing engine writes it.
func corpusFile(vals ...any) []byte {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case byte:
			fmt.Fprintf(&b, "byte(%q)\n", v)
		case int, int64, uint16, uint32, uint64, bool:
			fmt.Fprintf(&b, "%T(%v)\n", v, v)
		default:
			panic(fmt.Sprintf("corpusFile: unsupported type %T", v))
		}
	}
	return []byte(b.String())
}

// seed is one generated input of a fuzz target.
type seed struct {
	name string
	vals []any
}

// writeCorpus replaces the generated seeds of target (files named
// "seed-*") with seeds, leaving every other file (inputs a fuzzing run
// found) alone.
func writeCorpus(t *testing.T, target string, seeds []seed) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	old, err := filepath.Glob(filepath.Join(dir, "seed-*"))
	require.NoError(t, err)
	for _, f := range old {
		require.NoError(t, os.Remove(f))
	}
	names := map[string]bool{}
	for _, s := range seeds {
		require.False(t, names[s.name], "seed %s twice", s.name)
		names[s.name] = true
		require.NoError(t, os.WriteFile(filepath.Join(dir, "seed-"+s.name), corpusFile(s.vals...), 0o644))
	}
	t.Logf("%s: %d seeds", target, len(seeds))
}

// TestWriteSeedCorpus regenerates the seed corpora of every target when
// WALBROKER_FUZZ_WRITE_CORPUS=1; otherwise it checks that the committed
// ones are there.
func TestWriteSeedCorpus(t *testing.T) {
	targets := map[string]func(testing.TB) []seed{
		"FuzzFrameDecode":        frameSeeds,
		"FuzzSegmentScan":        scanSeeds,
		"FuzzCheckpointLoad":     checkpointSeeds,
		"FuzzBrokerDifferential": brokerSeeds,
	}
	write := os.Getenv("WALBROKER_FUZZ_WRITE_CORPUS") == "1"
	for _, target := range slices.Sorted(maps.Keys(targets)) {
		if write {
			writeCorpus(t, target, targets[target](t))
			continue
		}
		files, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "seed-*"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "%s has no generated seeds: run with WALBROKER_FUZZ_WRITE_CORPUS=1", target)
	}
}
