package replay

import (
	"bytes"
	"encoding/json"
	"math"
	"net/netip"
	"os"
	"testing"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/eval"
)

func readJSONL(t *testing.T, path string) []results.FlowRecord {
	t.Helper()
	recs, err := eval.ReadResultsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// checkSchema holds every line of a results file to the contract of
// docs/results.md: these keys, these JSON types, null only where allowed.
func checkSchema(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %d is not a JSON object: %v", i+1, err)
		}
		for key, kind := range map[string]string{
			"interval": "int", "start_ns": "int", "src": "addr", "dst": "addr", "sport": "port", "dport": "port",
			"proto": "proto", "delay_ns": "num?", "stddev_ns": "num?", "loss": "num0?", "packets": "num",
			"samples": "num", "ci95_ns": "num?",
		} {
			v, ok := m[key]
			if !ok {
				t.Fatalf("line %d lacks %q", i+1, key)
			}
			f, isNum := v.(float64)
			switch kind {
			case "num?":
				if v != nil && !isNum {
					t.Fatalf("line %d: %s = %v is neither a number nor null", i+1, key, v)
				}
			case "num0?": // null where withheld, else >= 0
				if v != nil && (!isNum || f < 0) {
					t.Fatalf("line %d: %s = %v is neither a non-negative number nor null", i+1, key, v)
				}
			case "num":
				if !isNum || f < 0 {
					t.Fatalf("line %d: %s = %v is not a non-negative number", i+1, key, v)
				}
			case "int":
				if !isNum || f != math.Trunc(f) {
					t.Fatalf("line %d: %s = %v is not an integer", i+1, key, v)
				}
			case "port", "proto":
				lim := 65535.0
				if kind == "proto" {
					lim = 255
				}
				if !isNum || f != math.Trunc(f) || f < 0 || f > lim {
					t.Fatalf("line %d: %s = %v out of range", i+1, key, v)
				}
			case "addr":
				s, _ := v.(string)
				a, err := netip.ParseAddr(s)
				if err != nil || a.String() != s {
					t.Fatalf("line %d: %s = %v is not an address in canonical form", i+1, key, v)
				}
			}
		}
		if m["start_ns"].(float64) != m["interval"].(float64)*1e9 {
			t.Fatalf("line %d: start_ns is not interval x T", i+1)
		}
		lines++
	}
	return lines
}
