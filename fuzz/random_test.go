package fuzz

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// randomInput returns the input of n random operations drawn from seed, in
// the first format; with forwardOnly, none sets the clock back.
func randomInput(seed uint64, n int, forwardOnly bool) []byte {
	rng := rand.New(rand.NewPCG(seed, 0xf022))
	return randomOps(rng, n, opTable, forwardOnly)
}

// randomInputV2 is randomInput in the second format: policy changes, and
// SyncPublish if sync is.
func randomInputV2(seed uint64, n int, forwardOnly bool, sync broker.SyncMode) []byte {
	rng := rand.New(rand.NewPCG(seed, 0xf023))
	return append(encodeInput(sync), randomOps(rng, n, opTableV2, forwardOnly)...)
}

// randomInputConsume is randomInputV2 with the Consume operation.
func randomInputConsume(seed uint64, n int, forwardOnly bool, sync broker.SyncMode) []byte {
	rng := rand.New(rand.NewPCG(seed, 0xf024))
	return append(encodeHeader(sync, true), randomOps(rng, n, opTableConsume, forwardOnly)...)
}

// randomInputMore is randomInputV2 with the operations inputMore adds
// (Wake, process crashes, reopens with another policy, Extends past 2262),
// under sync: SyncAll, SyncPublish or SyncNone; with epoch, on a clock
// that starts before the Unix epoch (inputEpoch).
func randomInputMore(seed uint64, n int, forwardOnly bool, sync broker.SyncMode, epoch bool) []byte {
	rng := rand.New(rand.NewPCG(seed, 0xf025))
	header := encodeHeader(sync, false)
	header[1] |= inputMore
	if epoch {
		header[1] |= inputEpoch
	}
	return append(header, randomOps(rng, n, withMore(opTableV2), forwardOnly)...)
}

func randomOps(rng *rand.Rand, n int, table []opKind, forwardOnly bool) []byte {
	b := make([]byte, 3*n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if forwardOnly {
		for i := 0; i < len(b); i += 3 {
			for table[int(b[i])%len(table)] == opBack {
				b[i] = byte(rng.Uint32())
			}
		}
	}
	return b
}

// TestBrokerDifferentialRandom runs random inputs through the broker's
// differential check, so that `go test` explores beyond the corpus.
// WALBROKER_FUZZ_SEED replays a run (every run prints its seed);
// WALBROKER_FUZZ_INPUTS sets how many inputs (default 40, 4 with -short).
// A failing input is printed as a corpus file to add to
// testdata/fuzz/FuzzBrokerDifferential.
func TestBrokerDifferentialRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WALBROKER_FUZZ_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "WALBROKER_FUZZ_SEED")
	}
	inputs := 40
	if testing.Short() {
		inputs = 4
	}
	if s := os.Getenv("WALBROKER_FUZZ_INPUTS"); s != "" {
		var err error
		inputs, err = strconv.Atoi(s)
		require.NoError(t, err, "WALBROKER_FUZZ_INPUTS")
	}
	t.Logf("seed %d, %d inputs; replay with WALBROKER_FUZZ_SEED=%d", seed, inputs, seed)
	for i := range inputs {
		// A quarter of the inputs in the first format; of the second,
		// under each sync mode, as many with the Consume operation as
		// without, and as many with the operations of inputMore (under
		// SyncNone too).
		var data []byte
		switch sync := []broker.SyncMode{broker.SyncAll, broker.SyncPublish}[i/4%2]; i % 4 {
		case 0:
			data = randomInput(seed+uint64(i), maxOps, false)
		case 1:
			data = randomInputV2(seed+uint64(i), maxOps, false, sync)
		case 2:
			sync = []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}[i/4%3]
			data = randomInputMore(seed+uint64(i), maxOps, false, sync, i/4%2 == 1)
		case 3:
			data = randomInputConsume(seed+uint64(i), maxOps, false, sync)
		}
		ok := t.Run(fmt.Sprint(i), func(t *testing.T) { _ = runInput(t, data) })
		if !ok {
			t.Logf("input %d (WALBROKER_FUZZ_SEED=%d) as a corpus file:\n%s", i, seed, corpusFile(data))
			return
		}
	}
}
