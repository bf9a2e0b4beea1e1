package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/truth"
)

// TestEvalPerClass runs `ldsctl eval --config` on three hand-made flows:
// a gold one estimated 10 % high, a silver one exact and one no rule
// matches estimated 50 % low, and checks the per-class rows.
func TestEvalPerClass(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	d := func(v float64) *float64 { return &v }
	truth := []truth.Record{
		{Interval: 1, StartNS: 300e9, Src: "10.1.0.1", Dst: "192.0.2.1", SPort: 1, DPort: 80, Proto: 6, Sent: 200, Received: 200, DelayNS: d(1000), StddevNS: d(0)},
		{Interval: 1, StartNS: 300e9, Src: "10.2.0.1", Dst: "192.0.2.1", SPort: 2, DPort: 80, Proto: 6, Sent: 20, Received: 20, DelayNS: d(500), StddevNS: d(0)},
		{Interval: 1, StartNS: 300e9, Src: "10.200.0.1", Dst: "192.0.2.1", SPort: 3, DPort: 80, Proto: 17, Sent: 3, Received: 3, DelayNS: d(400), StddevNS: d(0)},
	}
	estimates := []float64{1100, 500, 200}
	var tb, rb strings.Builder
	for i, tr := range truth {
		b, err := json.Marshal(tr)
		if err != nil {
			t.Fatal(err)
		}
		tb.Write(append(b, '\n'))
		k, err := tr.Key()
		if err != nil {
			t.Fatal(err)
		}
		r := results.FlowRecord{Interval: tr.Interval, StartNS: tr.StartNS, Key: k, DelayNS: d(estimates[i]), Packets: float64(tr.Sent)}
		line, err := results.MarshalLine(nil, &r)
		if err != nil {
			t.Fatal(err)
		}
		rb.Write(line)
	}
	cfg := write("w.yaml", `interval: 300s
sketch:
  seed: "cli-test"
capture:
  weights: [{name: gold, weight: 100, src: [10.0.0.0/15]}, {name: silver, weight: 25, src: [10.2.0.0/15]}]
`)
	out := filepath.Join(dir, "report.md")
	err := cmdEval([]string{"--truth", write("truth.jsonl", tb.String()), "--results", "w=" + write("r.jsonl", rb.String()),
		"--config", cfg, "--default-class", "bronze", "--out", out})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| gold | all | w | 1 | 100% (1/1) | 10% | 10% |",
		"| silver | 10-99 | w | 1 | 100% (1/1) | 0% | 0% |",
		"| bronze | 1-9 | w | 1 | 100% (1/1) | 50% | 50% |",
		"| gold | 1-9 | w | 0 | – (0/0) |",
		"| bronze | 1 | no rule matches | 1 |",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Without weight rules there is no class section.
	if err := cmdEval([]string{"--truth", filepath.Join(dir, "truth.jsonl"), "--results", "w=" + filepath.Join(dir, "r.jsonl"),
		"--config", write("now.yaml", "sketch:\n  seed: \"cli-test\"\n"), "--out", out}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); strings.Contains(string(b), "## Weight classes") {
		t.Error("class section without weight rules")
	}
}

// TestEvalRefusesSwappedFiles: a results file given as --truth, a truth
// file given as --results, and an empty truth are refused with what to
// give instead, never turned into a report of NaNs.
func TestEvalRefusesSwappedFiles(t *testing.T) {
	dir := t.TempDir()
	d := func(v float64) *float64 { return &v }
	tr := truth.Record{Interval: 1, StartNS: 1e9, Src: "10.1.0.1", Dst: "192.0.2.1", SPort: 1, DPort: 80, Proto: 6, Sent: 5, Received: 5, DelayNS: d(1000)}
	tb, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := tr.Key()
	line, err := results.MarshalLine(nil, &results.FlowRecord{Interval: 1, StartNS: 1e9, Key: k, DelayNS: d(1000), Packets: 5})
	if err != nil {
		t.Fatal(err)
	}
	truthPath, resPath, empty := filepath.Join(dir, "truth.jsonl"), filepath.Join(dir, "results.jsonl"), filepath.Join(dir, "empty.jsonl")
	for p, b := range map[string][]byte{truthPath: append(tb, '\n'), resPath: line, empty: nil} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "r.md")
	for _, tc := range []struct {
		name       string
		truth, res string
		want       string
	}{
		{"results as truth", resPath, resPath, "is this a results file?"},
		{"truth as results", truthPath, truthPath, "is this a truth file?"},
		{"empty truth", empty, resPath, "no records"},
	} {
		err := cmdEval([]string{"--truth", tc.truth, "--results", "x=" + tc.res, "--out", out})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if err := cmdEval([]string{"--truth", truthPath, "--results", "x=" + resPath, "--out", out}); err != nil {
		t.Errorf("the right files: %v", err)
	}
}
