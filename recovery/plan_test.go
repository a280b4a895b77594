package recovery

import "testing"

// TestTheCycleBeforeAnOpenCheckpointHookLeavesRecordsToReplay: a child
// reaches HookOpenCheckpoint only when its Open replays records and so
// writes a checkpoint; a cycle checked in place (InPlace) closes the store
// cleanly, and the next Open replays nothing. One such cycle in three
// made the next one's hook a miss: in a run of 200 cycles the checkpoint
// an Open writes after a crash was killed in about one run in three not
// at all (seen: hit once, missed five times). The plan never checks in
// place the cycle before that hook's.
func TestTheCycleBeforeAnOpenCheckpointHookLeavesRecordsToReplay(t *testing.T) {
	hooked := 0
	for seed := uint64(1); seed <= 50; seed++ {
		for cycle := 1; cycle < 200; cycle++ {
			if PlanCycle(seed, cycle+1).Hook != HookOpenCheckpoint {
				continue
			}
			hooked++
			if PlanCycle(seed, cycle).InPlace {
				t.Fatalf("seed %d: cycle %d is checked in place, and cycle %d, hooked at %s, then opens a cleanly closed store and writes no checkpoint",
					seed, cycle, cycle+1, HookOpenCheckpoint)
			}
		}
	}
	if hooked == 0 {
		t.Fatal("no plan hooked a cycle at", HookOpenCheckpoint)
	}
}

// TestANegativeCycleIsPlannedAsAnyOther: PlanCycle takes any int; a
// negative cycle once indexed the seed's order of hooks below zero and
// panicked. It gets a plan, the same for the same seed, and every hooked
// plan names a hook the harness knows.
func TestANegativeCycleIsPlannedAsAnyOther(t *testing.T) {
	known := map[string]bool{}
	for _, h := range Hooks {
		known[h] = true
	}
	hooked := 0
	for cycle := -1; cycle >= -200; cycle-- {
		p := PlanCycle(7, cycle)
		if p != PlanCycle(7, cycle) {
			t.Fatalf("cycle %d: two plans under one seed differ", cycle)
		}
		if p.Cycle != cycle {
			t.Fatalf("cycle %d: the plan says cycle %d", cycle, p.Cycle)
		}
		if p.Kind == Hooked {
			hooked++
			if !known[p.Hook] {
				t.Fatalf("cycle %d: hooked at %q, no hook of the harness", cycle, p.Hook)
			}
		}
	}
	if hooked == 0 {
		t.Fatal("no negative cycle was hooked")
	}
}
