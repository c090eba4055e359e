package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestReferenceDefaults checks that every flag's default is where the code
// says it is: the setting's def, which -help prints, parses to the value
// DefaultConfig holds (so def cannot drift from the libraries' defaults
// that DefaultConfig starts from), and the configuration reference's flag
// table (README.md beside this file) shows def.
func TestReferenceDefaults(t *testing.T) {
	readme, err := os.ReadFile("README.md")
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
				t.Fatalf("the configuration reference's flag table has no row for -%s", s.name)
			}
			if !strings.Contains(cell, "`"+s.def+"`") {
				t.Errorf("the configuration reference shows the default of -%s as %s; the code's is `%s`", s.name, cell, s.def)
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

// TestDocs checks the front door and the Markdown beside the code: README
// is short, a LICENSE is beside it, no Markdown file carries build history
// (commit hashes, session diaries), and every command of README's quick
// start is run on a clean checkout, by .ci/quickstart or by the e2e suite
// (deploy/*.sh).
func TestDocs(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 400 {
		t.Errorf("README.md has %d lines; the front door keeps to about 400", n)
	}
	if lic, err := os.ReadFile("../../LICENSE"); err != nil || !strings.Contains(string(lic), "Apache License") {
		t.Errorf("no Apache LICENSE beside README (%v)", err)
	}

	hash := regexp.MustCompile("`[0-9a-f]{7,12}`")
	diary := regexp.MustCompile(`(?i)\b(this|that|earlier|last|another) session\b|\blast invocation\b`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "../.." && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range hash.FindAllString(line, -1) {
				if strings.ContainsAny(m, "abcdef") && strings.ContainsAny(m, "0123456789") {
					t.Errorf("%s:%d: %s looks like a commit hash: docs say what holds, not when it was built", path, i+1, m)
				}
			}
			if m := diary.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: docs are reference, not a diary", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The quick start's commands: its indented lines, without comments.
	qs := string(readme)
	qs = qs[strings.Index(qs, "## Quick start"):]
	qs = qs[:strings.Index(qs[3:], "\n## ")+3]
	ci, err := os.ReadFile("../../.ci/quickstart")
	if err != nil {
		t.Fatal(err)
	}
	// A block of commands that starts the compose cluster is the e2e
	// suite's: it runs deploy/up.sh, scale.sh and down.sh (e2e/cluster.go)
	// and reads the cluster through its public API.
	for _, block := range strings.Split(qs, "\n\n") {
		if strings.Contains(block, "    ./deploy/up.sh") {
			continue
		}
		for _, line := range strings.Split(block, "\n") {
			cmd, ok := strings.CutPrefix(line, "    ")
			if !ok || strings.HasPrefix(cmd, "#") {
				continue
			}
			if i := strings.Index(cmd, "  #"); i >= 0 {
				cmd = cmd[:i]
			}
			cmd = strings.TrimSpace(cmd)
			ran := strings.Contains(string(ci), cmd) ||
				strings.HasPrefix(cmd, "curl -i ") && strings.Contains(string(ci), "curl -fsi "+strings.TrimPrefix(cmd, "curl -i ")) ||
				strings.HasPrefix(cmd, "curl ") && strings.Contains(string(ci), "curl -fs "+strings.TrimPrefix(cmd, "curl "))
			if !ran {
				t.Errorf("README's quick start runs %q, which neither .ci/quickstart nor the e2e suite runs", cmd)
			}
		}
	}
}
