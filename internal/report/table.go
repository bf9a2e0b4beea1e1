// Package report prints results for people: the per-flow table of
// `make demo`, `ldsctl replay --table` and `ldsctl results`.
package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
)

// Table prints, over the complete intervals, the n heaviest flows
// (packets summed, delay, stddev and the sampled p50/p99 averaged by
// packets over the intervals that have them) and the link figures.
func Table(w io.Writer, ivs []*results.Interval, n int) {
	type agg struct {
		r                    results.FlowRecord
		pk, dsum, dpk, ssum  float64
		loss, samples, ivals float64
		p50, p99, qpk        float64
	}
	flows := map[capture.FlowKey]*agg{}
	var links []results.LinkRecord
	outcomes := map[results.Outcome]int{}
	for _, iv := range ivs {
		outcomes[iv.Outcome]++
		if iv.Outcome != results.OutcomeMatched {
			continue
		}
		links = append(links, iv.Links...)
		for _, f := range iv.Flows {
			k := f.Key
			a := flows[k]
			if a == nil {
				a = &agg{r: f}
				flows[k] = a
			}
			a.pk += f.Packets
			if f.Loss != nil {
				a.loss += *f.Loss
			}
			a.samples += f.Samples
			a.ivals++
			if f.DelayNS != nil {
				a.dsum += *f.DelayNS * f.Packets
				a.dpk += f.Packets
				if f.StddevNS != nil {
					a.ssum += *f.StddevNS * f.Packets
				}
			}
			if f.P50NS != nil && f.P99NS != nil {
				a.p50 += *f.P50NS * f.Packets
				a.p99 += *f.P99NS * f.Packets
				a.qpk += f.Packets
			}
		}
	}
	all := make([]*agg, 0, len(flows))
	for _, a := range flows {
		all = append(all, a)
	}
	slices.SortFunc(all, func(a, b *agg) int { return cmp.Compare(b.pk, a.pk) })
	fmt.Fprintf(w, "intervals by outcome: %s\n\n", Outcomes(outcomes))
	fmt.Fprintf(w, "Top %d flows by packets (all complete intervals)\n", min(n, len(all)))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "flow\tproto\tpackets\tlost\tdelay (ms)\tstddev (ms)\tp50 (ms)\tp99 (ms)\tsamples\t")
	for i, a := range all {
		if i >= n {
			break
		}
		d, s, q50, q99 := "-", "-", "-", "-"
		if a.dpk > 0 {
			d = fmt.Sprintf("%.3f", a.dsum/a.dpk/1e6)
			s = fmt.Sprintf("%.3f", a.ssum/a.dpk/1e6)
		}
		if a.qpk > 0 {
			q50, q99 = fmt.Sprintf("%.3f", a.p50/a.qpk/1e6), fmt.Sprintf("%.3f", a.p99/a.qpk/1e6)
		}
		fmt.Fprintf(tw, "%s:%d > %s:%d\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%.0f\t\n", a.r.Key.SrcAddr(), a.r.Key.SPort, a.r.Key.DstAddr(), a.r.Key.DPort, a.r.Key.Proto,
			a.pk, a.loss, d, s, q50, q99, a.samples)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nLink (LDA) per interval")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "interval\tclass\tsent\treceived\tloss\tdelay (ms)\tstddev (ms)\tp50 (ms)\tp99 (ms)\t")
	for _, l := range links {
		if l.Sent == 0 && l.Received == 0 {
			continue
		}
		loss := "withheld"
		if l.LossRatio != nil {
			loss = fmt.Sprintf("%.3f%%", 100**l.LossRatio)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", l.Interval, l.Class, l.Sent, l.Received, loss, ms(l.DelayNS), ms(l.StddevNS), ms(l.P50NS), ms(l.P99NS))
	}
	tw.Flush()
	fmt.Fprint(w, legend)
}

// legend explains Table's columns (docs/results.md has the fields).
const legend = `
Columns: packets and lost are counted by the sketches; delay is the mean one-way
delay and stddev its standard deviation; p50/p99 are delay quantiles from
consistently sampled packets (docs/sampling.md); samples is the effective
sample size behind the delay. "-": not estimated (a quantile needs at least 10
(p50) or 50 (p99) sampled packets; a delay needs usable sketch cells).
`

// Outcomes prints interval counts by outcome as "matched 5, partial 1",
// sorted by outcome.
func Outcomes(m map[results.Outcome]int) string {
	keys := make([]results.Outcome, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// FlowTable prints flow records as they are (one interval's API answer).
func FlowTable(w io.Writer, recs []results.FlowRecord, n int) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "interval\tflow\tproto\tpackets\tlost\tdelay (ms)\tstddev (ms)\tci95 (ms)\tp50 (ms)\tp99 (ms)\t")
	for i, r := range recs {
		if i >= n {
			break
		}
		lost := "withheld"
		if r.Loss != nil {
			lost = fmt.Sprintf("%.0f", *r.Loss)
		}
		fmt.Fprintf(tw, "%d\t%s:%d > %s:%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Interval, r.Key.SrcAddr(), r.Key.SPort, r.Key.DstAddr(), r.Key.DPort, r.Key.Proto,
			r.Packets, lost, ms(r.DelayNS), ms(r.StddevNS), ms(r.CI95NS), ms(r.P50NS), ms(r.P99NS))
	}
	tw.Flush()
}

func ms(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *v/1e6)
}
