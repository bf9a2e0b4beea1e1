package metrics

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/spike"
)

// Interval outcomes that ObserveInterval and IntervalOutcome pre-create at 0
// for every sender, so that rate() and increase() work from the first one.
func knownOutcomes() []string {
	return []string{
		results.OutcomeMatched, results.OutcomePartial, results.OutcomeVoidedGap, results.OutcomeNoSender,
		results.OutcomeUnsynced, results.OutcomeDuplicate, results.OutcomeNoReceiver, results.OutcomeFailed,
	}
}

// Receiver holds the receiver's series. Its methods are safe for concurrent
// use: the receiver's stream handlers and the scrape run in parallel.
type Receiver struct {
	cfg   Config
	watch []match.Compiled
	log   *slog.Logger
	reg   *prometheus.Registry
	d     *descs
	now   func() time.Time // replaced in tests

	health *CaptureHealth

	intervals   *prometheus.CounterVec
	spikes      *prometheus.CounterVec
	lossSpikes  *prometheus.CounterVec
	linkSent    *prometheus.CounterVec
	linkRecv    *prometheus.CounterVec
	ivDrops     *prometheus.CounterVec
	sketchBytes *prometheus.CounterVec
	frameErrs   *prometheus.CounterVec
	watchCut    *prometheus.CounterVec
	delayHist   *prometheus.HistogramVec
	packetHist  *prometheus.HistogramVec
	estTime     *prometheus.HistogramVec
	misassigned *prometheus.CounterVec
	lost        lostMetrics // lost.go
	window      *prometheus.GaugeVec
	exp         *exportSeries
	resErrs     *prometheus.CounterVec
	resDropped  prometheus.Counter
	connRefused *prometheus.CounterVec
	sndRefused  *prometheus.CounterVec
	ivRefused   *prometheus.CounterVec

	mu       sync.Mutex
	senders  map[string]*senderState
	clocks   map[clockKey]clockState
	capture  captureState
	ownClock func() OwnClock // nil: none; read at scrape time (SetOwnClock)
}

// OwnClock is this host's clock as the daemon's PTP checker sees it now.
type OwnClock struct {
	State      string // synced, unsynced, unknown, disabled
	OffsetNS   int64
	HaveOffset bool // ptp4l has answered at least once: OffsetNS is a reading
}

// senderState is what the latest interval of one sender says; the state
// collector emits it at scrape time, so a flow that left the tracked set has
// no series at all (nothing to delete, no ghosts).
type senderState struct {
	have          bool // an interval was observed
	interval      int64
	startNS       int64
	completedUnix float64
	flows         []flowSeries
	links         []linkSeries
	spikingN      int
	nFlows        int
	trackedTop    int
	trackedWatch  int
	usable        float64
	samplesSum    float64
	samplesMedian float64
	sketchBytes   float64
	connected     *bool
	spikes        map[capture.FlowKey]*spikeHist // flows whose delay spiked within spike_window; at most top_n
	lossSpikes    map[capture.FlowKey]*spikeHist // flows whose loss spiked within spike_window; at most top_n
}

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

type linkSeries struct {
	class                      string
	delay, stddev, ci95, ratio float64 // NaN = no series
}

type clockKey struct{ end, sender string }

type clockState struct {
	state    string
	offset   float64 // seconds
	errBound float64 // seconds
}

type captureState struct {
	packets uint64
	drops   map[string]uint64
	set     bool
}

// descs are the descriptors of the scrape-time series.
type descs struct {
	FlowDelay, FlowP50, FlowP90, FlowP99, FlowStddev, FlowCI, FlowLoss, FlowPackets, FlowSpike, FlowLossSpike, Spiking, Tracked, Flows, LinkDelay, LinkStddev, LinkCI, LinkLoss, Usable, SamplesSum, SamplesMed, SketchSize, LastStart, LastDone, Connected, PTPOffset, PTPErr, PTPState, CapPackets, CapDrops *prometheus.Desc
}

func newDescs() *descs {
	flowLabels := []string{"sender", "src", "dst", "sport", "dport", "proto", "watch"}
	return &descs{
		FlowDelay:     prometheus.NewDesc("lds_flow_delay_seconds", "Estimated mean one-way delay of a tracked flow in its sender's latest interval.", flowLabels, nil),
		FlowP50:       prometheus.NewDesc("lds_flow_delay_p50_seconds", "Median one-way delay of a tracked flow in the latest interval, from exactly joined packet samples (series only with enough samples: docs/sampling.md).", flowLabels, nil),
		FlowP90:       prometheus.NewDesc("lds_flow_delay_p90_seconds", "90th percentile of the one-way delay of a tracked flow in the latest interval, from joined packet samples.", flowLabels, nil),
		FlowP99:       prometheus.NewDesc("lds_flow_delay_p99_seconds", "99th percentile of the one-way delay of a tracked flow in the latest interval, from joined packet samples.", flowLabels, nil),
		FlowStddev:    prometheus.NewDesc("lds_flow_delay_stddev_seconds", "Estimated standard deviation of the one-way delay of a tracked flow in the latest interval.", flowLabels, nil),
		FlowCI:        prometheus.NewDesc("lds_flow_delay_ci95_seconds", "95% confidence half-width of lds_flow_delay_seconds.", flowLabels, nil),
		FlowLoss:      prometheus.NewDesc("lds_flow_loss_ratio", "Estimated lost / sent packets of a tracked flow in the latest interval (clamped to 0..1).", flowLabels, nil),
		FlowPackets:   prometheus.NewDesc("lds_flow_packets", "Estimated packets a tracked flow sent in the latest interval.", flowLabels, nil),
		FlowSpike:     prometheus.NewDesc("lds_flow_spike", "Intervals among the sender's last spike_window in which this tracked flow's delay spiked against its baseline (series only while > 0; at most top_n flows per sender).", flowLabels, nil),
		FlowLossSpike: prometheus.NewDesc("lds_flow_loss_spike", "Intervals among the sender's last spike_window in which this tracked flow's loss ratio spiked against its baseline (series only while > 0; at most top_n flows per sender).", flowLabels, nil),
		Spiking:       prometheus.NewDesc("lds_spiking_flows", "Flows spiking in the sender's latest interval.", []string{"sender"}, nil),
		Tracked:       prometheus.NewDesc("lds_tracked_flows", "Flows with per-flow series, by why they are tracked (top or watch).", []string{"sender", "kind"}, nil),
		Flows:         prometheus.NewDesc("lds_interval_flows", "Flows estimated in the sender's latest interval.", []string{"sender"}, nil),
		LinkDelay:     prometheus.NewDesc("lds_link_delay_seconds", "LDA estimate of the link's mean one-way delay per traffic class, latest interval.", []string{"sender", "class"}, nil),
		LinkStddev:    prometheus.NewDesc("lds_link_delay_stddev_seconds", "LDA estimate of the link's delay standard deviation per class, latest interval.", []string{"sender", "class"}, nil),
		LinkCI:        prometheus.NewDesc("lds_link_delay_ci95_seconds", "95% confidence half-width of lds_link_delay_seconds.", []string{"sender", "class"}, nil),
		LinkLoss:      prometheus.NewDesc("lds_link_loss_ratio", "Lost / sent packets of the link per class, latest interval.", []string{"sender", "class"}, nil),
		Usable:        prometheus.NewDesc("lds_usable_cell_ratio", "Share of sketch cells usable for estimation in the latest interval.", []string{"sender"}, nil),
		SamplesSum:    prometheus.NewDesc("lds_effective_samples", "Sum over flows of the effective sample size of the delay estimates, latest interval.", []string{"sender"}, nil),
		SamplesMed:    prometheus.NewDesc("lds_flow_effective_samples_median", "Median over flows with a delay estimate of their effective sample size, latest interval.", []string{"sender"}, nil),
		SketchSize:    prometheus.NewDesc("lds_interval_sketch_bytes", "Size of the sender's sketch for the latest interval.", []string{"sender"}, nil),
		LastStart:     prometheus.NewDesc("lds_last_interval_start_timestamp_seconds", "Start (sender clock, Unix seconds) of the latest completed interval.", []string{"sender"}, nil),
		LastDone:      prometheus.NewDesc("lds_last_interval_completed_timestamp_seconds", "Receiver wall-clock time (Unix seconds) when the latest interval completed.", []string{"sender"}, nil),
		Connected:     prometheus.NewDesc("lds_sender_connected", "1 while the sender's stream is connected, else 0.", []string{"sender"}, nil),
		PTPOffset:     prometheus.NewDesc("lds_ptp_offset_seconds", "PTP offset from the grandmaster reported by ptp4l, per end.", []string{"end", "sender"}, nil),
		PTPErr:        prometheus.NewDesc("lds_ptp_error_bound_seconds", "Bound on the clock error at this end.", []string{"end", "sender"}, nil),
		PTPState:      prometheus.NewDesc("lds_ptp_state", "1 for the current PTP state of each end (only the current state has a series).", []string{"end", "sender", "state"}, nil),
		CapPackets:    prometheus.NewDesc("lds_capture_packets_total", "Packets this daemon's capture saw.", nil, nil),
		CapDrops:      prometheus.NewDesc("lds_capture_drops_total", "Packets this daemon's capture lost or left out, by reason.", []string{"reason"}, nil),
	}
}

// NewReceiver checks cfg and registers the receiver's series, plus the Go
// runtime and process collectors, on a new private registry.
func NewReceiver(cfg Config, log *slog.Logger) (*Receiver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("receiver metrics: %w", err)
	}
	watch, err := match.CompileAll("metrics.watch", cfg.Watch)
	if err != nil {
		return nil, fmt.Errorf("receiver metrics: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Receiver{
		cfg: cfg, watch: watch, log: log, now: time.Now, d: newDescs(), health: newCaptureHealth(), exp: newExportSeries(),
		reg:     prometheus.NewRegistry(),
		senders: map[string]*senderState{},
		clocks:  map[clockKey]clockState{},
		intervals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_intervals_total",
			Help: "Intervals finalized per sender, by outcome."}, []string{"sender", "outcome"}),
		spikes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_spikes_total",
			Help: "Per-flow latency spikes (mean delay or p99) detected among tracked flows."}, []string{"sender"}),
		lossSpikes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_loss_spikes_total",
			Help: "Per-flow loss spikes (loss ratio against the flow's baseline) detected among tracked flows."}, []string{"sender"}),
		linkSent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_link_sent_packets_total",
			Help: "Packets seen at the sender tap, per traffic class (exact LDA totals; intervals with capture drops left out)."}, []string{"sender", "class"}),
		linkRecv: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_link_received_packets_total",
			Help: "Packets seen at the receiver tap, per traffic class (exact LDA totals; intervals with capture drops left out)."}, []string{"sender", "class"}),
		ivDrops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_interval_capture_drops_total",
			Help: "Capture drops reported for the sender's intervals, by end (sender or receiver)."}, []string{"sender", "end"}),
		sketchBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_sketch_received_bytes_total",
			Help: "Sketch bytes received from the sender."}, []string{"sender"}),
		frameErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_frame_errors_total",
			Help: "Frames from the sender that were refused, by reason."}, []string{"sender", "reason"}),
		watchCut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_watch_flows_cut_total",
			Help: "Flows matched by a watch rule that got no series because more than top_n matched."}, []string{"sender"}),
		delayHist: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lds_flow_mean_delay_seconds",
			Help:    "Distribution of per-flow mean one-way delays over all flows of each interval.",
			Buckets: slices.Clone(cfg.Buckets)}, []string{"sender"}),
		// 1 ms to 16 s: the paper estimator takes milliseconds, decode
		// tenths of a second at 150k flows.
		// Per-packet delays of the uniform link sample: a native histogram
		// (buckets ~10 % wide) with the classic delay_buckets beside it
		// for servers without native histograms.
		packetHist: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lds_link_packet_delay_seconds",
			Help:                            "One-way delay of the packets of the uniform link sample (exact, from joined packet samples), per traffic class.",
			Buckets:                         slices.Clone(cfg.Buckets),
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour}, []string{"sender", "class"}),
		estTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lds_estimation_duration_seconds",
			Help:    "Time the receiver spent estimating each interval of the sender (its rate is the share of time estimation is busy).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"sender"}),
		lost: newLostMetrics(),
		misassigned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_boundary_misassigned_intervals_total",
			Help: "Intervals published with status delay_beyond_window: packets slower than the hold window may sit in the wrong interval, loss withheld."}, []string{"sender"}),
		window: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lds_boundary_window_seconds",
			Help: "The receiver's current hold window at interval boundaries for the sender (grows with the delays seen, at most max_delay)."}, []string{"sender"}),
		resErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_results_write_errors_total",
			Help: "Failed writes of the results file, by reason (no_space, io, open, fsync, rotate, other)."}, []string{"reason"}),
		resDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "lds_results_dropped_records_total",
			Help: "Flow records left out of the results file because their interval's write failed (never written in part)."}),
		connRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_connection_refusals_total",
			Help: "Connections to the sender port closed before a stream could open, by reason (handshake_timeout, handshake_failed, pending_evicted, max_connections)."}, []string{"reason"}),
		sndRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_sender_refusals_total",
			Help: "Sender streams refused at Hello, by reason (hello_timeout, no_hello, bad_sender_id, identity_mismatch, unknown_sender, config_mismatch, not_served)."}, []string{"reason"}),
		ivRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_interval_refusals_total",
			Help: "Interval halves the matcher refused or replaced, by reason (duplicate, superseded_early, early_overflow, receiver_after_final)."}, []string{"sender", "reason"}),
	}
	for _, c := range append([]prometheus.Collector{
		r.intervals, r.spikes, r.lossSpikes, r.linkSent, r.linkRecv, r.ivDrops, r.sketchBytes, r.frameErrs, r.watchCut, r.delayHist, r.packetHist, r.estTime, r.resErrs, r.resDropped,
		r.misassigned, r.window, r.connRefused, r.sndRefused, r.ivRefused,
		r.lost.listed, r.lost.extra, r.lost.incomplete, r.lost.reordered, r.lost.repaired, r.lost.repairBlocked,
		stateCollector{r}, r.health,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, r.exp.collectors()...) {
		if err := r.reg.Register(c); err != nil {
			return nil, fmt.Errorf("receiver metrics: registering a collector: %w", err)
		}
	}
	return r, nil
}

// Registry returns the private registry to serve.
func (r *Receiver) Registry() *prometheus.Registry { return r.reg }

// sender returns the state of a sender, creating it and its zero-valued
// outcome counters on first sight. Call with r.mu held.
func (r *Receiver) sender(name string) *senderState {
	s := r.senders[name]
	if s == nil {
		s = &senderState{}
		r.senders[name] = s
		for _, o := range knownOutcomes() {
			r.intervals.WithLabelValues(name, o)
		}
		r.spikes.WithLabelValues(name)
		r.lossSpikes.WithLabelValues(name)
		r.watchCut.WithLabelValues(name)
	}
	return s
}

// Tracked returns a predicate for the tracked set of iv (its top_n heaviest
// flows plus watched ones), for spike.Detector.Observe. It costs one
// selection pass, like ObserveInterval's own.
func (r *Receiver) Tracked(iv *results.Interval) func(*results.FlowRecord) bool {
	sel := selectFlows(iv.Flows, r.cfg.TopN, r.watch)
	set := make(map[*results.FlowRecord]struct{}, len(sel.picks))
	for _, p := range sel.picks {
		set[&iv.Flows[p.idx]] = struct{}{}
	}
	return func(f *results.FlowRecord) bool {
		_, ok := set[f]
		return ok
	}
}

// ObserveInterval publishes the estimates of one finalized interval and the
// spikes the detector found in it. It does not count the interval's outcome:
// IntervalOutcome does, once for every interval whatever its outcome. An
// interval older than the sender's latest (a resend) adds to the counters
// and the histogram but does not replace the latest state.
func (r *Receiver) ObserveInterval(iv *results.Interval, spikes []spike.Event) {
	if iv == nil {
		return
	}
	sender := iv.Sender
	var latency, loss []spike.Event
	for _, e := range spikes {
		if e.Kind == spike.KindLoss {
			loss = append(loss, e)
		} else {
			latency = append(latency, e)
		}
	}
	r.spikes.WithLabelValues(sender).Add(float64(len(latency)))
	r.lossSpikes.WithLabelValues(sender).Add(float64(len(loss)))
	r.ivDrops.WithLabelValues(sender, "sender").Add(float64(iv.SenderDrops))
	r.ivDrops.WithLabelValues(sender, "receiver").Add(float64(iv.ReceiverDrops))
	for i := range iv.Links {
		l := &iv.Links[i]
		if !l.CaptureDrops {
			// A capture that dropped packets would add them to the
			// difference for good (LDSLinkLoss reads it): such an
			// interval's packets are left out of both counters.
			r.linkSent.WithLabelValues(sender, l.Class).Add(float64(l.Sent))
			r.linkRecv.WithLabelValues(sender, l.Class).Add(float64(l.Received))
		}
		if len(l.Delays) > 0 && !l.Unsynced && iv.Outcome != results.OutcomeUnsynced {
			h := r.packetHist.WithLabelValues(sender, l.Class)
			for _, d := range l.Delays {
				h.Observe(d / 1e9)
			}
		}
	}
	hist := r.delayHist.WithLabelValues(sender)
	samples := make([]float64, 0, len(iv.Flows))
	var samplesSum float64
	for i := range iv.Flows {
		f := &iv.Flows[i]
		if f.DelayNS != nil && !f.Unsynced && iv.Outcome != results.OutcomeUnsynced {
			hist.Observe(*f.DelayNS / 1e9)
		}
		if f.DelayNS != nil && finite(f.Samples) {
			samples = append(samples, f.Samples)
			samplesSum += f.Samples
		}
	}

	sel := selectFlows(iv.Flows, r.cfg.TopN, r.watch)
	if sel.watchCut > 0 {
		r.watchCut.WithLabelValues(sender).Add(float64(sel.watchCut))
	}
	unsynced := iv.Outcome == results.OutcomeUnsynced
	flows := make([]flowSeries, 0, len(sel.picks))
	watchOf := make(map[capture.FlowKey]string, len(sel.picks))
	for _, p := range sel.picks {
		f := &iv.Flows[p.idx]
		watchOf[f.Key] = p.watch
		fs := flowSeries{labels: flowLabelValues(sender, f.Key, p.watch),
			delay: math.NaN(), stddev: math.NaN(), ci95: math.NaN(), lossRatio: math.NaN(), packets: f.Packets,
			p50: math.NaN(), p90: math.NaN(), p99: math.NaN()}
		if !unsynced && !f.Unsynced {
			fs.delay, fs.stddev, fs.ci95 = seconds(f.DelayNS), seconds(f.StddevNS), seconds(f.CI95NS)
			fs.p50, fs.p90, fs.p99 = seconds(f.P50NS), seconds(f.P90NS), seconds(f.P99NS)
		}
		if f.Packets > 0 && f.Loss != nil && finite(*f.Loss) && !spike.LossWithheld(f) {
			fs.lossRatio = math.Min(1, math.Max(0, *f.Loss/f.Packets)) // withheld loss (nil) stays NaN: no loss alarm
		}
		flows = append(flows, fs)
	}
	links := make([]linkSeries, 0, len(iv.Links))
	for i := range iv.Links {
		l := &iv.Links[i]
		// A withheld ratio (nil: packets may sit in a neighbouring
		// interval, or a capture dropped some) is NaN: no loss alarm.
		ls := linkSeries{class: l.Class, delay: math.NaN(), stddev: math.NaN(), ci95: math.NaN(), ratio: math.NaN()}
		if l.LossRatio != nil {
			ls.ratio = *l.LossRatio
		}
		if !unsynced && !l.Unsynced {
			ls.delay, ls.stddev, ls.ci95 = seconds(l.DelayNS), seconds(l.StddevNS), seconds(l.CI95NS)
		}
		links = append(links, ls)
	}
	slices.Sort(samples)
	now := float64(r.now().UnixNano()) / 1e9

	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sender(sender)
	s.spikes = r.recordSpikes(s, s.spikes, iv.Interval, sender, latency, watchOf)
	s.lossSpikes = r.recordSpikes(s, s.lossSpikes, iv.Interval, sender, loss, watchOf)
	if s.have && iv.Interval < s.interval {
		r.log.Debug("metrics: older interval counted, latest state kept", "sender", sender, "interval", iv.Interval, "latest", s.interval)
		return
	}
	*s = senderState{
		have: true, interval: iv.Interval, startNS: iv.StartNS, completedUnix: now,
		flows: flows, links: links, spikingN: len(latency), spikes: s.spikes, lossSpikes: s.lossSpikes,
		nFlows: len(iv.Flows), trackedTop: sel.topN, trackedWatch: len(sel.picks) - sel.topN,
		usable: iv.UsableCellRatio, samplesSum: samplesSum, samplesMedian: median(samples),
		sketchBytes: float64(iv.SketchBytes), connected: s.connected,
	}
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

// IntervalOutcome counts one interval of sender by outcome (a results.Outcome*
// constant): call it once for every interval, those published with
// ObserveInterval and those that produced none (voided by a seq gap, a
// duplicate, refused).
func (r *Receiver) IntervalOutcome(sender, outcome string) {
	r.mu.Lock()
	r.sender(sender)
	r.mu.Unlock()
	r.intervals.WithLabelValues(sender, outcome).Inc()
}

// SenderConnected records whether the sender's stream is up.
func (r *Receiver) SenderConnected(sender string, up bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sender(sender).connected = &up
}

// SetClock records one end's clock: end is "sender" or "receiver", state the
// PTP state ("synced" when disciplined), offsetNS the offset from the
// grandmaster, errBoundNS the bound on the clock error.
func (r *Receiver) SetClock(end, sender, state string, offsetNS int64, errBoundNS float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clocks[clockKey{end, sender}] = clockState{state: state, offset: float64(offsetNS) / 1e9, errBound: errBoundNS / 1e9}
}

// SetOwnClock makes every scrape read the receiver's own clock from f and
// export it as lds_ptp_state and lds_ptp_offset_seconds with end="receiver",
// sender="": from start, before any sender connects or any interval is
// published, so that an operator sees why delays are withheld. It takes
// the place of every SetClock("receiver", ...): the receiver's clock has
// one series, whichever senders it measures against. f must be safe for
// concurrent use and must not call back into r.
func (r *Receiver) SetOwnClock(f func() OwnClock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ownClock = f
}

// SketchBytes counts n sketch bytes received from sender.
func (r *Receiver) SketchBytes(sender string, n int) {
	if n > 0 {
		r.sketchBytes.WithLabelValues(sender).Add(float64(n))
	}
}

// EstimationDuration records how long estimating one of sender's intervals
// took.
func (r *Receiver) EstimationDuration(sender string, d time.Duration) {
	r.estTime.WithLabelValues(sender).Observe(d.Seconds())
}

// BoundaryMisassigned counts one interval of sender published with status
// delay_beyond_window.
func (r *Receiver) BoundaryMisassigned(sender string) {
	r.misassigned.WithLabelValues(sender).Inc()
}

// BoundaryWindow records the receiver's current hold window for sender.
func (r *Receiver) BoundaryWindow(sender string, w time.Duration) {
	r.window.WithLabelValues(sender).Set(w.Seconds())
}

// FrameError counts a refused frame; reason must come from a fixed set.
func (r *Receiver) FrameError(sender, reason string) {
	r.frameErrs.WithLabelValues(sender, reason).Inc()
}

// RefusalReasons creates the connection and sender refusal series of the
// given reasons at 0, so that rate() and increase() work from the first.
func (r *Receiver) RefusalReasons(connection, sender []string) {
	for _, reason := range connection {
		r.connRefused.WithLabelValues(reason)
	}
	for _, reason := range sender {
		r.sndRefused.WithLabelValues(reason)
	}
}

// ConnectionRefusal counts a connection refused before a stream opened;
// reason comes from a fixed set (wire.ConnectionRefusalReasons).
func (r *Receiver) ConnectionRefusal(reason string) { r.connRefused.WithLabelValues(reason).Inc() }

// SenderRefusal counts a sender refused at Hello; reason comes from a
// fixed set (wire.SenderRefusalReasons). No sender label: the id of a
// refused sender is only claimed.
func (r *Receiver) SenderRefusal(reason string) { r.sndRefused.WithLabelValues(reason).Inc() }

// IntervalRefusal counts n interval halves of sender the matcher refused
// or replaced; reason comes from a fixed set (interval.RefusalReasons).
func (r *Receiver) IntervalRefusal(sender, reason string, n uint64) {
	if n > 0 {
		r.ivRefused.WithLabelValues(sender, reason).Add(float64(n))
	}
}

// CaptureHealth is the capture interface's oversize-frame and link series.
func (r *Receiver) CaptureHealth() *CaptureHealth { return r.health }

// ResultsFileReasons creates the write error series of reasons at 0, so
// that rate() and increase() work from the first error.
func (r *Receiver) ResultsFileReasons(reasons []string) {
	for _, reason := range reasons {
		r.resErrs.WithLabelValues(reason)
	}
}

// ResultsWriteError counts one failed write of the results file and the
// records it dropped.
func (r *Receiver) ResultsWriteError(reason string, dropped int) {
	r.resErrs.WithLabelValues(reason).Inc()
	r.resDropped.Add(float64(dropped))
}

// CaptureCounters sets the receiver capture's cumulative totals: packets
// seen, and packets dropped or left out by reason (a fixed set of reasons).
func (r *Receiver) CaptureCounters(packets uint64, drops map[string]uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.capture = captureState{packets: packets, drops: cloneMap(drops), set: true}
}

// stateCollector emits the latest-state series at scrape time.
type stateCollector struct{ r *Receiver }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.r.d
	for _, x := range []*prometheus.Desc{d.FlowDelay, d.FlowP50, d.FlowP90, d.FlowP99, d.FlowStddev, d.FlowCI, d.FlowLoss, d.FlowPackets,
		d.FlowSpike, d.FlowLossSpike, d.Spiking, d.Tracked, d.Flows, d.LinkDelay, d.LinkStddev, d.LinkCI, d.LinkLoss,
		d.Usable, d.SamplesSum, d.SamplesMed, d.SketchSize, d.LastStart, d.LastDone, d.Connected,
		d.PTPOffset, d.PTPErr, d.PTPState, d.CapPackets, d.CapDrops} {
		ch <- x
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	r, d := c.r, c.r.d
	r.mu.Lock()
	own := r.ownClock
	r.mu.Unlock()
	var oc OwnClock
	if own != nil {
		oc = own() // outside r.mu: f reads the PTP checker
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, s := range r.senders {
		if s.connected != nil {
			gauge(ch, d.Connected, boolFloat(*s.connected), name)
		}
		if !s.have {
			continue
		}
		for _, f := range s.flows {
			gauge(ch, d.FlowDelay, f.delay, f.labels...)
			gauge(ch, d.FlowStddev, f.stddev, f.labels...)
			gauge(ch, d.FlowCI, f.ci95, f.labels...)
			gauge(ch, d.FlowLoss, f.lossRatio, f.labels...)
			gauge(ch, d.FlowPackets, f.packets, f.labels...)
			gauge(ch, d.FlowP50, f.p50, f.labels...)
			gauge(ch, d.FlowP90, f.p90, f.labels...)
			gauge(ch, d.FlowP99, f.p99, f.labels...)
		}
		for _, h := range s.spikes {
			gauge(ch, d.FlowSpike, float64(len(h.ids)), h.labels...)
		}
		for _, h := range s.lossSpikes {
			gauge(ch, d.FlowLossSpike, float64(len(h.ids)), h.labels...)
		}
		gauge(ch, d.Spiking, float64(s.spikingN), name)
		gauge(ch, d.Tracked, float64(s.trackedTop), name, "top")
		gauge(ch, d.Tracked, float64(s.trackedWatch), name, "watch")
		gauge(ch, d.Flows, float64(s.nFlows), name)
		for _, l := range s.links {
			gauge(ch, d.LinkDelay, l.delay, name, l.class)
			gauge(ch, d.LinkStddev, l.stddev, name, l.class)
			gauge(ch, d.LinkCI, l.ci95, name, l.class)
			gauge(ch, d.LinkLoss, l.ratio, name, l.class)
		}
		gauge(ch, d.Usable, s.usable, name)
		gauge(ch, d.SamplesSum, s.samplesSum, name)
		gauge(ch, d.SamplesMed, s.samplesMedian, name)
		gauge(ch, d.SketchSize, s.sketchBytes, name)
		gauge(ch, d.LastStart, float64(s.startNS)/1e9, name)
		gauge(ch, d.LastDone, s.completedUnix, name)
	}
	if own != nil {
		if oc.HaveOffset {
			gauge(ch, d.PTPOffset, float64(oc.OffsetNS)/1e9, "receiver", "")
		}
		gauge(ch, d.PTPState, 1, "receiver", "", oc.State)
	}
	for k, cs := range r.clocks {
		if own != nil && k.end == "receiver" {
			continue // the own clock has one series, sender="" (above)
		}
		gauge(ch, d.PTPOffset, cs.offset, k.end, k.sender)
		gauge(ch, d.PTPErr, cs.errBound, k.end, k.sender)
		gauge(ch, d.PTPState, 1, k.end, k.sender, cs.state)
	}
	collectCapture(ch, d, &r.capture)
}

func collectCapture(ch chan<- prometheus.Metric, d *descs, c *captureState) {
	if !c.set {
		return
	}
	ch <- prometheus.MustNewConstMetric(d.CapPackets, prometheus.CounterValue, float64(c.packets))
	for reason, n := range c.drops {
		ch <- prometheus.MustNewConstMetric(d.CapDrops, prometheus.CounterValue, float64(n), reason)
	}
}

// gauge emits a gauge unless v is NaN (no estimate: no series).
func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	if math.IsNaN(v) {
		return
	}
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func flowLabelValues(sender string, k capture.FlowKey, watch string) []string {
	return []string{sender, k.SrcAddr().String(), k.DstAddr().String(), strconv.Itoa(int(k.SPort)), strconv.Itoa(int(k.DPort)),
		strconv.Itoa(int(k.Proto)), watch}
}

func seconds(ns *float64) float64 {
	if ns == nil || !finite(*ns) {
		return math.NaN()
	}
	return *ns / 1e9
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// median of sorted xs; NaN (no series) for none.
func median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func cloneMap(m map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
