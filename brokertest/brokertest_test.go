package brokertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// memoryBackend opens broker.Memory queues; wrap, when set, hides what it
// returns behind another type.
type memoryBackend struct {
	now    func() time.Time
	wrap   func(*broker.Memory) broker.Broker
	queues []*broker.Memory
}

func (b *memoryBackend) Queue(_ string, p broker.PolicyValue) (broker.Broker, error) {
	q, err := broker.NewMemory(p, broker.MemoryOptions{Now: b.now})
	if err != nil {
		return nil, err
	}
	b.queues = append(b.queues, q)
	if b.wrap != nil {
		return b.wrap(q), nil
	}
	return q, nil
}

func (b *memoryBackend) Close() error {
	for _, q := range b.queues {
		_ = q.Close()
	}
	return nil
}

func memoryFactory(name string, caps Capabilities, wrap func(*broker.Memory) broker.Broker) Factory {
	return Factory{Name: name, Caps: caps, Open: func(t *testing.T, now func() time.Time) Backend {
		b := &memoryBackend{now: now, wrap: wrap}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}}
}

var allCaps = Capabilities{
	LeaseExtender: true, Rejecter: true, DeadLetterReader: true, DeadLetterManager: true, Waker: true,
	Keyed: true, Batch: true, Capacity: true, Clock: true, ExactExpiry: true, OldestFirst: true, ReplayOnce: true, Closer: true,
}

// The real-time paths of the suite (the ones an implementation without
// Clock runs) against the memory broker on the real clock: every timing
// promise is checked by polling within the tolerance. It takes several
// seconds of wall time, so -short leaves it out.
func TestRunWithoutClock(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a real-time run of the suite, seconds of wall time; go test without -short runs it")
	}
	caps := allCaps
	caps.Clock, caps.ExactExpiry, caps.Tolerance = false, false, 50*time.Millisecond
	Run(t, memoryFactory("memory-realtime", caps, nil))
}

// brokerOnly exposes Broker's methods and nothing else.
type brokerOnly struct{ b broker.Broker }

func (o brokerOnly) Publish(ctx context.Context, p []byte) (broker.MessageValue, error) {
	return o.b.Publish(ctx, p)
}
func (o brokerOnly) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	return o.b.Receive(ctx, max)
}
func (o brokerOnly) Ack(ctx context.Context, r broker.ReceiptValue) error { return o.b.Ack(ctx, r) }
func (o brokerOnly) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	return o.b.Nack(ctx, r, cause)
}

// A broker with no optional interface, declared so, passes: every test of
// an undeclared capability is skipped, and the rest hold. (The Memory
// behind it enforces Capacity, which is not an interface, and says so.)
func TestRunMinimalBroker(t *testing.T) {
	caps := Capabilities{Capacity: true, Clock: true, ExactExpiry: true}
	Run(t, memoryFactory("minimal", caps, func(m *broker.Memory) broker.Broker { return brokerOnly{m} }))
}

func TestDeclarationMustBeHonest(t *testing.T) {
	q, err := broker.NewMemory(broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1}, broker.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := &memoryBackend{}
	if p := declarationProblems(Factory{Name: "m", Caps: allCaps}, b, q); len(p) != 0 {
		t.Fatalf("an honest declaration: %v", p)
	}
	for _, c := range []struct {
		name string
		caps func(*Capabilities)
		q    broker.Broker
		want string
	}{
		{"implemented, undeclared", func(c *Capabilities) { c.LeaseExtender = false }, q, "LeaseExtender false"},
		{"implemented, undeclared", func(c *Capabilities) { c.Rejecter = false }, q, "Rejecter false"},
		{"implemented, undeclared", func(c *Capabilities) { c.DeadLetterReader = false }, q, "DeadLetterReader false"},
		{"implemented, undeclared", func(c *Capabilities) { c.DeadLetterManager = false }, q, "DeadLetterManager false"},
		{"implemented, undeclared", func(c *Capabilities) { c.Waker = false }, q, "Waker false"},
		{"implemented, undeclared", func(c *Capabilities) { c.Keyed = false }, q, "Keyed (KeyedPublisher) false"},
		{"implemented, undeclared", func(c *Capabilities) { c.Batch = false }, q, "Batch (BatchPublisher) false"},
		{"declared, not implemented", func(c *Capabilities) {}, brokerOnly{q}, "LeaseExtender true"},
		{"declared, not implemented", func(c *Capabilities) {}, brokerOnly{q}, "Keyed (KeyedPublisher) true"},
		{"exact without clock", func(c *Capabilities) { c.Clock = false }, q, "ExactExpiry without Clock"},
	} {
		caps := allCaps
		c.caps(&caps)
		p := declarationProblems(Factory{Name: "m", Caps: caps}, b, c.q)
		if !strings.Contains(strings.Join(p, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one saying %q", c.name, p, c.want)
		}
	}
	if p := declarationProblems(Factory{Name: "m", Caps: allCaps}, struct{ Backend }{b}, q); len(p) != 1 || !strings.Contains(p[0], "not an io.Closer") {
		t.Errorf("Closer declared on a backend without Close: %q", p)
	}
}

// capacityBlindBackend opens Memory queues that ignore the policy's
// Capacity.
type capacityBlindBackend struct{ memoryBackend }

func (b *capacityBlindBackend) Queue(name string, p broker.PolicyValue) (broker.Broker, error) {
	p.Capacity = 0
	return b.memoryBackend.Queue(name, p)
}

// A promise kept but declared false, which would leave its tests skipped,
// fails the declaration where a probe can see it: Capacity, and on the
// suite's clock ExactExpiry. A promise not kept and declared so does not.
func TestUnderDeclaringWhatAProbeSeesIsFound(t *testing.T) {
	late := func(now func() time.Time) func() time.Time { // a broker clock a second behind the suite's
		return func() time.Time { return now().Add(-time.Second) }
	}
	for _, c := range []struct {
		name string
		caps func(*Capabilities)
		open func(now func() time.Time) Backend
		want string // "" for no problem
	}{
		{"honest", func(*Capabilities) {}, func(now func() time.Time) Backend { return &memoryBackend{now: now} }, ""},
		{"Capacity kept, undeclared", func(c *Capabilities) { c.Capacity = false }, func(now func() time.Time) Backend { return &memoryBackend{now: now} }, "does not declare Capacity"},
		{"Capacity not kept, undeclared", func(c *Capabilities) { c.Capacity = false }, func(now func() time.Time) Backend { return &capacityBlindBackend{memoryBackend{now: now}} }, ""},
		{"ExactExpiry kept, undeclared", func(c *Capabilities) { c.ExactExpiry = false }, func(now func() time.Time) Backend { return &memoryBackend{now: now} }, "does not declare ExactExpiry"},
		{"ExactExpiry not kept, undeclared", func(c *Capabilities) { c.ExactExpiry = false }, func(now func() time.Time) Backend { return &memoryBackend{now: late(now)} }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			caps := allCaps
			c.caps(&caps)
			f := Factory{Name: "m", Caps: caps, Open: func(t *testing.T, now func() time.Time) Backend {
				b := c.open(now)
				t.Cleanup(func() { _ = b.(interface{ Close() error }).Close() })
				return b
			}}
			p := undeclaredProblems(newEnv(t, f))
			switch {
			case c.want == "" && len(p) != 0:
				t.Errorf("problems %q, want none", p)
			case c.want != "" && !strings.Contains(strings.Join(p, "\n"), c.want):
				t.Errorf("problems %q, want one saying %q", p, c.want)
			}
		})
	}
}

func TestCheckTable(t *testing.T) {
	file := Factory{Name: "filestore", Caps: allCaps}
	nats := Factory{Name: "natsjs", Caps: Capabilities{LeaseExtender: true, Tolerance: time.Second}}
	readme := "# x\n\n" + TableBegin + "\n" + Table(file, nats) + TableEnd + "\n"
	for _, f := range []Factory{file, nats} {
		if p := checkTable(readme, f); len(p) != 0 {
			t.Errorf("%s: the table Table rendered: %q", f.Name, p)
		}
	}
	// Each column is checked alone: the other one may hold anything.
	placeholder := strings.ReplaceAll(readme, " no |\n", " ? |\n")
	if p := checkTable(placeholder, file); len(p) != 0 {
		t.Errorf("filestore column with placeholders in another: %q", p)
	}

	wrongCell := strings.Replace(readme, "| `Waker`: an idle consumer waits instead of polling | yes |", "| `Waker`: an idle consumer waits instead of polling | no |", 1)
	missingRow := strings.Replace(readme, "| runs on an injected clock | yes | no |\n", "", 1)
	extraRow := strings.Replace(readme, TableEnd, "| teleports messages | yes | no |\n"+TableEnd, 1)
	for name, c := range map[string]struct {
		text string
		f    Factory
		want string
	}{
		"wrong cell":     {wrongCell, file, "says \"no\", the declaration \"yes\""},
		"missing row":    {missingRow, file, "is missing"},
		"unknown row":    {extraRow, file, "is not a promise of the suite"},
		"no column":      {readme, Factory{Name: "memory"}, "no column headed \"memory\""},
		"no markers":     {"# x\n", file, "no table between"},
		"wrong timing":   {readme, Factory{Name: "natsjs", Caps: Capabilities{LeaseExtender: true, Tolerance: 2 * time.Second}}, "within 2s"},
		"tolerance cell": {strings.Replace(readme, "within 1s", "within 3s", 1), nats, "within 1s"},
		"lapse on a clock without ExactExpiry": {readme, Factory{Name: "filestore", Caps: func() Capabilities { c := allCaps; c.ExactExpiry = false; return c }()},
			"the declaration \"retry exact, lapse within 2s\""},
	} {
		p := checkTable(c.text, c.f)
		if !strings.Contains(strings.Join(p, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one saying %q", name, p, c.want)
		}
	}
}

func TestClock(t *testing.T) {
	c := NewClock(t0)
	if !c.Now().Equal(t0) {
		t.Fatalf("Now %v, want %v", c.Now(), t0)
	}
	if got := c.Advance(-time.Second); !got.Equal(t0.Add(-time.Second)) || !c.Now().Equal(got) {
		t.Fatalf("Advance(-1s) = %v, Now %v", got, c.Now())
	}
	c.Set(t0.Add(time.Hour))
	if !c.Now().Equal(t0.Add(time.Hour)) {
		t.Fatalf("after Set: %v", c.Now())
	}
}
