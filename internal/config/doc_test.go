package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestConfigDocListsEveryKey: docs/config.md names every key the daemons
// know, in backticks with its full dotted path, so that no key goes
// undocumented in the reference.
func TestConfigDocListsEveryKey(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		daemon string
		def    any
	}{
		{"lds-sender", DefaultSender()},
		{"lds-receiver", DefaultReceiver()},
	} {
		t.Run(tc.daemon, func(t *testing.T) {
			b, err := yaml.Marshal(tc.def)
			if err != nil {
				t.Fatal(err)
			}
			all := keySet(t, b)
			for _, k := range all {
				if strings.HasPrefix(k, "capture.identity.seed") || hasChild(all, k) {
					continue // the seed is sketch.seed; sections are named by their keys
				}
				if !strings.Contains(string(doc), "`"+k+"`") {
					t.Errorf("docs/config.md does not document %s's key `%s`", tc.daemon, k)
				}
			}
		})
	}
}

func hasChild(keys []string, k string) bool {
	for _, o := range keys {
		if strings.HasPrefix(o, k+".") {
			return true
		}
	}
	return false
}
