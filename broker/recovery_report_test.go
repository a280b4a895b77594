package broker_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// A RecoveryReport prints as one line that says what Open found and did,
// not as a struct of unnamed values; lost messages are counted by queue
// (by name, sorted) and a long list of them is shortened, the rest left to
// LostMessages.
func TestARecoveryReportSaysWhatOpenDid(t *testing.T) {
	require.Equal(t, "replayed 0 records; clean", broker.RecoveryReport{}.String())
	require.Equal(t, "replayed 12 records; index rebuilt from the whole log; torn tail cut off (never fdatasynced: no call that waited for the device had it)",
		broker.RecoveryReport{Replayed: 12, IndexRebuilt: true, TornTail: true}.String())
	require.Equal(t, "new store", broker.RecoveryReport{Created: true, IndexRebuilt: true}.String())
	require.Equal(t, "new store; torn tail cut off (never fdatasynced: no call that waited for the device had it)",
		broker.RecoveryReport{Created: true, IndexRebuilt: true, TornTail: true}.String())

	var lost []string
	for i := range 12 {
		lost = append(lost, fmt.Sprintf("m%d", i))
	}
	r := broker.RecoveryReport{Replayed: 5, SalvagedSpans: 2, SalvageCopies: []string{"/s/salvage/a", "/s/salvage/b"}, LostMessages: lost,
		LostByQueue: map[string][]string{"mail": {"m1", "m7"}, "jobs": {"m0", "m2", "m3", "m4", "m5", "m6", "m8", "m9", "m10", "m11"}}}
	require.Equal(t, "replayed 5 records; salvage skipped 2 damaged spans, copies in /s/salvage/a, /s/salvage/b; "+
		"12 messages lost (10 in jobs, 2 in mail): m0, m1, m2, m3, m4, m5, m6, m7, m8, m9 and 2 more", r.String())
	require.Equal(t, r.String(), fmt.Sprint(r), "fmt prints it by String")
	require.Equal(t, "replayed 5 records; salvage skipped 1 damaged span, copies in /s/salvage/a; 1 message lost (1 in queue #2): m0",
		broker.RecoveryReport{Replayed: 5, SalvagedSpans: 1, SalvageCopies: []string{"/s/salvage/a"}, LostMessages: lost[:1],
			LostByQueue: map[string][]string{"queue #2": {"m0"}}}.String())
	require.Equal(t, "replayed 0 records; 2 messages lost: m0, m1",
		broker.RecoveryReport{LostMessages: lost[:2]}.String(), "a report without LostByQueue still lists the IDs")

	e := newEnv(t)
	mustPublish(t, e.queue("jobs", policy()), "x")
	e.reopen()
	rep := e.s.Recovery()
	require.Equal(t, fmt.Sprintf("replayed %d records; clean", rep.Replayed), rep.String(), "a store closed cleanly reopens clean")
}
