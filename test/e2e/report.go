package e2e

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lds-net/lds/tools/linkem"
)

// WriteMarkdown writes the run's report: setup, what the emulator and the
// taps saw, then the accuracy of lds against the tcpdump join (eval's
// tables).
func (r *Result) WriteMarkdown(w io.Writer, opt Options) error {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	tr := opt.Traffic
	p("### Setup\n\n")
	p("- %d measured intervals of %v (after one warm-up interval), traffic %s → %s (L2 relay by lds-linkem in mid), %d flows (Pareto shape %.2g, %.0f%% UDP), %d packets/s\n",
		opt.Intervals, opt.Interval, SrcAddr, DataNet, tr.Flows, tr.ParetoShape, tr.UDPShare*100, tr.PPS)
	p("- taps: lds-sender + tcpdump on mid's ingress veth, lds-receiver + tcpdump on dst's ingress veth; gRPC over mTLS on a control veth; PTP disabled\n")
	sk := commonConfig(opt).Sketch
	p("- sketch: %d rows × %d columns, vlda k = %d, estimator %s\n", sk.Rows, sk.Columns, sk.VLDA, sk.Estimator)
	p("- emulated link (forward):\n")
	for _, c := range opt.Forward.Classes {
		p("  - %s: delay %s; loss %s%s\n", c.Name, delayText(c.Delay), lossText(c.Loss), map[bool]string{true: "; FIFO", false: ""}[c.FIFO])
	}
	p("\n### What happened\n\n")
	p("| quantity | value |\n|---|---|\n")
	p("| packets sent by the generator | %d (%d send errors) |\n", r.Traffic.Sent, r.Traffic.SendErrors)
	f := r.Linkem.Forward
	p("| emulator: received / forwarded / lost / overflow | %d / %d / %d / %d |\n", f.Received, f.Forwarded, f.Lost, f.Overflow)
	if n := f.Forwarded - f.Immediate; n > 0 {
		p("| emulator release lateness: mean / max | %.1f µs / %.1f µs |\n", float64(f.LateSumNS)/float64(n)/1e3, float64(f.LateMaxNS)/1e3)
		p("| emulator lateness histogram (≤5,10,25,50,100,250,500,1000 µs, more) | %v |\n", f.Late)
	}
	p("| truth (tcpdump join), all intervals: packets at tap A | %d |\n", r.JoinPackets)
	p("| truth, measured intervals: sent / received / lost | %d / %d / %d |\n", r.TruthSent, r.TruthRecvd, r.TruthSent-r.TruthRecvd)
	p("| truth: unmatched at tap B / duplicate identities | %d / %d |\n", r.JoinUnmatched, r.JoinDup)
	p("| truth: mean one-way delay | %.1f µs |\n", r.MeanDelayNS/1e3)
	est, tl := r.Totals()
	p("| lds: records / estimated loss total / true loss total | %d / %.1f / %.0f |\n", len(r.Results), est, tl)
	cv := r.Coverage(10)
	p("| lds: delay coverage of loss-free flows with >= 10 packets | %d / %d |\n", cv.Covered, cv.Flows)
	p("| lds: delay coverage of flows with loss, >= 10 packets | %d / %d |\n", cv.LossyCovered, cv.LossyFlows)
	p("\nReceiver health series at the end:\n\n```\n%s\n```\n\n", strings.Join(sortedLines(r.ReceiverMetrics), "\n"))
	p("### Accuracy against the tcpdump join\n\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	return r.Report.WriteMarkdown(w)
}

func delayText(d linkem.Delay) string {
	us := func(x time.Duration) string { return x.String() }
	switch d.Kind {
	case "uniform":
		return fmt.Sprintf("uniform [%s, %s]", us(d.Min), us(d.Max))
	case "bimodal":
		return fmt.Sprintf("bimodal %s (p=%.2g) / %s, + uniform [0, %s)", us(d.A), d.P, us(d.B), us(d.Spread))
	case "pareto":
		return fmt.Sprintf("%s + Pareto tail (scale %s, shape %.2g, cap %s)", us(d.Base), us(d.Scale), d.Shape, us(d.Cap))
	}
	return "constant " + us(d.Value)
}

func lossText(l linkem.Loss) string {
	switch l.Kind {
	case "uniform":
		return fmt.Sprintf("uniform %.3g", l.P)
	case "gilbert":
		return fmt.Sprintf("Gilbert–Elliott p_gb %.3g p_bg %.3g loss_bad %.3g (long-run %.3g)", l.PGB, l.PBG, l.LossBad, l.Rate())
	}
	return "none"
}
