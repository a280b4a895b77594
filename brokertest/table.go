package brokertest

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The markers around the capability table in a README.
const (
	TableBegin = "<!-- capabilities:begin -->"
	TableEnd   = "<!-- capabilities:end -->"
)

// row is one line of the capability table: a promise and how a declaration
// renders it.
type row struct {
	label string
	cell  func(Capabilities) string
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// rows is the table's content, in order. A label is the row's key: it is
// what CheckReadme looks for, so changing one changes every README.
var rows = []row{
	{"`LeaseExtender`: Extend renews a lease with a new receipt", func(c Capabilities) string { return yesNo(c.LeaseExtender) }},
	{"`Rejecter`: Reject dead-letters at once", func(c Capabilities) string { return yesNo(c.Rejecter) }},
	{"`DeadLetterReader`: dead letters can be read", func(c Capabilities) string { return yesNo(c.DeadLetterReader) }},
	{"`DeadLetterManager`: dead letters can be replayed and deleted", func(c Capabilities) string { return yesNo(c.DeadLetterManager) }},
	{"racing replays of one dead letter queue it once", func(c Capabilities) string { return yesNo(c.ReplayOnce) }},
	{"`Waker`: an idle consumer waits instead of polling", func(c Capabilities) string { return yesNo(c.Waker) }},
	{"`PublishKeyed`: dedup keys within a window", func(c Capabilities) string { return yesNo(c.Keyed) }},
	{"`PublishBatch`: all or nothing", func(c Capabilities) string { return yesNo(c.Batch) }},
	{"`Capacity`: a full queue refuses with QueueFull", func(c Capabilities) string { return yesNo(c.Capacity) }},
	{"runs on an injected clock", func(c Capabilities) string { return yesNo(c.Clock) }},
	{"a lease lapses exactly at ExpiresAt", func(c Capabilities) string { return yesNo(c.ExactExpiry) }},
	{"Receive is oldest EnqueuedAt first, redeliveries included", func(c Capabilities) string { return yesNo(c.OldestFirst) }},
	{"timings (lapse, retry) as the policy says", func(c Capabilities) string {
		// On the suite's clock a retry delay is checked exactly, and a
		// lapse only with ExactExpiry: without it, within Tolerance.
		switch {
		case c.Clock && c.ExactExpiry:
			return "exact"
		case c.Clock:
			return "retry exact, lapse within " + c.tolerance().String()
		}
		return "within " + c.tolerance().String()
	}},
	{"`Close`: later calls on its queues are Closed", func(c Capabilities) string { return yesNo(c.Closer) }},
}

// Table renders the capability table of fs as markdown: one row per
// promise, one column per implementation, headed by its Name. It is what
// goes between [TableBegin] and [TableEnd] in a README.
func Table(fs ...Factory) string {
	var b strings.Builder
	b.WriteString("| promise |")
	for _, f := range fs {
		fmt.Fprintf(&b, " %s |", f.Name)
	}
	b.WriteString("\n|---|")
	for range fs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s |", r.label)
		for _, f := range fs {
			fmt.Fprintf(&b, " %s |", r.cell(f.Caps))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// CheckReadme fails t unless the markdown file at path holds, between
// [TableBegin] and [TableEnd], a table whose column headed f.Name says
// what f.Caps declares, row for row, and whose rows are exactly the
// promises [Table] renders. Every other column is ignored, so each
// implementation checks its own column.
func CheckReadme(t testing.TB, path string, f Factory) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("capability table: %v", err)
	}
	if problems := checkTable(string(data), f); len(problems) > 0 {
		t.Errorf("capability table of %s in %s:\n  %s\nthe table %s declares (its column):\n%s",
			f.Name, path, strings.Join(problems, "\n  "), f.Name, Table(f))
	}
}

// checkTable returns what is wrong with f's column of the table in text.
func checkTable(text string, f Factory) []string {
	begin := strings.Index(text, TableBegin)
	end := strings.Index(text, TableEnd)
	if begin < 0 || end < begin {
		return []string{fmt.Sprintf("no table between %q and %q", TableBegin, TableEnd)}
	}
	var lines [][]string
	for _, line := range strings.Split(text[begin+len(TableBegin):end], "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		lines = append(lines, cells)
	}
	if len(lines) < 2 {
		return []string{"the table has no header"}
	}
	col := -1
	for i, h := range lines[0] {
		if i > 0 && h == f.Name {
			col = i
		}
	}
	if col < 0 {
		return []string{fmt.Sprintf("no column headed %q (headers %q)", f.Name, lines[0])}
	}
	var problems []string
	found := map[string]bool{}
	for _, cells := range lines[2:] {
		label := cells[0]
		var r *row
		for i := range rows {
			if rows[i].label == label {
				r = &rows[i]
			}
		}
		switch {
		case r == nil:
			problems = append(problems, fmt.Sprintf("row %q is not a promise of the suite", label))
			continue
		case found[label]:
			problems = append(problems, fmt.Sprintf("row %q appears twice", label))
			continue
		}
		found[label] = true
		want := r.cell(f.Caps)
		if col >= len(cells) {
			problems = append(problems, fmt.Sprintf("row %q has no %s cell, want %q", label, f.Name, want))
		} else if cells[col] != want {
			problems = append(problems, fmt.Sprintf("row %q says %q, the declaration %q", label, cells[col], want))
		}
	}
	for _, r := range rows {
		if !found[r.label] {
			problems = append(problems, fmt.Sprintf("row %q is missing", r.label))
		}
	}
	return problems
}
