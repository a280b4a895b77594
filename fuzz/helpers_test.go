package fuzz

import (
	"bytes"
	"errors"
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
		case corpusInt:
			fmt.Fprintf(&b, "int(%d)\n", int64(v))
		case int, int64, uint16, uint32, uint64, bool:
			fmt.Fprintf(&b, "%T(%v)\n", v, v)
		default:
			panic(fmt.Sprintf("corpusFile: unsupported type %T", v))
		}
	}
	return []byte(b.String())
}

// corpusInt is a seed's value of an int argument, written as "int(...)".
// It holds 64 bits on every build, so that the seeds a 32-bit build
// generates are the committed ones, which a 64-bit build wrote: the fuzzing
// engine reads such a value on a 32-bit build wrapped to 32 bits.
type corpusInt int64

// seed is one generated input of a fuzz target.
type seed struct {
	name string
	vals []any
}

// generated returns the files of seeds, by name ("seed-" and the seed's).
func generated(t *testing.T, seeds []seed) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, s := range seeds {
		name := "seed-" + s.name
		require.NotContains(t, files, name, "seed %s twice", s.name)
		files[name] = corpusFile(s.vals...)
	}
	return files
}

// writeCorpus replaces the generated seeds of target (files named
// "seed-*") with seeds, leaving every other file (inputs a fuzzing run
// found) alone.
func writeCorpus(t *testing.T, target string, seeds []seed) {
	t.Helper()
	files := generated(t, seeds)
	dir := filepath.Join("testdata", "fuzz", target)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	old, err := filepath.Glob(filepath.Join(dir, "seed-*"))
	require.NoError(t, err)
	for _, f := range old {
		require.NoError(t, os.Remove(f))
	}
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	t.Logf("%s: %d seeds", target, len(files))
}

// checkCorpus lists how the committed seeds of target (files named
// "seed-*") differ from seeds: each file missing, differing or not
// generated.
func checkCorpus(t *testing.T, target string, seeds []seed) []string {
	t.Helper()
	want := generated(t, seeds)
	dir := filepath.Join("testdata", "fuzz", target)
	have, err := filepath.Glob(filepath.Join(dir, "seed-*"))
	require.NoError(t, err)
	var wrong []string
	for _, f := range have {
		if _, ok := want[filepath.Base(f)]; !ok {
			wrong = append(wrong, filepath.Base(f)+" is not generated")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		got, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case errors.Is(err, os.ErrNotExist):
			wrong = append(wrong, name+" is missing")
		case err != nil:
			t.Fatalf("%s: %v", target, err)
		case !bytes.Equal(got, want[name]):
			wrong = append(wrong, name+" differs")
		}
	}
	return wrong
}

// TestWriteSeedCorpus regenerates the seed corpora of every target when
// WALBROKER_FUZZ_WRITE_CORPUS=1. Otherwise it checks that the committed
// seeds are exactly the ones the generators write, byte for byte: a change
// to what a generator writes (or to the format it builds on) is committed
// with the seeds it gives. Every generator is deterministic for this.
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
		wrong := checkCorpus(t, target, targets[target](t))
		require.Empty(t, wrong, "%s: the committed seeds are not the generated ones: run with WALBROKER_FUZZ_WRITE_CORPUS=1", target)
	}
}
