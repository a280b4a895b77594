package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
)

// TestProbeCutInItsFirstPrefillIsNothingMeasured: Ctrl-C while the
// first round's probe writes its 64 MiB file of zeros stops the run before
// any figure was measured (the probe's own "rounds" is 0). doc.go says a
// run that measured nothing leaves the -json file that was there as it
// was, and the run says it was interrupted before anything was measured.
func TestProbeCutInItsFirstPrefillIsNothingMeasured(t *testing.T) {
	const earlier = "PRECIOUS\n"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := &env{onWindow: func(name string) {
		if name == "probe: "+probePrefill {
			cancel()
		}
	}}
	dir, jsonFile := benchDir(t), jsonPath(t)
	if err := os.WriteFile(jsonFile, []byte(earlier), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runWith(t, ctx, e, "publish", "-dir", dir, "-json", jsonFile, "-probe-time", "20ms", "-time", "20ms", "-producers", "1", "-size", "100")
	if res.code != exitInterrupted {
		t.Errorf("exit %d, want %d", res.code, exitInterrupted)
	}
	if b, err := os.ReadFile(jsonFile); err != nil || string(b) != earlier {
		t.Errorf("the earlier -json file was replaced by a report of nothing measured: it holds %d bytes (%v), want it as it was (%q)", len(b), err, earlier)
	}
	if !strings.Contains(res.stderr, "interrupted before anything was measured") {
		t.Errorf("stderr does not say nothing was measured; it says:\n%s", res.stderr)
	}
	if res.stdout != "" {
		t.Errorf("tables printed though nothing was measured:\n%s", res.stdout)
	}
	assertDirEmpty(t, dir)
}

// TestReportRefusesAProbeThatMeasuredNothing: doc.go says walbench
// report refuses a JSON that holds nothing measured. A report whose only
// content is a probe stopped in its prefill (every figure null, "rounds"
// 0: what -json writes after Ctrl-C in the first probe's prefill, see the
// test above) measured nothing, yet report reads it and prints a table of
// dashes.
func TestReportRefusesAProbeThatMeasuredNothing(t *testing.T) {
	cut := Probe{Round: 1, Seconds: 0.01, Interrupted: true, InterruptedIn: probePrefill,
		Ceilings: []Ceiling{{Producers: 1, Size: 100}, {Producers: 0, Size: 100}}}
	sum := summarize([]Probe{cut}, false)
	sum.Rounds = 0 // as measure sets it: no round measured any loop
	rep := &Report{Schema: schemaVersion, Command: "probe", Args: []string{"probe"}, Rounds: 1, Seconds: 0.1,
		Interrupted: true, InterruptedBy: "SIGINT", Probe: &sum, Rows: []Row{}}
	b, err := marshalReport(rep)
	if err != nil {
		t.Fatal(err)
	}
	name := jsonPath(t)
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readJSON(name); err == nil {
		t.Errorf("walbench report accepted a report whose probe measured nothing (rounds 0, every figure null); want it refused as holding no measurement")
	}
}

// TestMixedRateErrorSaysWhatIsWrong: -rate +Inf is refused with
// "must be positive", which +Inf is: the error must say what is wrong with
// the value (not finite), not a bound it meets.
func TestMixedRateErrorSaysWhatIsWrong(t *testing.T) {
	var out strings.Builder
	_, err := parseConfig([]string{"mixed", "-rate", "inf"}, &out, &out)
	if err == nil {
		t.Fatal("-rate inf accepted")
	}
	if strings.Contains(err.Error(), "must be positive") {
		t.Errorf("-rate inf: error %q says +Inf must be positive, which it is; want it to say the rate must be finite", err)
	}
}

// TestMixedRowNamesSayTheirRate: the mixed table names each row by
// its workload, which is the only place the table shows its target rate.
// A -rate that validate accepts (0.4 msgs/s for 1 producer in a 5 s window)
// is shown as "at 0 msgs/s", a rate validate would refuse, and two rates
// (1.2 and 1.4) get the same name, two rows the table cannot tell apart.
func TestMixedRowNamesSayTheirRate(t *testing.T) {
	c, err := parseConfig([]string{"mixed", "-producers", "1", "-rate", "0.4,1.2,1.4"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	names := map[string]float64{}
	for _, rate := range c.mixedRates {
		l := c.mixed
		l.rate = rate
		name := l.String()
		if strings.Contains(name, " at 0 msgs/s") {
			t.Errorf("-rate %v: workload named %q: the table says a target of 0 msgs/s", rate, name)
		}
		if other, ok := names[name]; ok {
			t.Errorf("-rate %v and -rate %v: both rows named %q in the table", other, rate, name)
		}
		names[name] = rate
	}
}
