package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEDefaults checks that every flag's default is where the code
// says it is: the setting's def, which -help prints, parses to the value
// DefaultConfig holds (so def cannot drift from the libraries' defaults
// that DefaultConfig starts from), and README's flag table shows def.
func TestREADMEDefaults(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// A row: | `-name`[, `-other`] | `RINGCACHE_NAME` | default | meaning |
	rows := map[string]string{}
	row := regexp.MustCompile("(?m)^\\| (`-[^|]*) \\|[^|]*\\| ([^|]*) \\|")
	flag := regexp.MustCompile("`-([a-z0-9-]+)`")
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		for _, f := range flag.FindAllStringSubmatch(m[1], -1) {
			rows[f[1]] = m[2]
		}
	}
	for _, s := range settings {
		t.Run(s.name, func(t *testing.T) {
			cell, ok := rows[s.name]
			if !ok {
				t.Fatalf("README's flag table has no row for -%s", s.name)
			}
			if !strings.Contains(cell, "`"+s.def+"`") {
				t.Errorf("README shows the default of -%s as %s; the code's is `%s`", s.name, cell, s.def)
			}
			if strings.Contains(s.def, "<") {
				return // a placeholder, filled in at start (the host name, the port)
			}
			v := s.def
			if v == `""` {
				v = ""
			}
			c := DefaultConfig()
			if err := s.set(&c, v); err != nil {
				t.Fatalf("the default %q of -%s does not parse: %v", s.def, s.name, err)
			}
			if want := DefaultConfig(); !reflect.DeepEqual(c, want) {
				t.Errorf("-%s %s gives %+v, but DefaultConfig is %+v", s.name, s.def, c, want)
			}
		})
	}
}
