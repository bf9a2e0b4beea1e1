package metrics

import (
	"cmp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/spike"
)

// spikeHist is one flow's spiking intervals within the window.
type spikeHist struct {
	labels []string
	ids    []int64 // ascending
}

type flowSeries struct {
	labels                         []string // sender, src, dst, sport, dport, proto, watch
	delay, stddev, ci95, lossRatio float64  // seconds; NaN = no series
	packets                        float64
	p50, p90, p99                  float64 // seconds, from packet samples; NaN = no series
}

// flowCollector emits the per-flow series of each sender's latest
// interval (its tracked flows only: top_n plus watched), the flows'
// spike windows and the counts of tracked and spiking flows, and the
// flows' effective sample sizes.
type flowCollector struct {
	descSet
	delay, p50, p90, p99, stddev, ci95, loss, packets *prometheus.Desc
	spike, lossSpike, spiking, tracked                *prometheus.Desc
	samplesSum, samplesMedian                         *prometheus.Desc
	r                                                 *Receiver
}

func newFlowCollector(r *Receiver) *flowCollector {
	c := &flowCollector{r: r}
	fl := []string{"sender", "src", "dst", "sport", "dport", "proto", "watch"}
	c.delay = c.add("lds_flow_delay_seconds", "Estimated mean one-way delay of a tracked flow in its sender's latest interval.", fl...)
	c.p50 = c.add("lds_flow_delay_p50_seconds", "Median one-way delay of a tracked flow in the latest interval, from exactly joined packet samples (series only with enough samples: docs/sampling.md).", fl...)
	c.p90 = c.add("lds_flow_delay_p90_seconds", "90th percentile of the one-way delay of a tracked flow in the latest interval, from joined packet samples.", fl...)
	c.p99 = c.add("lds_flow_delay_p99_seconds", "99th percentile of the one-way delay of a tracked flow in the latest interval, from joined packet samples.", fl...)
	c.stddev = c.add("lds_flow_delay_stddev_seconds", "Estimated standard deviation of the one-way delay of a tracked flow in the latest interval.", fl...)
	c.ci95 = c.add("lds_flow_delay_ci95_seconds", "95% confidence half-width of lds_flow_delay_seconds.", fl...)
	c.loss = c.add("lds_flow_loss_ratio", "Estimated lost / sent packets of a tracked flow in the latest interval (clamped to 0..1).", fl...)
	c.packets = c.add("lds_flow_packets", "Estimated packets a tracked flow sent in the latest interval.", fl...)
	c.spike = c.add("lds_flow_spike", "Intervals among the sender's last spike_window in which this tracked flow's delay spiked against its baseline (series only while > 0; at most top_n flows per sender).", fl...)
	c.lossSpike = c.add("lds_flow_loss_spike", "Intervals among the sender's last spike_window in which this tracked flow's loss ratio spiked against its baseline (series only while > 0; at most top_n flows per sender).", fl...)
	c.spiking = c.add("lds_spiking_flows", "Flows spiking in the sender's latest interval.", "sender")
	c.tracked = c.add("lds_tracked_flows", "Flows with per-flow series, by why they are tracked (top or watch).", "sender", "kind")
	c.samplesSum = c.add("lds_effective_samples", "Sum over flows of the effective sample size of the delay estimates, latest interval.", "sender")
	c.samplesMedian = c.add("lds_flow_effective_samples_median", "Median over flows with a delay estimate of their effective sample size, latest interval.", "sender")
	return c
}

func (c *flowCollector) Collect(ch chan<- prometheus.Metric) {
	c.r.eachSender(func(name string, s *senderState) {
		if !s.have {
			return
		}
		for _, f := range s.flows {
			gauge(ch, c.delay, f.delay, f.labels...)
			gauge(ch, c.stddev, f.stddev, f.labels...)
			gauge(ch, c.ci95, f.ci95, f.labels...)
			gauge(ch, c.loss, f.lossRatio, f.labels...)
			gauge(ch, c.packets, f.packets, f.labels...)
			gauge(ch, c.p50, f.p50, f.labels...)
			gauge(ch, c.p90, f.p90, f.labels...)
			gauge(ch, c.p99, f.p99, f.labels...)
		}
		for _, h := range s.spikes {
			gauge(ch, c.spike, float64(len(h.ids)), h.labels...)
		}
		for _, h := range s.lossSpikes {
			gauge(ch, c.lossSpike, float64(len(h.ids)), h.labels...)
		}
		gauge(ch, c.spiking, float64(s.spikingN), name)
		gauge(ch, c.tracked, float64(s.trackedTop), name, "top")
		gauge(ch, c.tracked, float64(s.trackedWatch), name, "watch")
		gauge(ch, c.samplesSum, s.samplesSum, name)
		gauge(ch, c.samplesMedian, s.samplesMedian, name)
	})
}

// recordSpikes adds the spikes of interval id to one of the sender's
// windows (m: latency or loss), drops what fell out of the last
// spike_window intervals, keeps at most top_n flows (those that spiked
// last) and returns the window. Call with r.mu held.
func (r *Receiver) recordSpikes(s *senderState, m map[capture.FlowKey]*spikeHist, id int64, sender string, spikes []spike.Event, watchOf map[capture.FlowKey]string) map[capture.FlowKey]*spikeHist {
	if m == nil {
		m = map[capture.FlowKey]*spikeHist{}
	}
	for _, e := range spikes {
		k := e.Key
		h := m[k]
		if h == nil {
			h = &spikeHist{}
			m[k] = h
		}
		h.labels = flowLabelValues(sender, k, watchOf[k])
		if i, found := slices.BinarySearch(h.ids, id); !found {
			h.ids = slices.Insert(h.ids, i, id)
		}
	}
	latest := id
	if s.have && s.interval > latest {
		latest = s.interval
	}
	for k, h := range m {
		cut := 0
		for cut < len(h.ids) && h.ids[cut] <= latest-int64(r.cfg.SpikeWindow) {
			cut++
		}
		if h.ids = h.ids[cut:]; len(h.ids) == 0 {
			delete(m, k)
		}
	}
	if over := len(m) - r.cfg.TopN; over > 0 {
		type kh struct {
			k capture.FlowKey
			h *spikeHist
		}
		all := make([]kh, 0, len(m))
		for k, h := range m {
			all = append(all, kh{k, h})
		}
		// Oldest last spike first, then fewest spikes: those go.
		slices.SortFunc(all, func(a, b kh) int {
			return cmp.Or(cmp.Compare(a.h.ids[len(a.h.ids)-1], b.h.ids[len(b.h.ids)-1]), cmp.Compare(len(a.h.ids), len(b.h.ids)),
				cmp.Compare(strings.Join(a.h.labels, ","), strings.Join(b.h.labels, ",")))
		})
		for _, x := range all[:over] {
			delete(m, x.k)
		}
	}
	return m
}
