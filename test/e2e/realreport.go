package e2e

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/lds-net/lds/internal/results"
)

// WriteMarkdown writes the run's setup, what the bottleneck and the taps
// saw, and one row per daemon pair with the acceptance's numbers.
func (r *RealResult) WriteMarkdown(w io.Writer, opt RealOptions, title string) {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	bn := opt.Bottleneck
	p("### Run: %s\n\n", title)
	p("- bottleneck: HTB %d Mbit/s, pfifo limit %d packets (a full FIFO drains in %.0f ms), tail drop\n", bn.RateMbit, bn.Limit, bn.QueueDelayMS())
	tcp := "as fast as cubic lets them"
	if opt.TCPRate != "" {
		tcp = opt.TCPRate + "bit/s each (iperf3 -b)"
	}
	p("- traffic for %v: iperf3 TCP %d streams %s, iperf3 UDP %s bit/s (1000-byte datagrams), ping every 50 ms, curl: %d uploads (150 kB POST) and fetches (20 kB GET), %v between rounds, %d failed\n",
		r.End.Sub(r.Begin), opt.TCPStreams, tcp, opt.UDPRate, r.Fetches, opt.FetchPause, r.FetchErrors)
	p("- truth: tcpdump -Q in at both taps, joined per packet: %d packets at tap A, %d reached tap B, %d unmatched at B, %d duplicate identities; pfifo drops %d\n",
		r.JoinPackets, r.JoinMatched, r.JoinUnmatched, r.JoinDup, r.QdiscDropped)
	p("- one-way delay between the taps: packets median %.1f ms, max %.1f ms; per-(interval, flow) means of flows with >= 100 packets %.1f–%.1f ms (median %.1f ms)\n\n",
		r.PacketDelayP50MS, r.PacketDelayMaxMS, r.FlowDelayMinMS, r.FlowDelayMaxMS, r.FlowDelayMedMS)
	p("| pair | interval | max_delay | intervals | records | flows ≥100 pkts: loss-free / lossy | false loss: loss-free ≥100 | false loss: any size | delay coverage ≥100: loss-free / all | median rel. err ≥100 (≥1000 / 100-999) | lossy flows detected (≥100) | records by status | kernel ring drops: sender / receiver |\n")
	p("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, pr := range r.Pairs {
		s := pr.Score
		md := "default"
		if pr.Pair.MaxDelay > 0 {
			md = pr.Pair.MaxDelay.String()
		}
		p("| %s | %v | %s | %d | %d | %d / %d | %d of %d | %d | %d/%d (%s) / %d/%d (%s) | %s (%s / %s) | %d/%d (%d/%d) | %s | %d / %d |\n",
			pr.Pair.Name, pr.Pair.Interval, md, pr.LastIv-pr.FirstIv+1, s.Records,
			s.BigLossFree, s.LossyBig, s.FalseLossBig, s.BigLossFree, s.FalseLossAll,
			s.LossFreeBigCovered, s.BigLossFree, pct(s.LossFreeCoverage()), s.BigCovered, s.BigDelayFlows, pct(s.Coverage()),
			pct3(s.MedianRelBig), pct3(s.MedianRel1000), pct3(s.MedianRel100),
			s.LossyDetected, s.Lossy, s.LossyBigDetected, s.LossyBig, statusText(s.Statuses), pr.SenderKernelDrops, pr.ReceiverKernelDrops)
	}
	p("\n")
	for _, pr := range r.Pairs {
		p("Receiver %s, health series at the end:\n\n```\n%s\n```\n\n", pr.Pair.Name, strings.Join(sortedLines(pr.ReceiverMetrics), "\n"))
	}
	_, _ = io.WriteString(w, b.String())
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.2f%%", 100*x)
}

func statusText(m map[results.Status]int) string {
	if len(m) == 0 {
		return "–"
	}
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// pct3 prints a ratio as a percentage with three significant digits
// (small errors stay visible).
func pct3(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.3g%%", 100*x)
}
