package eval

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/truth"
)

// classCfg: gold = src 10.0.0.0/15 (weight 100); silver = src 10.2.0.0/15
// (weight 10) or dport 8443 (weight 20, a second rule of the same name);
// everything else is the default class.
func classCfg() capture.Config {
	c := capture.DefaultConfig()
	c.Identity.Seed = "class-test"
	c.Weights = []capture.WeightRule{
		{Rule: match.Rule{Name: "gold", Src: []string{"10.0.0.0/15"}}, Weight: 100},
		{Rule: match.Rule{Name: "silver", Src: []string{"10.2.0.0/15"}}, Weight: 10},
		{Rule: match.Rule{Name: "silver", DPort: []string{"8443"}}, Weight: 20},
	}
	return c
}

// flow makes a truth record of interval 1 (T = 1 s).
func flow(src, dst string, dport uint16, sent, recv int64, delay float64) truth.Record {
	r := truth.Record{Interval: 1, StartNS: 1e9, Src: src, Dst: dst, SPort: 40000, DPort: dport, Proto: 6,
		Sent: sent, Received: recv, Lost: sent - recv}
	if recv > 0 {
		r.DelayNS, r.StddevNS = f64(delay), f64(0)
	}
	return r
}

// TestWeightClassBreakdown: eight flows whose class (by the rules of
// classCfg) and relative error are chosen by hand; the per class and bin
// statistics below are worked out from those choices alone.
func TestWeightClassBreakdown(t *testing.T) {
	g1 := flow("10.0.0.5", "192.0.2.1", 443, 200, 200, 1000) // gold, est 1010: err 0.01
	g2 := flow("10.1.255.9", "192.0.2.1", 80, 5, 5, 2000)    // gold (end of /15), est 2100: 0.05
	g3 := flow("10.0.9.9", "192.0.2.1", 80, 150, 150, 1000)  // gold, no result record
	g4 := flow("10.0.0.7", "192.0.2.1", 8443, 100, 100, 800) // gold AND silver rule 3: first wins; exact
	s1 := flow("10.2.0.1", "192.0.2.1", 80, 300, 300, 500)   // silver rule 2, est 600: 0.2
	s2 := flow("192.0.2.77", "10.9.9.9", 8443, 3, 3, 400)    // silver rule 3, est 300: 0.25
	b1 := flow("10.4.0.1", "192.0.2.1", 80, 120, 120, 1000)  // just outside both prefixes; est 1300: 0.3
	b2 := flow("2001:db8::1", "2001:db8::2", 80, 2, 2, 100)  // IPv6, no rule; est 150: 0.5
	b3 := flow("172.16.0.1", "192.0.2.1", 80, 50, 0, 0)      // no rule, every packet lost: no true delay
	truth := []truth.Record{g1, g2, g3, g4, s1, s2, b1, b2, b3}
	weighted := []results.FlowRecord{
		est(g1, f64(1010), nil, 0), est(g2, f64(2100), nil, 0), est(g4, f64(800), nil, 0),
		est(s1, f64(600), nil, 0), est(s2, f64(300), nil, 0),
		est(b1, f64(1300), nil, 0), est(b2, f64(150), nil, 0), est(b3, nil, nil, 50),
	}
	// A second run that only knows the bronze flows, exactly.
	bronzeOnly := []results.FlowRecord{est(b1, f64(1000), nil, 0), est(b2, f64(100), nil, 0)}

	wc, err := NewWeightClasses(classCfg(), "bronze", "test rules")
	if err != nil {
		t.Fatal(err)
	}
	opt := DefaultOptions()
	opt.Baseline = false
	opt.Bins = []Bin{{Name: ">=100", Min: 100}, {Name: "1-99", Min: 1, Max: 99}, {Name: "all"}}
	opt.Classes = wc
	rep, err := EvaluateWith(truth, map[string][]results.FlowRecord{"weighted": weighted, "bronze-only": bronzeOnly}, opt)
	if err != nil {
		t.Fatal(err)
	}

	wantClasses := []ClassInfo{
		{Name: "gold", Weight: "100", Rules: "src 10.0.0.0/15", Flows: 4},
		{Name: "silver", Weight: "10, 20", Rules: "src 10.2.0.0/15; or dport 8443", Flows: 2},
		{Name: "bronze", Weight: "1", Rules: "no rule matches", Flows: 3},
	}
	if len(rep.Classes) != len(wantClasses) {
		t.Fatalf("classes %+v, want %+v", rep.Classes, wantClasses)
	}
	for i, w := range wantClasses {
		if rep.Classes[i] != w {
			t.Errorf("class %d: %+v, want %+v", i, rep.Classes[i], w)
		}
	}
	nan := math.NaN()
	for _, tc := range []struct {
		run, class, bin            string
		flows, delayFlows, covered int
		median, p95                float64
	}{
		// gold >=100: g1 0.01, g3 no estimate, g4 0 -> [0, 0.01]: median
		// 0.005, p95 h = 0.95 -> 0.0095.
		{"weighted", "gold", ">=100", 3, 3, 2, 0.005, 0.0095},
		{"weighted", "gold", "1-99", 1, 1, 1, 0.05, 0.05},
		// [0, 0.01, 0.05]: median 0.01; p95 h = 1.9 -> 0.01 + 0.9*0.04.
		{"weighted", "gold", "all", 4, 4, 3, 0.01, 0.046},
		{"weighted", "silver", ">=100", 1, 1, 1, 0.2, 0.2},
		{"weighted", "silver", "1-99", 1, 1, 1, 0.25, 0.25},
		{"weighted", "silver", "all", 2, 2, 2, 0.225, 0.2475},
		{"weighted", "bronze", ">=100", 1, 1, 1, 0.3, 0.3},
		// b2 0.5; b3 lost everything: a flow, but no delay to estimate.
		{"weighted", "bronze", "1-99", 2, 1, 1, 0.5, 0.5},
		{"weighted", "bronze", "all", 3, 2, 2, 0.4, 0.49},
		{"bronze-only", "gold", "all", 4, 4, 0, nan, nan},
		{"bronze-only", "silver", ">=100", 1, 1, 0, nan, nan},
		{"bronze-only", "bronze", "all", 3, 2, 2, 0, 0},
	} {
		s := classBin(t, rep, tc.run, tc.class, tc.bin)
		name := tc.run + "/" + tc.class + "/" + tc.bin
		if s.Flows != tc.flows || s.DelayFlows != tc.delayFlows || s.Covered != tc.covered {
			t.Errorf("%s: flows %d/%d/%d, want %d/%d/%d", name, s.Flows, s.DelayFlows, s.Covered, tc.flows, tc.delayFlows, tc.covered)
		}
		if !near(s.MedianRelDelay, tc.median) || !near(s.P95RelDelay, tc.p95) {
			t.Errorf("%s: median %v p95 %v, want %v %v", name, s.MedianRelDelay, s.P95RelDelay, tc.median, tc.p95)
		}
	}
	// The classes partition the flows: the unsplit "all" bin is their union.
	if all := binOf(t, rep, "weighted", "all"); all.Flows != 9 || all.Covered != 7 {
		t.Errorf("all flows: %+v", all)
	}

	// The report keeps every earlier section byte for byte and adds the
	// class section after them.
	plain := rep
	plain.Classes = nil
	var withC, without bytes.Buffer
	if err := rep.WriteMarkdown(&withC); err != nil {
		t.Fatal(err)
	}
	if err := plain.WriteMarkdown(&without); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(withC.String(), without.String()) {
		t.Error("the class breakdown changed the sections before it")
	}
	extra := strings.TrimPrefix(withC.String(), without.String())
	for _, want := range []string{"\n## Weight classes\n", "test rules", "| bronze | 1 | no rule matches | 3 |",
		"| silver | 10, 20 | src 10.2.0.0/15; or dport 8443 | 2 |",
		"| gold | all | weighted | 4 | 75% (3/4) | 1% | 4.6% |", "| bronze | 1-99 | bronze-only | 1 | 100% (1/1) | 0% | 0% |"} {
		if !strings.Contains(extra, want) {
			t.Errorf("class section lacks %q:\n%s", want, extra)
		}
	}
	if strings.Contains(extra, "\n## Mean delay") || strings.Contains(extra, "\n## Loss") {
		t.Error("class section repeats a heading other tools look for")
	}
}

func classBin(t *testing.T, rep Report, run, class, bin string) BinStats {
	t.Helper()
	ci := -1
	for i, c := range rep.Classes {
		if c.Name == class {
			ci = i
		}
	}
	for _, r := range rep.Runs {
		if r.Label != run || ci < 0 {
			continue
		}
		for bi, b := range rep.Bins {
			if b.Name == bin {
				return r.Classes[ci][bi]
			}
		}
	}
	t.Fatalf("no run %q class %q bin %q", run, class, bin)
	return BinStats{}
}

func TestWeightClassesEdges(t *testing.T) {
	// No weight rules: nothing to break down.
	if wc, err := NewWeightClasses(capture.DefaultConfig(), "", "x"); wc != nil || err != nil {
		t.Errorf("no rules: %v, %v; want nil, nil", wc, err)
	}
	for _, tc := range []struct {
		name string
		cfg  func(*capture.Config)
		def  string
		want []string // class names, in order
		err  string
	}{
		{name: "default name", cfg: func(*capture.Config) {}, want: []string{"gold", "silver", DefaultClassName}},
		{name: "unnamed rule", cfg: func(c *capture.Config) { c.Weights[0].Name = "" }, def: "b",
			want: []string{"weights[0]", "silver", "b"}},
		// A rule named like the default class: one class.
		{name: "default named by a rule", cfg: func(c *capture.Config) { c.Weights[0].Name = "bronze" }, def: "bronze",
			want: []string{"bronze", "silver"}},
		{name: "bad prefix", cfg: func(c *capture.Config) { c.Weights[1].Src = []string{"10.2.0.0/99"} }, err: "capture.weights[1]"},
		{name: "weight 0", cfg: func(c *capture.Config) { c.Weights[2].Weight = 0 }, err: "weights[2].weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := classCfg()
			tc.cfg(&c)
			wc, err := NewWeightClasses(c, tc.def, "x")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ci := range wc.Classes() {
				got = append(got, ci.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("classes %v, want %v", got, tc.want)
			}
		})
	}
	wc, err := NewWeightClasses(classCfg(), "", "x")
	if err != nil {
		t.Fatal(err)
	}
	bad := flow("10.0.0.1", "192.0.2.1", 80, 1, 1, 1)
	bad.Dst = "nope"
	if _, err := wc.Classify(&bad); err == nil {
		t.Error("unparsable truth address accepted")
	}
	mixed := flow("10.0.0.1", "2001:db8::1", 80, 1, 1, 1)
	if _, err := wc.Classify(&mixed); err == nil {
		t.Error("IPv4 -> IPv6 truth flow accepted")
	}
}
