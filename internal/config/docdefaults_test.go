package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestConfigDocDefaults: the default docs/config.md gives a key (its
// second column, when it is one literal in backticks) is the code's
// default for that key in every daemon that has it.
func TestConfigDocDefaults(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([a-z0-9_.\\[\\]]+)` \\| `([^`]*)` \\|")
	documented := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			documented[m[1]] = m[2]
		}
	}
	if len(documented) < 50 {
		t.Fatalf("read %d keys with a literal default from docs/config.md: the table format changed", len(documented))
	}
	checked := 0
	for _, tc := range []struct {
		daemon string
		def    any
	}{
		{"lds-sender", DefaultSender()},
		{"lds-receiver", DefaultReceiver()},
	} {
		b, err := yaml.Marshal(tc.def)
		if err != nil {
			t.Fatal(err)
		}
		var n yaml.Node
		if err := yaml.Unmarshal(b, &n); err != nil {
			t.Fatal(err)
		}
		code := map[string]string{}
		flatten(n.Content[0], "", code)
		for key, want := range documented {
			got, ok := code[key]
			if !ok || key == "sender.id" {
				continue // the other daemon's key; sender.id defaults to the host name
			}
			checked++
			if !sameDefault(got, want) {
				t.Errorf("docs/config.md gives `%s` the default `%s`; %s's code has %s", key, want, tc.daemon, got)
			}
		}
	}
	t.Logf("%d documented defaults checked against the code", checked)
}

// flatten records every leaf of a mapping node under its dotted path.
func flatten(n *yaml.Node, prefix string, out map[string]string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if prefix != "" {
				k = prefix + "." + k
			}
			flatten(n.Content[i+1], k, out)
		}
	case yaml.SequenceNode:
		var items []string
		for _, c := range n.Content {
			items = append(items, c.Value)
		}
		out[prefix] = "[" + strings.Join(items, ",") + "]"
	default:
		out[prefix] = n.Value
	}
}

// sameDefault compares a code value with a documented one: durations by
// value (1m0s is 1m), quotes and spaces aside.
func sameDefault(code, doc string) bool {
	doc = strings.Trim(doc, `"`)
	if code == doc || strings.ReplaceAll(code, " ", "") == strings.ReplaceAll(doc, " ", "") {
		return true
	}
	a, err1 := time.ParseDuration(code)
	b, err2 := time.ParseDuration(doc)
	return err1 == nil && err2 == nil && a == b
}
