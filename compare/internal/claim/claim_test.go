package claim

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/walbroker/walbroker/compare"
)

// TestHeapsOrder pushes IDs and expiries in a random order, with
// repeats, and checks that they come out sorted.
func TestHeapsOrder(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	var ids idHeap
	var exp expiryHeap
	var want []uint64
	for range 500 {
		v := r.Uint64N(200)
		ids.push(v)
		exp.push(expiryEntry{expiry: int64(v), id: v})
		want = append(want, v)
	}
	slices.Sort(want)
	for i, w := range want {
		if got := exp[0].expiry; got != int64(w) {
			t.Fatalf("seed %d: expiry %d out is %d, want %d", seed, i, got, w)
		}
		exp.pop()
		if got := ids.pop(); got != w {
			t.Fatalf("seed %d: ID %d out is %d, want %d", seed, i, got, w)
		}
	}
}

// TestTable walks one message through claim, lapse, release and restore.
func TestTable(t *testing.T) {
	now := time.Unix(100, 0)
	tb := New(func() time.Time { return now })
	tb.Ready(3, 1, 2)
	tb.Load(0, now.Add(time.Second)) // leased for one more second
	tb.Load(4, now)                  // its lease ends now: ready

	ids, expiry := tb.Claim(2, time.Minute)
	if !slices.Equal(ids, []uint64{1, 2}) || !expiry.Equal(now.Add(time.Minute)) {
		t.Fatalf("Claim(2) = %v, %v; want [1 2] at +1m", ids, expiry)
	}
	tb.Unclaim(ids[1:], expiry)
	now = now.Add(time.Second) // 0's lease lapses
	if ids, _ := tb.Claim(10, time.Minute); !slices.Equal(ids, []uint64{0, 2, 3, 4}) {
		t.Fatalf("Claim(10) after a lapse = %v, want [0 2 3 4]", ids)
	}
	if _, err := tb.Release([]uint64{1, 9}); !errors.Is(err, compare.ErrNotLeased) {
		t.Fatalf("Release with an unleased ID = %v, want ErrNotLeased", err)
	}
	exps, err := tb.Release([]uint64{1})
	if err != nil {
		t.Fatalf("Release(1) = %v; the failed Release before it must have changed nothing", err)
	}
	if ready, leased := tb.Counts(); ready != 0 || leased != 4 {
		t.Fatalf("Counts = %d ready, %d leased; want 0, 4", ready, leased)
	}
	tb.Restore([]uint64{1}, exps)
	now = expiry
	if ready, leased := tb.Counts(); ready != 1 || leased != 4 {
		t.Fatalf("Counts at 1's expiry = %d ready, %d leased; want 1, 4", ready, leased)
	}
}

// TestClaimExpiryStopsAtLastUnixNano: a lease whose end lies past the last
// instant Unix nanoseconds can name still hides what it claimed, with that
// instant as its expiry, rather than wrapping into the past.
func TestClaimExpiryStopsAtLastUnixNano(t *testing.T) {
	now := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	tb := New(func() time.Time { return now })
	tb.Ready(1)
	ids, expiry := tb.Claim(1, 100*365*24*time.Hour)
	if !slices.Equal(ids, []uint64{1}) || !expiry.Equal(lastExpiry) {
		t.Fatalf("Claim(1) = %v, %v; want [1] at %v", ids, expiry, lastExpiry)
	}
	if ids, _ := tb.Claim(1, time.Minute); len(ids) != 0 {
		t.Errorf("Claim within the lease = %v; want nothing", ids)
	}
	if ready, leased := tb.Counts(); ready != 0 || leased != 1 {
		t.Errorf("Counts = %d ready, %d leased; want 0, 1", ready, leased)
	}
}
