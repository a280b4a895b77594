package main

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// schemaSection returns doc.go from its SCHEMA heading on.
func schemaSection(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, schema, ok := strings.Cut(string(doc), "// # SCHEMA")
	if !ok {
		t.Fatal("doc.go has no SCHEMA section")
	}
	return schema
}

// schemaEntries reads doc.go's SCHEMA: for each JSON name, the text of
// every entry that documents it (a name may be a field of several
// objects).
func schemaEntries(t *testing.T) map[string][]string {
	t.Helper()
	schema := schemaSection(t)
	// An entry starts with its quoted names, then a colon (or a comma at
	// the end of the line: the next line names more); the lines indented
	// further continue it.
	entryStart := regexp.MustCompile(`^//\t\s*("[a-z0-9_]+"(, "[a-z0-9_]+")*)(:| |,$)`)
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
	return entries
}

// saysOmitted reports whether a SCHEMA entry says its field is left out.
func saysOmitted(entry string) bool {
	return strings.Contains(entry, "omitted") || strings.Contains(entry, "absent")
}

var schemaTypes = []reflect.Type{reflect.TypeFor[Report](), reflect.TypeFor[Row](), reflect.TypeFor[Probe](), reflect.TypeFor[Reopen]()}

// TestSchemaSaysOmitted: every field the JSON leaves out when it is zero
// (omitempty) is documented so in doc.go's SCHEMA, so that a reader does
// not take a missing count for a missing measurement.
func TestSchemaSaysOmitted(t *testing.T) {
	entries := schemaEntries(t)
	for _, typ := range schemaTypes {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !strings.Contains(f.Tag.Get("json"), ",omitempty") || f.Type.Kind() == reflect.Pointer {
				continue // a pointer figure: null or, from vs_wal on, left out where it does not apply
			}
			name := jsonName(f)
			said := false
			for _, e := range entries[name] {
				said = said || saysOmitted(e)
			}
			if !said {
				t.Errorf("%s.%s: the JSON omits %q when it is empty; SCHEMA does not say so (entries %q)", typ.Name(), f.Name, name, entries[name])
			}
		}
	}
}

// TestSchemaOmittedIsOmitted: a field that every SCHEMA entry of its name
// says is left out when it does not apply is left out of the JSON when it
// is zero, not written as false, 0 or null.
func TestSchemaOmittedIsOmitted(t *testing.T) {
	entries := schemaEntries(t)
	for _, typ := range schemaTypes {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := jsonName(f)
			es := entries[name]
			all := len(es) > 0
			for _, e := range es {
				all = all && saysOmitted(e)
			}
			if all && !strings.Contains(f.Tag.Get("json"), ",omitempty") {
				t.Errorf("%s.%s: SCHEMA says %q is left out where it does not apply (%q), but the JSON always has it", typ.Name(), f.Name, name, es)
			}
		}
	}
}

// TestSchemaDocumentsEveryField: every field of the JSON is written, under
// a name doc.go's SCHEMA documents: a field renamed, or left out of the
// JSON, would leave a reader of the file with a figure the schema does not
// name, or without one it does.
func TestSchemaDocumentsEveryField(t *testing.T) {
	schema := schemaSection(t)
	for _, typ := range append(slices.Clone(schemaTypes), reflect.TypeFor[Machine](), reflect.TypeFor[Ceiling](),
		reflect.TypeFor[Recommendation](), reflect.TypeFor[Score](), reflect.TypeFor[Setting]()) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if name := jsonName(f); name == "-" || !strings.Contains(schema, `"`+name+`"`) {
				t.Errorf("%s.%s: written to the JSON as %q, which SCHEMA does not document", typ.Name(), f.Name, name)
			}
		}
	}
}

// TestSchemaNullWhereNotMeasured: a figure not measured is null in the
// JSON, not left out, except those of a row from "vs_wal" on, which are
// left out where they do not apply.
func TestSchemaNullWhereNotMeasured(t *testing.T) {
	for _, v := range []any{Row{}, Probe{}, Reopen{}, Recommendation{}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		typ := reflect.TypeOf(v)
		leftOut := false
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := jsonName(f)
			leftOut = leftOut || typ == reflect.TypeFor[Row]() && name == "vs_wal"
			if f.Type.Kind() != reflect.Pointer {
				continue
			}
			raw, written := fields[name]
			switch {
			case leftOut && written:
				t.Errorf("%s.%s: %q is written as %s where it does not apply; SCHEMA says it is left out", typ.Name(), f.Name, name, raw)
			case !leftOut && (!written || string(raw) != "null"):
				t.Errorf("%s.%s: %q is %s when not measured (written: %v); want null", typ.Name(), f.Name, name, raw, written)
			}
		}
	}
}
