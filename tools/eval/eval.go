// Package eval measures how well delay/loss estimates (results JSONL,
// docs/results.md) match the generator's ground truth: per (interval, flow) relative
// error of the mean delay and of the standard deviation, loss error and
// coverage, aggregated per flow-size bin the way the LDS paper's Fig. 9/10
// do, with a "global average" baseline computed from the truth alone.
package eval

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lds-net/lds/internal/jsonl"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/join"
	"github.com/lds-net/lds/tools/truth"
)

// BaselineLabel names the run that gives every flow the mean delay of all
// packets of its interval (the paper's "average" method).
const BaselineLabel = "global-average"

// Bin is a flow-size bin: flows with Min <= packets sent in the interval <=
// Max (Max 0: no upper bound).
type Bin struct {
	Name     string
	Min, Max int64
}

func (b Bin) has(n int64) bool { return n >= b.Min && (b.Max == 0 || n <= b.Max) }

// DefaultBins are the paper's Fig. 10 bins, then "all".
func DefaultBins() []Bin {
	return []Bin{
		{Name: ">=1000", Min: 1000},
		{Name: "100-999", Min: 100, Max: 999},
		{Name: "10-99", Min: 10, Max: 99},
		{Name: "1-9", Min: 1, Max: 9},
		{Name: ">=100", Min: 100},
		{Name: "all", Min: 0},
	}
}

// Options tune Evaluate.
type Options struct {
	Bins []Bin
	// Baseline adds the global-average run computed from the truth.
	Baseline bool
	// LossThreshold: an estimated loss at or above it counts as "loss
	// reported" (estimates are fractional); default 0.5 packets.
	LossThreshold float64
	// DelayOnly lists run labels that estimate no loss (RLI): their loss
	// rows say so instead of counting every loss as missed.
	DelayOnly []string
	// ShippedBytes: bytes each run (by label) moved between the two taps
	// over the whole trace, for the cost table (e.g. the sum of the
	// receiver's results.Interval.SketchBytes for an lds run). The exact
	// per-packet join's row is always computed from the truth.
	ShippedBytes map[string]float64
	// RLI, when set, adds the RLI emulation's bookkeeping to the report.
	RLI *RLIStats
	// Classes, when set, breaks every run down per flow-weight class as
	// well (RunReport.Classes, the paper's Fig. 12).
	Classes *WeightClasses
}

// DefaultOptions returns paper bins, baseline on, threshold 0.5.
func DefaultOptions() Options {
	return Options{Bins: DefaultBins(), Baseline: true, LossThreshold: 0.5}
}

// BinStats aggregates one run over one bin.
type BinStats struct {
	Bin string
	// Flows: truth (interval, flow) records in the bin. DelayFlows: of
	// those, the ones with at least one packet received (a true delay).
	Flows, DelayFlows int
	// Covered: DelayFlows with a delay estimate; Coverage = Covered/DelayFlows.
	Covered  int
	Coverage float64
	// Relative error |est-true|/true of the mean delay over the covered flows.
	MedianRelDelay, P95RelDelay, MeanRelDelay float64
	// Relative error of the standard deviation, over covered flows with a
	// true stddev > 0 and a stddev estimate (StdFlows of them).
	StdFlows        int
	MedianRelStddev float64
	// Loss, over the flows with a result record that gives a loss
	// (Reported of them); LossWithheld records withhold it (null:
	// capture drops, delays beyond the hold window).
	Reported       int
	LossWithheld   int
	LossFlows      int     // reported flows with true loss > 0
	MeanAbsLossErr float64 // mean |est loss - true loss|, packets
	FalseLoss      int     // true loss 0, estimate >= threshold
	MissedLoss     int     // true loss > 0, estimate < threshold
	// At the threshold of one packet: loss-free flows reported with loss
	// >= 1 (LossFree of them), and flows that lost >= 3 % of their packets
	// (Lost3) reported with loss >= 1 (Flagged3).
	LossFree, Wolf, Lost3, Flagged3 int
	// Delay distribution from the receiver's packet samples, over the
	// covered flows with a true stddev σ > 0 (SpreadFlows of them):
	// Quantiles of them carry p50/p90/p99; the errors are median
	// |estimate − truth| / σ over the flows that carry each quantile.
	SpreadFlows, Quantiles         int
	MedianP50Sigma, MedianP90Sigma float64
	MedianP99Sigma                 float64
	// Stddev rows by estimator (the record's stddev_from): median
	// relative error and flows.
	StdSamplesFlows, StdSketchFlows int
	MedianRelStdSamples             float64
	MedianRelStdSketch              float64
	// RelDelay holds the sorted relative errors (for the CDF plots).
	RelDelay []float64 `json:"-"`
}

// RunReport is one estimator (one results file) against the truth.
type RunReport struct {
	Label      string
	Records    int // result records read
	Matched    int // joined to a truth record
	Spurious   int // no truth record for (interval, flow)
	Duplicates int // a second record for the same (interval, flow); the first is kept
	NoLoss     bool
	Bins       []BinStats
	// Classes[c][b]: the flows of class Report.Classes[c] in bin
	// Report.Bins[b]; nil without Options.Classes.
	Classes [][]BinStats
	// ScenarioClasses: the flows of each scenario class of the truth
	// (TruthRecord.Class, sorted by name) in the >=1000 and 100-999 bins,
	// for the delay-distribution table; nil when the truth has one class.
	ScenarioClasses []ScenarioClass
}

// ScenarioClass is one scenario (delay) class of the truth.
type ScenarioClass struct {
	Name string
	Bins []BinStats
}

// CostRow is one line of the cost table: bytes a method moves between the
// taps over the whole trace.
type CostRow struct {
	Label       string
	Bytes       float64
	PerInterval float64 // Bytes / intervals of the truth
	PerPacket   float64 // Bytes / packets sent
	VsExact     float64 // Bytes / the exact join's bytes
	Note        string
}

// Report is the whole evaluation.
type Report struct {
	Intervals     int
	TruthRecords  int
	PacketsSent   int64
	PacketsRecv   int64
	Bins          []Bin
	Runs          []RunReport // labels sorted, baseline last
	LossThreshold float64
	// Cost: the exact per-packet join first, then Options.ShippedBytes by label.
	Cost []CostRow
	RLI  *RLIStats
	// Classes are the flow-weight classes (Options.Classes), ClassSource
	// where their rules came from; nil/"" without Options.Classes.
	Classes     []ClassInfo
	ClassSource string
}

// Evaluate compares every run with the truth using DefaultOptions.
func Evaluate(truth []truth.Record, runs map[string][]results.FlowRecord) (Report, error) {
	return EvaluateWith(truth, runs, DefaultOptions())
}

// EvaluateWith compares every run with the truth.
func EvaluateWith(truth []truth.Record, runs map[string][]results.FlowRecord, opt Options) (Report, error) {
	if len(opt.Bins) == 0 {
		opt.Bins = DefaultBins()
	}
	if opt.LossThreshold <= 0 {
		opt.LossThreshold = 0.5
	}
	rep := Report{Bins: opt.Bins, TruthRecords: len(truth), LossThreshold: opt.LossThreshold, RLI: opt.RLI}
	var exportBytes float64
	tNS := truthInterval(truth)
	idx := make(map[join.FlowID]int, len(truth))
	ivs := map[int64]struct{}{}
	for i := range truth {
		t := &truth[i]
		k, err := truthKey(t)
		if err != nil {
			return rep, err
		}
		if _, dup := idx[k]; dup {
			return rep, fmt.Errorf("truth has two records for interval %d flow %s -> %s %d/%d/%d: not a generator truth file?",
				t.Interval, t.Src, t.Dst, t.SPort, t.DPort, t.Proto)
		}
		idx[k] = i
		exportBytes += ExportBytes(t, k.Key.V6, tNS)
		ivs[t.Interval] = struct{}{}
		rep.PacketsSent += t.Sent
		rep.PacketsRecv += t.Received
	}
	rep.Intervals = len(ivs)
	var cls []int
	if opt.Classes != nil {
		var err error
		if cls, rep.Classes, err = opt.Classes.classify(truth); err != nil {
			return rep, err
		}
		rep.ClassSource = opt.Classes.Source()
	}

	labels := make([]string, 0, len(runs))
	for l := range runs {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	for _, l := range labels {
		rep.Runs = append(rep.Runs, evalRun(l, truth, idx, runs[l], opt, cls, len(rep.Classes)))
	}
	if opt.Baseline {
		rep.Runs = append(rep.Runs, evalRun(BaselineLabel, truth, idx, GlobalAverage(truth), opt, cls, len(rep.Classes)))
	}
	for i := range rep.Runs {
		rep.Runs[i].NoLoss = slices.Contains(opt.DelayOnly, rep.Runs[i].Label)
	}
	rep.Cost = costRows(exportBytes, tNS, rep.Intervals, rep.PacketsSent, opt.ShippedBytes)
	return rep, nil
}

// truthInterval recovers T from the truth (start_ns = interval x T); 1 s if
// it cannot.
func truthInterval(truth []truth.Record) int64 {
	for i := range truth {
		if iv := truth[i].Interval; iv != 0 && truth[i].StartNS%iv == 0 && truth[i].StartNS/iv > 0 {
			return truth[i].StartNS / iv
		}
	}
	return int64(time.Second)
}

func costRows(exportBytes float64, tNS int64, intervals int, sent int64, shipped map[string]float64) []CostRow {
	row := func(l string, b float64, note string) CostRow {
		vs := math.NaN()
		if exportBytes > 0 {
			vs = b / exportBytes
		}
		return CostRow{Label: l, Bytes: b, PerInterval: b / float64(max(intervals, 1)),
			PerPacket: b / float64(max(sent, 1)), VsExact: vs, Note: note}
	}
	rows := []CostRow{row(ExactLabel, exportBytes, fmt.Sprintf(
		"per packet sent: %d B hash + %d B send time; per (interval, flow): key (%d B IPv4 / %d B IPv6) + %d B count; zero error by definition",
		ExportHashBytes, ExportTimeBytes(tNS), ExportKeyBytesV4, ExportKeyBytesV6, ExportCountBytes))}
	labels := make([]string, 0, len(shipped))
	for l := range shipped {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	for _, l := range labels {
		note := "given by the caller"
		if strings.HasPrefix(l, "rli-") {
			note = fmt.Sprintf("passive emulation: %d B (hash + send time) per reference; active RLI injects probe packets instead", ExportHashBytes+ExportTimeBytes(tNS))
		}
		rows = append(rows, row(l, shipped[l], note))
	}
	return rows
}

// truthKey names a truth record's flow in its interval.
func truthKey(t *truth.Record) (join.FlowID, error) {
	k, err := t.Key()
	if err != nil {
		return join.FlowID{}, err
	}
	return join.FlowID{Interval: t.Interval, Key: k}, nil
}

// per-flow outcome of one run
type flowEval struct {
	has      bool // a result record exists
	delay    float64
	hasDelay bool
	std      float64
	hasStd   bool
	stdFrom  string
	p        [3]*float64 // p50, p90, p99
	loss     float64
	hasLoss  bool // false: the record withholds its loss (null)
}

// evalRun joins one run to the truth and aggregates it per bin and, when
// cls is set (class index per truth record), per class and bin.
func evalRun(label string, truth []truth.Record, idx map[join.FlowID]int, recs []results.FlowRecord, opt Options, cls []int, nClasses int) RunReport {
	rr := RunReport{Label: label, Records: len(recs)}
	fe := make([]flowEval, len(truth))
	for i := range recs {
		r := &recs[i]
		ti, ok := idx[join.FlowID{Interval: r.Interval, Key: r.Key}]
		if !ok {
			rr.Spurious++
			continue
		}
		if fe[ti].has {
			rr.Duplicates++
			continue
		}
		rr.Matched++
		e := flowEval{has: true}
		if r.Loss != nil {
			e.loss, e.hasLoss = *r.Loss, true
		}
		if r.DelayNS != nil && !math.IsNaN(*r.DelayNS) {
			e.delay, e.hasDelay = *r.DelayNS, true
		}
		if r.StddevNS != nil && !math.IsNaN(*r.StddevNS) {
			e.std, e.hasStd = *r.StddevNS, true
		}
		e.stdFrom, e.p = r.StddevFrom, [3]*float64{r.P50NS, r.P90NS, r.P99NS}
		fe[ti] = e
	}
	for _, b := range opt.Bins {
		rr.Bins = append(rr.Bins, binStats(b, truth, fe, opt, nil, 0))
	}
	rr.ScenarioClasses = scenarioClasses(truth, fe, opt)
	if cls != nil {
		rr.Classes = make([][]BinStats, nClasses)
		for c := range nClasses {
			for _, b := range opt.Bins {
				rr.Classes[c] = append(rr.Classes[c], binStats(b, truth, fe, opt, cls, c))
			}
		}
	}
	return rr
}

// scenarioClasses breaks the large-flow bins down by the truth's class.
func scenarioClasses(truth []truth.Record, fe []flowEval, opt Options) []ScenarioClass {
	idx := map[string]int{}
	for i := range truth {
		if _, ok := idx[truth[i].Class]; !ok {
			idx[truth[i].Class] = len(idx)
		}
	}
	if len(idx) < 2 {
		return nil
	}
	names := make([]string, 0, len(idx))
	for n := range idx {
		names = append(names, n)
	}
	slices.Sort(names)
	cls := make([]int, len(truth))
	for i := range truth {
		cls[i] = idx[truth[i].Class]
	}
	var out []ScenarioClass
	for _, n := range names {
		sc := ScenarioClass{Name: n}
		for _, b := range opt.Bins {
			if b.Name == ">=1000" || b.Name == "100-999" {
				sc.Bins = append(sc.Bins, binStats(b, truth, fe, opt, cls, idx[n]))
			}
		}
		out = append(out, sc)
	}
	return out
}

// binStats aggregates the flows of bin b (and, with cls, of class c only).
func binStats(b Bin, truth []truth.Record, fe []flowEval, opt Options, cls []int, c int) BinStats {
	bs := BinStats{Bin: b.Name}
	var stdErr, stdSmp, stdSk []float64
	var qErr [3][]float64
	var lossErrSum float64
	for i := range truth {
		t := &truth[i]
		if !b.has(t.Sent) || (cls != nil && cls[i] != c) {
			continue
		}
		bs.Flows++
		e := fe[i]
		if e.has && !e.hasLoss {
			bs.LossWithheld++
		}
		if e.has && e.hasLoss {
			bs.Reported++
			lossErrSum += math.Abs(e.loss - float64(t.Lost))
			if t.Lost > 0 {
				bs.LossFlows++
				if e.loss < opt.LossThreshold {
					bs.MissedLoss++
				}
			} else if e.loss >= opt.LossThreshold {
				bs.FalseLoss++
			}
			if t.Lost == 0 {
				bs.LossFree++
				if e.loss >= 1 {
					bs.Wolf++
				}
			} else if float64(t.Lost) >= 0.03*float64(t.Sent) {
				bs.Lost3++
				if e.loss >= 1 {
					bs.Flagged3++
				}
			}
		}
		if t.DelayNS == nil || *t.DelayNS <= 0 {
			continue
		}
		bs.DelayFlows++
		if !e.hasDelay {
			continue
		}
		bs.Covered++
		bs.RelDelay = append(bs.RelDelay, math.Abs(e.delay-*t.DelayNS) / *t.DelayNS)
		if e.hasStd && t.StddevNS != nil && *t.StddevNS > 0 {
			rel := math.Abs(e.std-*t.StddevNS) / *t.StddevNS
			stdErr = append(stdErr, rel)
			if e.stdFrom == "samples" {
				stdSmp = append(stdSmp, rel)
			} else {
				stdSk = append(stdSk, rel)
			}
		}
		if t.StddevNS != nil && *t.StddevNS > 0 {
			bs.SpreadFlows++
			tq := [3]*float64{t.P50NS, t.P90NS, t.P99NS}
			if e.p[2] != nil {
				bs.Quantiles++
			}
			for q := range 3 {
				if e.p[q] != nil && tq[q] != nil {
					qErr[q] = append(qErr[q], math.Abs(*e.p[q]-*tq[q]) / *t.StddevNS)
				}
			}
		}
	}
	for q := range qErr {
		slices.Sort(qErr[q])
	}
	slices.Sort(stdSmp)
	slices.Sort(stdSk)
	bs.MedianP50Sigma, bs.MedianP90Sigma, bs.MedianP99Sigma = Quantile(qErr[0], 0.5), Quantile(qErr[1], 0.5), Quantile(qErr[2], 0.5)
	bs.StdSamplesFlows, bs.StdSketchFlows = len(stdSmp), len(stdSk)
	bs.MedianRelStdSamples, bs.MedianRelStdSketch = Quantile(stdSmp, 0.5), Quantile(stdSk, 0.5)
	slices.Sort(bs.RelDelay)
	slices.Sort(stdErr)
	bs.Coverage = ratio(bs.Covered, bs.DelayFlows)
	bs.MedianRelDelay = Quantile(bs.RelDelay, 0.5)
	bs.P95RelDelay = Quantile(bs.RelDelay, 0.95)
	bs.MeanRelDelay = mean(bs.RelDelay)
	bs.StdFlows = len(stdErr)
	bs.MedianRelStddev = Quantile(stdErr, 0.5)
	bs.MeanAbsLossErr = math.NaN()
	if bs.Reported > 0 {
		bs.MeanAbsLossErr = lossErrSum / float64(bs.Reported)
	}
	return bs
}

func ratio(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func mean(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// Quantile of sorted data by linear interpolation between closest ranks
// (Hyndman–Fan type 7, as numpy's default); NaN for no data.
func Quantile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	h := p * float64(n-1)
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// GlobalAverage builds the baseline run from the truth: in each interval,
// every flow with a received packet gets the mean delay and the standard
// deviation of all packets received in that interval, and the interval's
// loss ratio times its packets as loss.
func GlobalAverage(truth []truth.Record) []results.FlowRecord {
	type agg struct {
		n, sent, lost int64
		mean, m2      float64
	}
	per := map[int64]*agg{}
	for i := range truth {
		t := &truth[i]
		a := per[t.Interval]
		if a == nil {
			a = &agg{}
			per[t.Interval] = a
		}
		a.sent += t.Sent
		a.lost += t.Lost
		if t.Received == 0 || t.DelayNS == nil {
			continue
		}
		// Chan et al.'s pairwise combination of (count, mean, M2).
		nb := float64(t.Received)
		mb := *t.DelayNS
		m2b := 0.0
		if t.StddevNS != nil {
			m2b = *t.StddevNS * *t.StddevNS * nb
		}
		na := float64(a.n)
		delta := mb - a.mean
		tot := na + nb
		a.mean += delta * nb / tot
		a.m2 += m2b + delta*delta*na*nb/tot
		a.n += t.Received
	}
	out := make([]results.FlowRecord, 0, len(truth))
	for i := range truth {
		t := &truth[i]
		a := per[t.Interval]
		k, err := t.Key()
		if err != nil {
			continue // not a flow (EvaluateWith refuses such a truth)
		}
		r := results.FlowRecord{Interval: t.Interval, StartNS: t.StartNS, Key: k, Packets: float64(t.Sent),
			Estimator: BaselineLabel}
		if a.sent > 0 {
			r.Loss = results.Float(float64(a.lost) / float64(a.sent) * float64(t.Sent))
		}
		if a.n > 0 {
			r.DelayNS = results.Float(a.mean)
			r.StddevNS = results.Float(math.Sqrt(a.m2 / float64(a.n)))
			r.Samples = float64(a.n)
		}
		out = append(out, r)
	}
	return out
}

// ReadResults reads a results JSONL stream (docs/results.md). Blank lines are
// skipped; a line that is not a flow record (no src/dst, or addresses that
// do not parse as one flow key) is an error naming the line.
func ReadResults(r io.Reader) ([]results.FlowRecord, error) {
	return jsonl.Read[results.FlowRecord](r, "results", 4<<20, nil)
}

// ReadResultsFile reads a results JSONL file.
func ReadResultsFile(path string) ([]results.FlowRecord, error) {
	return jsonl.ReadFile(path, "results", ReadResults)
}

// ReadTruth reads a ground truth (see truth.Record).
func ReadTruth(r io.Reader) ([]truth.Record, error) { return truth.Read(r) }

// ReadTruthFile reads a ground-truth JSONL file.
func ReadTruthFile(path string) ([]truth.Record, error) { return truth.ReadFile(path) }
