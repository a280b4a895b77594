package broker

import (
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func validPolicy() PolicyValue {
	return PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 5}
}

func TestPolicyValidate(t *testing.T) {
	const ns = time.Nanosecond
	for _, tc := range []struct {
		name  string
		edit  func(*PolicyValue)
		field string // "" means valid
		value string // the value the text must name
	}{
		{"minimal", func(p *PolicyValue) {}, "", ""},
		{"everything set", func(p *PolicyValue) {
			*p = PolicyValue{VisibilityTimeout: time.Minute, RetryDelay: time.Second, MaxRetryDelay: time.Hour,
				MaxDeliveries: 1, MaxMessageBytes: 1, Capacity: 1, DedupWindow: time.Hour}
		}, "", ""},

		{"VisibilityTimeout zero", func(p *PolicyValue) { p.VisibilityTimeout = 0 }, "VisibilityTimeout", "0s"},
		{"VisibilityTimeout negative", func(p *PolicyValue) { p.VisibilityTimeout = -time.Second }, "VisibilityTimeout", "-1s"},
		{"VisibilityTimeout 1ns", func(p *PolicyValue) { p.VisibilityTimeout = ns }, "", ""},
		{"VisibilityTimeout at MaxDeadlineOffset", func(p *PolicyValue) { p.VisibilityTimeout = MaxDeadlineOffset }, "", ""},
		{"VisibilityTimeout past MaxDeadlineOffset", func(p *PolicyValue) { p.VisibilityTimeout = MaxDeadlineOffset + ns }, "VisibilityTimeout", (MaxDeadlineOffset + ns).String()},

		{"RetryDelay negative reads as zero", func(p *PolicyValue) { p.RetryDelay = -time.Hour }, "", ""},
		{"RetryDelay at MaxDeadlineOffset", func(p *PolicyValue) { p.RetryDelay = MaxDeadlineOffset }, "", ""},
		{"RetryDelay past MaxDeadlineOffset", func(p *PolicyValue) { p.RetryDelay = MaxDeadlineOffset + ns }, "RetryDelay", (MaxDeadlineOffset + ns).String()},

		{"MaxRetryDelay negative", func(p *PolicyValue) { p.RetryDelay, p.MaxRetryDelay = time.Second, -time.Second }, "MaxRetryDelay", "-1s"},
		{"MaxRetryDelay at MaxDeadlineOffset", func(p *PolicyValue) { p.RetryDelay, p.MaxRetryDelay = time.Second, MaxDeadlineOffset }, "", ""},
		{"MaxRetryDelay past MaxDeadlineOffset", func(p *PolicyValue) { p.RetryDelay, p.MaxRetryDelay = time.Second, MaxDeadlineOffset+ns }, "MaxRetryDelay", (MaxDeadlineOffset + ns).String()},
		{"MaxRetryDelay with no RetryDelay", func(p *PolicyValue) { p.MaxRetryDelay = time.Minute }, "MaxRetryDelay", "no RetryDelay to grow from"},
		{"MaxRetryDelay with negative RetryDelay", func(p *PolicyValue) { p.RetryDelay, p.MaxRetryDelay = -time.Second, time.Minute }, "MaxRetryDelay", "no RetryDelay to grow from"},
		{"MaxRetryDelay below RetryDelay", func(p *PolicyValue) { p.RetryDelay, p.MaxRetryDelay = time.Minute, time.Minute-ns }, "MaxRetryDelay", "below RetryDelay 1m0s"},
		{"MaxRetryDelay equal to RetryDelay", func(p *PolicyValue) { p.RetryDelay, p.MaxRetryDelay = time.Minute, time.Minute }, "", ""},

		{"MaxDeliveries zero", func(p *PolicyValue) { p.MaxDeliveries = 0 }, "MaxDeliveries", "0"},
		{"MaxDeliveries negative", func(p *PolicyValue) { p.MaxDeliveries = -3 }, "MaxDeliveries", "-3"},
		{"MaxDeliveries one", func(p *PolicyValue) { p.MaxDeliveries = 1 }, "", ""},

		{"MaxMessageBytes zero", func(p *PolicyValue) { p.MaxMessageBytes = 0 }, "", ""},
		{"MaxMessageBytes negative", func(p *PolicyValue) { p.MaxMessageBytes = -1 }, "MaxMessageBytes", "-1"},

		{"Capacity zero", func(p *PolicyValue) { p.Capacity = 0 }, "", ""},
		{"Capacity negative", func(p *PolicyValue) { p.Capacity = -1 }, "Capacity", "-1"},

		{"DedupWindow zero", func(p *PolicyValue) { p.DedupWindow = 0 }, "", ""},
		{"DedupWindow negative", func(p *PolicyValue) { p.DedupWindow = -ns }, "DedupWindow", "-1ns"},
		{"DedupWindow at MaxDeadlineOffset", func(p *PolicyValue) { p.DedupWindow = MaxDeadlineOffset }, "", ""},
		{"DedupWindow past MaxDeadlineOffset", func(p *PolicyValue) { p.DedupWindow = MaxDeadlineOffset + ns }, "DedupWindow", (MaxDeadlineOffset + ns).String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validPolicy()
			tc.edit(&p)
			err := p.Validate()
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, QueueMisconfigured)
			require.Contains(t, err.Error(), tc.field+" ")
			require.Contains(t, err.Error(), tc.value)
		})
	}
}

func TestPolicyValidateReportsEveryField(t *testing.T) {
	err := PolicyValue{MaxMessageBytes: -1, Capacity: -1, DedupWindow: -1}.Validate()
	require.ErrorIs(t, err, QueueMisconfigured)
	joined, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok)
	fields := []string{"VisibilityTimeout", "MaxDeliveries", "MaxMessageBytes", "Capacity", "DedupWindow"}
	require.Len(t, joined.Unwrap(), len(fields))
	for i, e := range joined.Unwrap() {
		require.ErrorIs(t, e, QueueMisconfigured, "each violation wraps QueueMisconfigured")
		require.True(t, strings.HasPrefix(e.Error(), "broker: policy: "+fields[i]+" "), e.Error())
	}
	require.False(t, errors.Is(err, InvalidBatchSize))
}

func TestPolicyDefaults(t *testing.T) {
	p := validPolicy()
	require.Equal(t, DefaultMaxMessageBytes, p.maxMessageBytes())
	require.Equal(t, DefaultDedupWindow, p.dedupWindow())
	p.MaxMessageBytes, p.DedupWindow = 10, time.Minute
	require.Equal(t, 10, p.maxMessageBytes())
	require.Equal(t, time.Minute, p.dedupWindow())
}

// wantRetryDelay is base × 2^(n−1) held at ceiling, computed without
// overflow.
func wantRetryDelay(base, ceiling time.Duration, n int) time.Duration {
	d := new(big.Int).Lsh(big.NewInt(int64(base)), uint(n-1))
	if d.Cmp(big.NewInt(int64(ceiling))) > 0 {
		return ceiling
	}
	return time.Duration(d.Int64())
}

func TestPolicyRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		name            string
		retry, maxRetry time.Duration
	}{
		{"constant", time.Second, 0},
		{"constant zero", 0, 0},
		{"negative reads as zero", -time.Second, 0},
		{"grows to a minute", time.Second, time.Minute},
		{"grows to the largest ceiling", time.Nanosecond, MaxDeadlineOffset},
		{"from the largest delay", MaxDeadlineOffset, MaxDeadlineOffset},
		{"ceiling equals delay", time.Second, time.Second},
		{"odd values", 3 * time.Millisecond, 1000 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validPolicy()
			p.RetryDelay, p.MaxRetryDelay = tc.retry, tc.maxRetry
			require.NoError(t, p.Validate())
			prev := time.Duration(0)
			for n := 1; n <= 70; n++ {
				got := p.retryDelay(n)
				want := max(tc.retry, 0)
				if tc.maxRetry > 0 {
					want = wantRetryDelay(tc.retry, tc.maxRetry, n)
				}
				require.Equal(t, want, got, "n=%d", n)
				require.GreaterOrEqual(t, got, prev, "never shrinks (n=%d)", n)
				if tc.maxRetry > 0 {
					require.LessOrEqual(t, got, tc.maxRetry)
				}
				prev = got
			}
			require.Equal(t, p.retryDelay(1), p.retryDelay(0), "n below 1 reads as 1")
			require.Equal(t, p.retryDelay(1), p.retryDelay(-5))
		})
	}
	p := PolicyValue{RetryDelay: time.Second, MaxRetryDelay: time.Minute}
	require.Equal(t, time.Second, p.retryDelay(1))
	require.Equal(t, 2*time.Second, p.retryDelay(2))
	require.Equal(t, 32*time.Second, p.retryDelay(6))
	require.Equal(t, time.Minute, p.retryDelay(7))
	require.Equal(t, time.Minute, p.retryDelay(1<<30))
}
