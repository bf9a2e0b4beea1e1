package gen

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestScenarioFiles(t *testing.T) {
	demo, err := LoadScenario(filepath.Join("..", "..", "configs", "scenarios", "demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(demo, DefaultScenario()) {
		t.Errorf("demo.yaml differs from DefaultScenario():\n%+v\n%+v", demo, DefaultScenario())
	}
	paper, err := LoadScenario(filepath.Join("..", "..", "configs", "scenarios", "paper.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if paper.Flows != 146000 || paper.Duration != 290*time.Second || len(paper.Classes) != 1 {
		t.Errorf("paper.yaml: %d flows over %v, %d classes", paper.Flows, paper.Duration, len(paper.Classes))
	}
	if paper.Headers.VLAN != VLANNone || paper.Headers.ECNCE != 0 {
		t.Errorf("paper.yaml header changes not applied over the defaults: %+v", paper.Headers)
	}
	if first, last := paper.StartNS/int64(paper.Interval), (paper.StartNS+int64(paper.Duration)-1)/int64(paper.Interval); first != last {
		t.Errorf("paper.yaml spans intervals %d..%d, want one", first, last)
	}
}

func TestScenarioYAMLRoundTrip(t *testing.T) {
	sc := DefaultScenario()
	sc.Classes = append(sc.Classes, Class{Name: "p", Weight: 1,
		Delay: DelayModel{Kind: DelayPriority, HighFraction: 0.2, Queue: time.Millisecond, Period: time.Second,
			High: &DelayModel{Kind: DelayConstant, Value: 100 * time.Microsecond},
			Low:  &DelayModel{Kind: DelayUniform, Min: time.Microsecond, Max: 2 * time.Millisecond}}})
	b, err := yaml.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseScenario(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(got, sc) {
		b2, _ := yaml.Marshal(got)
		t.Errorf("round trip changed the scenario:\n%s\n----\n%s", b, b2)
	}
	if _, err := ParseScenario([]byte("flows: [1")); err == nil {
		t.Error("broken YAML accepted")
	}
	if _, err := ParseScenario([]byte("flows: -3")); err == nil {
		t.Error("invalid scenario accepted")
	}
}

// TestDelayModels checks each model's sample mean against its analytic mean
// and that bounded delays stay in (0, max).
func TestDelayModels(t *testing.T) {
	us := float64(time.Microsecond)
	for _, tc := range []struct {
		name string
		m    DelayModel
		mean float64 // ns
		tol  float64 // relative
	}{
		{"constant", DelayModel{Kind: DelayConstant, Value: 700 * time.Microsecond}, 700 * us, 0},
		{"uniform", DelayModel{Kind: DelayUniform, Min: 100 * time.Microsecond, Max: 300 * time.Microsecond}, 200 * us, 0.01},
		{"weibull", DelayModel{Kind: DelayWeibull, Offset: 50 * time.Microsecond, Shape: 2, Scale: 100 * time.Microsecond},
			50*us + 100*us*math.Gamma(1.5), 0.01},
		{"pareto", DelayModel{Kind: DelayPareto, Offset: 10 * time.Microsecond, Shape: 3, Scale: 100 * time.Microsecond},
			10*us + 100*us*3/2, 0.02},
		{"bimodal", DelayModel{Kind: DelayBimodal, P: 0.25,
			A: &DelayModel{Kind: DelayConstant, Value: 100 * time.Microsecond},
			B: &DelayModel{Kind: DelayConstant, Value: 500 * time.Microsecond}}, 0.25*100*us + 0.75*500*us, 0.01},
		{"priority-all-high", DelayModel{Kind: DelayPriority, HighFraction: 1, Queue: 5 * time.Millisecond, Period: time.Second,
			High: &DelayModel{Kind: DelayConstant, Value: 100 * time.Microsecond},
			Low:  &DelayModel{Kind: DelayConstant, Value: 900 * time.Microsecond}}, 100 * us, 0},
		{"ecmp-one-path", DelayModel{Kind: DelayECMP, Paths: []Path{{Base: time.Millisecond, Weight: 1}},
			Jitter: &DelayModel{Kind: DelayUniform, Min: 0, Max: 20 * time.Microsecond}}, 1000*us + 10*us, 0.001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var salt uint64
			s := compileDelay(&tc.m, &salt, rng)
			const n = 200000
			var sum float64
			for i := range n {
				d := s.boundedDelay(rng, uint64(i), int64(i)*1000, int64(50*time.Millisecond))
				if d < 1 || d >= int64(50*time.Millisecond) {
					t.Fatalf("delay %d out of range", d)
				}
				sum += float64(d)
			}
			mean := sum / n
			if math.Abs(mean-tc.mean) > tc.tol*tc.mean+1 {
				t.Errorf("mean %.1f ns, want %.1f ± %.1f%%", mean, tc.mean, 100*tc.tol)
			}
		})
	}
}

// TestPerFlowChoices: ECMP paths and per-flow bimodal modes are fixed per
// flow, and split the flows by their weights.
func TestPerFlowChoices(t *testing.T) {
	m := DelayModel{Kind: DelayECMP, Paths: []Path{{Base: time.Millisecond, Weight: 3}, {Base: 5 * time.Millisecond, Weight: 1}}}
	rng := rand.New(rand.NewPCG(3, 4))
	var salt uint64
	s := compileDelay(&m, &salt, rng)
	slow := 0
	const flows = 20000
	for fw := range uint64(flows) {
		word := splitmix(fw)
		first := s.boundedDelay(rng, word, 0, int64(time.Second))
		for k := range 5 {
			if d := s.boundedDelay(rng, word, int64(k), int64(time.Second)); d != first {
				t.Fatalf("flow changed path: %d then %d", first, d)
			}
		}
		if first == int64(5*time.Millisecond) {
			slow++
		}
	}
	if f := float64(slow) / flows; math.Abs(f-0.25) > 0.02 {
		t.Errorf("slow path share %.3f, want 0.25", f)
	}
}

func TestBoundedDelayClamps(t *testing.T) {
	m := DelayModel{Kind: DelayConstant, Value: time.Second}
	rng := rand.New(rand.NewPCG(1, 1))
	var salt uint64
	s := compileDelay(&m, &salt, rng)
	if d := s.boundedDelay(rng, 0, 0, int64(50*time.Millisecond)); d != int64(50*time.Millisecond)-1 {
		t.Errorf("delay above max clamped to %d", d)
	}
}

func TestLossModels(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    LossModel
		want float64
	}{
		{"none", LossModel{Kind: LossNone}, 0},
		{"uniform", LossModel{Kind: LossUniform, P: 0.03}, 0.03},
		// Stationary P(bad) = p_gb / (p_gb + p_bg) = 0.01/0.11.
		{"gilbert", LossModel{Kind: LossGilbert, PGB: 0.01, PBG: 0.1, LossGood: 0.001, LossBad: 0.6},
			0.001*(0.1/0.11) + 0.6*(0.01/0.11)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			l := lossState{m: tc.m}
			const n = 400000
			lost, runs, prev := 0, 0, false
			for range n {
				x := l.lost(rng)
				if x {
					lost++
					if !prev {
						runs++
					}
				}
				prev = x
			}
			got := float64(lost) / n
			if math.Abs(got-tc.want) > 0.1*tc.want+1e-9 {
				t.Errorf("loss rate %.4f, want %.4f", got, tc.want)
			}
			if tc.m.Kind == LossGilbert && float64(lost)/float64(runs) < 1.3 {
				t.Errorf("gilbert losses not bursty: mean run %.2f", float64(lost)/float64(runs))
			}
		})
	}
}

// FuzzParseScenario: any input either fails with an error or yields a
// scenario that passes Validate; never a panic.
func FuzzParseScenario(f *testing.F) {
	f.Add([]byte("flows: 10\nrate_pps: 100\n"))
	f.Add([]byte("classes:\n  - name: x\n    weight: 1\n    delay: {kind: bimodal, p: 0.5, a: {kind: constant, value: 1ms}}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := ParseScenario(b)
		if err != nil {
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("parsed scenario fails Validate: %v", err)
		}
	})
}

// TestScenarioUnknownKey: a misspelt scenario key is refused by its path
// and line, never ignored (which would generate the default scenario).
func TestScenarioUnknownKey(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"flowz: 10\n", "flowz (line 1): unknown key; the top level has:"},
		{"classes:\n  - name: a\n    delay_mod: {}\n", "classes[0].delay_mod (line 3): unknown key"},
	} {
		_, err := ParseScenario([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "docs/gen-eval.md") {
			t.Errorf("%q: %v, want an error naming %q and docs/gen-eval.md", tc.yaml, err, tc.want)
		}
	}
}
