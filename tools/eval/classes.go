package eval

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/tools/truth"
)

// DefaultClassName names the class of flows no weight rule matches (weight 1)
// unless the caller names it (the paper calls it "bronze").
const DefaultClassName = "default"

// ClassInfo describes one flow-weight class of the report.
type ClassInfo struct {
	Name string
	// Weight the classifying configuration gives the class ("1" for the
	// default class; several values when rules of one name disagree).
	Weight string
	// Rules: the matching rules of the class, as in the YAML ("" for the
	// default class).
	Rules string
	// Flows: truth (interval, flow) records of the class.
	Flows int
}

// WeightClasses assigns truth flows to the classes of a configuration's
// capture.weights rules, exactly as the daemons weight packets: the first
// matching rule wins (match.First over the rules compiled by match.Rule.Compile,
// the calls capture.NewParser and Parser.Parse make), and every assignment
// is checked against capture.Parser.WeightOf, the daemons' own weight of the
// key. Rules with the same name form one class; flows no rule matches form
// the default class.
type WeightClasses struct {
	source    string
	rules     []match.Compiled
	weights   []uint32
	ruleClass []int // rule index -> class index
	classes   []ClassInfo
	def       int // class index of unmatched flows
	parser    *capture.Parser
}

// NewWeightClasses builds the classifier from cfg (the capture section the
// runs were made with, seed filled in: config.Common.CaptureConfig).
// defaultClass names unmatched flows ("" = DefaultClassName); source says
// where cfg came from, for the report. It returns (nil, nil) when cfg has no
// weight rules: there is nothing to break down.
func NewWeightClasses(cfg capture.Config, defaultClass, source string) (*WeightClasses, error) {
	if len(cfg.Weights) == 0 {
		return nil, nil
	}
	p, err := capture.NewParser(cfg)
	if err != nil {
		return nil, fmt.Errorf("weight classes: capture configuration %s: %w", source, err)
	}
	if defaultClass == "" {
		defaultClass = DefaultClassName
	}
	w := &WeightClasses{source: source, parser: p, def: -1}
	byName := map[string]int{}
	classOf := func(name string) int {
		if i, ok := byName[name]; ok {
			return i
		}
		byName[name] = len(w.classes)
		w.classes = append(w.classes, ClassInfo{Name: name})
		return len(w.classes) - 1
	}
	var ruleText [][]string
	for i, r := range cfg.Weights {
		c, err := r.Rule.Compile(fmt.Sprintf("capture.weights[%d]", i))
		if err != nil {
			return nil, fmt.Errorf("weight classes: %w", err)
		}
		name := r.Name
		if name == "" {
			name = fmt.Sprintf("weights[%d]", i)
		}
		ci := classOf(name)
		w.rules = append(w.rules, c)
		w.weights = append(w.weights, r.Weight)
		w.ruleClass = append(w.ruleClass, ci)
		for len(ruleText) <= ci {
			ruleText = append(ruleText, nil)
		}
		ruleText[ci] = append(ruleText[ci], describeRule(r.Rule))
		ws := strconv.FormatUint(uint64(r.Weight), 10)
		if cur := w.classes[ci].Weight; cur == "" {
			w.classes[ci].Weight = ws
		} else if !slices.Contains(strings.Split(cur, ", "), ws) {
			w.classes[ci].Weight = cur + ", " + ws
		}
	}
	w.def = classOf(defaultClass)
	if w.classes[w.def].Weight == "" {
		w.classes[w.def].Weight = "1"
	}
	for len(ruleText) < len(w.classes) {
		ruleText = append(ruleText, nil)
	}
	ruleText[w.def] = append(ruleText[w.def], "no rule matches")
	for ci := range w.classes {
		w.classes[ci].Rules = strings.Join(ruleText[ci], "; or ")
	}
	return w, nil
}

// Classes returns the classes in rule order, the default class last unless
// a rule of the same name came first.
func (w *WeightClasses) Classes() []ClassInfo { return slices.Clone(w.classes) }

// Source is where the rules came from.
func (w *WeightClasses) Source() string { return w.source }

// Classify returns the class index (into Classes) of truth flow t.
func (w *WeightClasses) Classify(t *truth.Record) (int, error) {
	fk, err := t.Key()
	if err != nil {
		return 0, err
	}
	i := match.First(w.rules, fk.SrcAddr(), fk.DstAddr(), fk.Proto, fk.SPort, fk.DPort)
	want, ci := uint32(1), w.def
	if i >= 0 {
		want, ci = w.weights[i], w.ruleClass[i]
	}
	// The daemons weight by the parser; a disagreement means this
	// classification is not the one the sketches saw.
	if got := w.parser.WeightOf(fk); got != want {
		return 0, fmt.Errorf("weight classes: flow %s gets weight %d from the capture parser but %d from rule %d: the classification would not match the daemons'", fk, got, want, i)
	}
	return ci, nil
}

// describeRule renders a rule's non-empty lists (ANDed; entries ORed), e.g.
// "src 10.0.0.0/15, 10.2.0.0/15 and dport 443".
func describeRule(r match.Rule) string {
	var parts []string
	add := func(k string, v []string) {
		if len(v) > 0 {
			parts = append(parts, k+" "+strings.Join(v, ", "))
		}
	}
	add("src", r.Src)
	add("dst", r.Dst)
	var pr []string
	for _, p := range r.Proto {
		pr = append(pr, strconv.Itoa(p))
	}
	add("proto", pr)
	add("sport", r.SPort)
	add("dport", r.DPort)
	if len(parts) == 0 {
		return "everything"
	}
	return strings.Join(parts, " and ")
}

// classify assigns every truth record a class index.
func (w *WeightClasses) classify(truth []truth.Record) ([]int, []ClassInfo, error) {
	cls := make([]int, len(truth))
	infos := w.Classes()
	for i := range truth {
		c, err := w.Classify(&truth[i])
		if err != nil {
			return nil, nil, err
		}
		cls[i] = c
		infos[c].Flows++
	}
	return cls, infos, nil
}
