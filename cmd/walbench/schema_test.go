package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestSchemaSaysOmitted: every field the JSON leaves out when it is zero
// (omitempty) is documented so in doc.go's SCHEMA, so that a reader does
// not take a missing count for a missing measurement.
func TestSchemaSaysOmitted(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, schema, ok := strings.Cut(string(doc), "// # SCHEMA")
	if !ok {
		t.Fatal("doc.go has no SCHEMA section")
	}
	// An entry starts with its quoted names, then a colon; the lines
	// indented further continue it.
	entryStart := regexp.MustCompile(`^//\t\s*("[a-z0-9_]+"(, "[a-z0-9_]+")*)(:| )`)
	quoted := regexp.MustCompile(`"([a-z0-9_]+)"`)
	entries := map[string][]string{}
	var names []string
	for _, line := range strings.Split(schema, "\n") {
		if m := entryStart.FindStringSubmatch(line); m != nil {
			names = nil
			for _, q := range quoted.FindAllStringSubmatch(m[1], -1) {
				names = append(names, q[1])
				entries[q[1]] = append(entries[q[1]], "")
			}
		}
		for _, n := range names {
			entries[n][len(entries[n])-1] += line
		}
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Report](), reflect.TypeFor[Row](), reflect.TypeFor[Probe](), reflect.TypeFor[Reopen]()} {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !strings.Contains(f.Tag.Get("json"), ",omitempty") || f.Type.Kind() == reflect.Pointer {
				continue // a pointer figure: null or, from vs_wal on, left out where it does not apply
			}
			name := jsonName(f)
			said := false
			for _, e := range entries[name] {
				said = said || strings.Contains(e, "omitted") || strings.Contains(e, "absent")
			}
			if !said {
				t.Errorf("%s.%s: the JSON omits %q when it is empty; SCHEMA does not say so (entries %q)", typ.Name(), f.Name, name, entries[name])
			}
		}
	}
}
