package eval

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

func pct(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.3g%%", 100*v)
}

func num(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.3g", v)
}

// WriteMarkdown writes the report as Markdown tables: delay accuracy per
// bin and run, loss per bin and run, and the join bookkeeping per run.
func (r Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Accuracy against ground truth\n\n")
	fmt.Fprintf(&b, "Truth: %d intervals, %d (interval, flow) records, %d packets sent, %d received (%.3g%% lost).\n\n",
		r.Intervals, r.TruthRecords, r.PacketsSent, r.PacketsRecv, 100*ratio(int(r.PacketsSent-r.PacketsRecv), int(r.PacketsSent)))
	fmt.Fprintf(&b, "Flows are binned by the packets they sent in the interval. Relative error = |estimate − truth| / truth, over the flows that have an estimate; coverage = flows with a delay estimate / flows with a received packet. `%s` gives every flow its interval's mean delay over all packets (the paper's baseline).\n\n", BaselineLabel)

	fmt.Fprintf(&b, "## Mean delay\n\n")
	fmt.Fprintf(&b, "| bin | run | flows | coverage | median rel. err | p95 rel. err | mean rel. err | median stddev rel. err (flows) |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|\n")
	for bi, bin := range r.Bins {
		for _, run := range r.Runs {
			s := run.Bins[bi]
			fmt.Fprintf(&b, "| %s | %s | %d | %s (%d/%d) | %s | %s | %s | %s (%d) |\n", bin.Name, run.Label, s.DelayFlows,
				pct(s.Coverage), s.Covered, s.DelayFlows, pct(s.MedianRelDelay), pct(s.P95RelDelay), pct(s.MeanRelDelay),
				pct(s.MedianRelStddev), s.StdFlows)
		}
	}
	r.writeDistribution(&b)
	fmt.Fprintf(&b, "\n## Loss\n\n")
	fmt.Fprintf(&b, "Estimated loss ≥ %g packets counts as loss reported.\n\n", r.LossThreshold)
	fmt.Fprintf(&b, "The last two columns use a threshold of one packet: loss-free flows reported with loss ≥ 1, and flows that lost ≥ 3 %% of their packets reported with loss ≥ 1.\n\n")
	fmt.Fprintf(&b, "| bin | run | flows reported | flows with loss | mean abs. loss err (pkts) | false loss | missed loss | loss ≥ 1 on loss-free | lost ≥ 3 %% flagged |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for bi, bin := range r.Bins {
		for _, run := range r.Runs {
			s := run.Bins[bi]
			if run.NoLoss {
				fmt.Fprintf(&b, "| %s | %s | %d | %d | not estimated | – | – | – | – |\n", bin.Name, run.Label, s.Reported, s.LossFlows)
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %d | %d | %s (%d/%d) | %s (%d/%d) |\n", bin.Name, run.Label, s.Reported, s.LossFlows,
				num(s.MeanAbsLossErr), s.FalseLoss, s.MissedLoss, pct(ratio(s.Wolf, s.LossFree)), s.Wolf, s.LossFree,
				pct(ratio(s.Flagged3, s.Lost3)), s.Flagged3, s.Lost3)
		}
	}
	r.writeBaselines(&b)
	fmt.Fprintf(&b, "\n## Records\n\n")
	fmt.Fprintf(&b, "| run | records | matched | spurious | duplicates |\n|---|---:|---:|---:|---:|\n")
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d |\n", run.Label, run.Records, run.Matched, run.Spurious, run.Duplicates)
	}
	r.writeClasses(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeDistribution is the delay distribution from packet samples: the
// quantiles' errors in units of the flow's true delay spread σ, and the
// stddev's error by the estimator each record used.
func (r Report) writeDistribution(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Delay distribution\n\n")
	fmt.Fprintf(b, "Over the flows with a true delay spread σ > 0: how many carry p50/p90/p99 (from joined packet samples), the median |estimate − truth| / σ of each quantile, and the median relative error of `stddev_ns` split by `stddev_from` (samples, or the sketch's sign-hash estimate).\n\n")
	fmt.Fprintf(b, "| bin | run | flows | with quantiles | p50 err/σ | p90 err/σ | p99 err/σ | stddev rel. err, samples (flows) | stddev rel. err, sketch (flows) |\n")
	fmt.Fprintf(b, "|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for bi, bin := range r.Bins {
		for _, run := range r.Runs {
			s := run.Bins[bi]
			fmt.Fprintf(b, "| %s | %s | %d | %s (%d) | %s | %s | %s | %s (%d) | %s (%d) |\n", bin.Name, run.Label, s.SpreadFlows,
				pct(ratio(s.Quantiles, s.SpreadFlows)), s.Quantiles, num(s.MedianP50Sigma), num(s.MedianP90Sigma), num(s.MedianP99Sigma),
				pct(s.MedianRelStdSamples), s.StdSamplesFlows, pct(s.MedianRelStdSketch), s.StdSketchFlows)
		}
	}
	var anyClasses bool
	for _, run := range r.Runs {
		anyClasses = anyClasses || len(run.ScenarioClasses) > 0
	}
	if !anyClasses {
		return
	}
	fmt.Fprintf(b, "\nBy the truth's scenario class (the `class` of each truth record):\n\n")
	fmt.Fprintf(b, "| class | bin | run | flows | with quantiles | p50 err/σ | p90 err/σ | p99 err/σ | stddev rel. err, samples (flows) |\n")
	fmt.Fprintf(b, "|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, run := range r.Runs {
		if run.Label == BaselineLabel {
			continue // carries no quantiles
		}
		for _, sc := range run.ScenarioClasses {
			for _, s := range sc.Bins {
				fmt.Fprintf(b, "| %s | %s | %s | %d | %s (%d) | %s | %s | %s | %s (%d) |\n", sc.Name, s.Bin, run.Label, s.SpreadFlows,
					pct(ratio(s.Quantiles, s.SpreadFlows)), s.Quantiles, num(s.MedianP50Sigma), num(s.MedianP90Sigma), num(s.MedianP99Sigma),
					pct(s.MedianRelStdSamples), s.StdSamplesFlows)
			}
		}
	}
}

func (r Report) writeBaselines(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Baselines\n\n")
	fmt.Fprintf(b, "- `%s`: every sender-tap packet looked up at the receiver tap by its identity. Its error is zero by definition (it is the truth); its price is in the cost table below.\n", ExactLabel)
	fmt.Fprintf(b, "- `%s`: every flow gets its interval's mean delay over all received packets (the paper's \"average\").\n", BaselineLabel)
	if s := r.RLI; s != nil {
		fmt.Fprintf(b, "- `%s`: Reference Latency Interpolation emulated passively. The first packet sent in each %s tick is a reference with its exact delay; every other received packet gets the delay interpolated linearly, in receive time, between the references received before and after it; per-flow delay = mean of its packets' estimates. RLI estimates no loss.\n\n",
			RLILabel(s.RateHz), time.Duration(s.TickNS))
		fmt.Fprintf(b, "| RLI | value |\n|---|---:|\n")
		fmt.Fprintf(b, "| packets sent / received | %d / %d |\n", s.Packets, s.Received)
		fmt.Fprintf(b, "| ticks with traffic | %d |\n", s.Ticks)
		fmt.Fprintf(b, "| references (usable) | %d (%.4g /s, configured %g /s) |\n", s.References, s.AchievedHz(), s.RateHz)
		fmt.Fprintf(b, "| references lost (tick without one) | %d |\n", s.LostReferences)
		fmt.Fprintf(b, "| regular packets interpolated | %d |\n", s.Interpolated)
		fmt.Fprintf(b, "| extrapolated flat (before first / after last reference) | %d |\n", s.Extrapolated)
		fmt.Fprintf(b, "| without estimate (no reference at all) | %d |\n", s.Unestimated)
		fmt.Fprintf(b, "| max packets buffered between references | %d |\n", s.MaxBuffered)
		fmt.Fprintf(b, "| packets out of send order | %d |\n", s.OutOfOrder)
	}
	if len(r.Cost) > 0 {
		fmt.Fprintf(b, "\n## Cost\n\n")
		fmt.Fprintf(b, "Bytes moved between the two taps to produce the per-flow results, over the %d interval(s) of the truth (%d packets sent).\n\n", r.Intervals, r.PacketsSent)
		fmt.Fprintf(b, "| method | bytes | per interval | per packet sent | vs exact join | what is counted |\n|---|---:|---:|---:|---:|---|\n")
		for _, c := range r.Cost {
			fmt.Fprintf(b, "| %s | %.0f | %.0f | %.3g | %s | %s |\n", c.Label, c.Bytes, c.PerInterval, c.PerPacket, pct(c.VsExact), c.Note)
		}
	}
}

// writeClasses adds the per weight class breakdown (paper Fig. 12) after
// every other section, so tools reading the sections above are unaffected.
func (r Report) writeClasses(b *strings.Builder) {
	if len(r.Classes) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Weight classes\n\n")
	fmt.Fprintf(b, "Every truth flow is put in a class by the `capture.weights` rules of %s, as the daemons weight packets (first matching rule; rules of one name form one class). The weights are that configuration's: runs made with other weights (see their labels) must use the same rules for this breakdown to mean anything.\n\n", r.ClassSource)
	fmt.Fprintf(b, "| class | weight | rules | flows | share |\n|---|---:|---|---:|---:|\n")
	for _, c := range r.Classes {
		fmt.Fprintf(b, "| %s | %s | %s | %d | %s |\n", c.Name, c.Weight, c.Rules, c.Flows, pct(ratio(c.Flows, r.TruthRecords)))
	}
	fmt.Fprintf(b, "\n### Mean delay per class\n\n")
	fmt.Fprintf(b, "| class | bin | run | flows | coverage | median rel. err | p95 rel. err | mean rel. err |\n")
	fmt.Fprintf(b, "|---|---|---|---:|---:|---:|---:|---:|\n")
	for ci, c := range r.Classes {
		for bi, bin := range r.Bins {
			for _, run := range r.Runs {
				if ci >= len(run.Classes) {
					continue
				}
				s := run.Classes[ci][bi]
				fmt.Fprintf(b, "| %s | %s | %s | %d | %s (%d/%d) | %s | %s | %s |\n", c.Name, bin.Name, run.Label, s.DelayFlows,
					pct(s.Coverage), s.Covered, s.DelayFlows, pct(s.MedianRelDelay), pct(s.P95RelDelay), pct(s.MeanRelDelay))
			}
		}
	}
}

// errFloor is where relative errors of 0 are drawn on the log axis.
const errFloor = 1e-5

// WritePlots writes one PNG per bin with the CDF of the relative delay
// error of every run (the paper's Fig. 9), one per weight class and bin
// when the report has classes (cdf-class-CLASS-BIN.png, Fig. 12), and
// fig10.png with the median and p95 per bin (Fig. 10, top). It returns the
// files written.
func WritePlots(dir string, r Report) ([]string, error) {
	var files []string
	for bi, bin := range r.Bins {
		title := fmt.Sprintf("Relative error of mean delay, flows with %s packets", bin.Name)
		if bin.Name == "all" {
			title = "Relative error of mean delay, all flows"
		}
		f := filepath.Join(dir, "cdf-"+slug(bin.Name)+".png")
		ok, err := cdfPlot(f, title, r.Runs, func(run *RunReport) []float64 { return run.Bins[bi].RelDelay })
		if err != nil {
			return files, err
		}
		if ok {
			files = append(files, f)
		}
	}
	// Fig. 12: one CDF per class and bin, every run.
	for ci, c := range r.Classes {
		for bi, bin := range r.Bins {
			title := fmt.Sprintf("Relative error of mean delay, class %s, flows with %s packets", c.Name, bin.Name)
			f := filepath.Join(dir, "cdf-class-"+slug(c.Name)+"-"+slug(bin.Name)+".png")
			ok, err := cdfPlot(f, title, r.Runs, func(run *RunReport) []float64 {
				if ci >= len(run.Classes) {
					return nil
				}
				return run.Classes[ci][bi].RelDelay
			})
			if err != nil {
				return files, err
			}
			if ok {
				files = append(files, f)
			}
		}
	}

	// Fig. 10: median (solid) and p95 (dashed) per disjoint bin.
	// Bins that do not overlap an earlier one, smallest flows first.
	var disjoint []int
	for i, b := range r.Bins {
		ok := true
		for _, j := range disjoint {
			if overlap(b, r.Bins[j]) {
				ok = false
				break
			}
		}
		if ok {
			disjoint = append(disjoint, i)
		}
	}
	slices.SortFunc(disjoint, func(a, b int) int { return cmp.Compare(r.Bins[a].Min, r.Bins[b].Min) })
	if len(disjoint) > 0 && len(r.Runs) > 0 {
		p := plot.New()
		p.Title.Text = "Relative error of mean delay by flow size (solid: median, dashed: p95)"
		p.Y.Label.Text = "relative error"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = errFloor, 10
		names := make([]string, len(disjoint))
		for j, bi := range disjoint {
			names[j] = r.Bins[bi].Name
		}
		p.NominalX(names...)
		p.Add(plotter.NewGrid())
		for ri, run := range r.Runs {
			med := make(plotter.XYs, 0, len(disjoint))
			p95 := make(plotter.XYs, 0, len(disjoint))
			for j, bi := range disjoint {
				x := float64(j)
				s := run.Bins[bi]
				if !math.IsNaN(s.MedianRelDelay) {
					med = append(med, plotter.XY{X: x, Y: max(s.MedianRelDelay, errFloor)})
					p95 = append(p95, plotter.XY{X: x, Y: max(s.P95RelDelay, errFloor)})
				}
			}
			if len(med) == 0 {
				continue
			}
			for k, xy := range []plotter.XYs{med, p95} {
				l, pts, err := plotter.NewLinePoints(xy)
				if err != nil {
					return files, fmt.Errorf("plot fig10 %s: %w", run.Label, err)
				}
				l.Color, pts.Color = plotutil.Color(ri), plotutil.Color(ri)
				pts.Shape = plotutil.Shape(ri)
				if k == 1 {
					l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				} else {
					p.Legend.Add(run.Label, l, pts)
				}
				p.Add(l, pts)
			}
		}
		f := filepath.Join(dir, "fig10.png")
		if err := p.Save(16*vg.Centimeter, 11*vg.Centimeter, f); err != nil {
			return files, fmt.Errorf("save %s: %w", f, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// cdfPlot draws the CDF of errs(run) for every run with data into file f;
// false when no run has any.
func cdfPlot(f, title string, runs []RunReport, errs func(*RunReport) []float64) (bool, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = fmt.Sprintf("relative error (0 drawn at %g)", errFloor)
	p.Y.Label.Text = "CDF (fraction of flows with an estimate)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Min, p.X.Max = errFloor, 10
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	anyRun := false
	for ri := range runs {
		e := errs(&runs[ri])
		if len(e) == 0 {
			continue
		}
		anyRun = true
		l, err := plotter.NewLine(cdfPoints(e, 1000))
		if err != nil {
			return false, fmt.Errorf("plot %s: %s: %w", f, runs[ri].Label, err)
		}
		l.Color = plotutil.Color(ri)
		l.Dashes = plotutil.Dashes(ri)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", runs[ri].Label, len(e)), l)
	}
	if !anyRun {
		return false, nil
	}
	if err := p.Save(16*vg.Centimeter, 11*vg.Centimeter, f); err != nil {
		return false, fmt.Errorf("save %s: %w", f, err)
	}
	return true, nil
}

// cdfPoints turns sorted errors into at most maxPts CDF points (x clipped to
// errFloor for the log axis).
func cdfPoints(sorted []float64, maxPts int) plotter.XYs {
	n := len(sorted)
	step := max(1, n/maxPts)
	pts := make(plotter.XYs, 0, n/step+2)
	pts = append(pts, plotter.XY{X: max(sorted[0], errFloor), Y: 0})
	for i := 0; i < n; i += step {
		pts = append(pts, plotter.XY{X: max(sorted[i], errFloor), Y: float64(i+1) / float64(n)})
	}
	pts = append(pts, plotter.XY{X: max(sorted[n-1], errFloor), Y: 1})
	return pts
}

func overlap(a, b Bin) bool {
	aMax, bMax := a.Max, b.Max
	if aMax == 0 {
		aMax = math.MaxInt64
	}
	if bMax == 0 {
		bMax = math.MaxInt64
	}
	return a.Min <= bMax && b.Min <= aMax
}

func slug(s string) string {
	r := strings.NewReplacer(">=", "ge", "<=", "le", " ", "_", "/", "_")
	return r.Replace(s)
}
