package metrics

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/spike"
)

// Interval outcomes that ObserveInterval and IntervalOutcome pre-create at 0
// for every sender, so that rate() and increase() work from the first one.
func knownOutcomes() []results.Outcome {
	return []results.Outcome{
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
	now   func() time.Time // replaced in tests

	health *CaptureHealth

	intervals     *prometheus.CounterVec
	spikes        *prometheus.CounterVec
	lossSpikes    *prometheus.CounterVec
	linkSent      *prometheus.CounterVec
	linkRecv      *prometheus.CounterVec
	ivDrops       *prometheus.CounterVec
	sketchBytes   *prometheus.CounterVec
	frameErrs     *prometheus.CounterVec
	watchCut      *prometheus.CounterVec
	delayHist     *prometheus.HistogramVec
	packetHist    *prometheus.HistogramVec
	estTime       *prometheus.HistogramVec
	misassigned   *prometheus.CounterVec
	lost          lostMetrics // lost.go
	window        *prometheus.GaugeVec
	exp           *exportSeries
	resErrs       *prometheus.CounterVec
	resDropped    prometheus.Counter
	connRefused   *prometheus.CounterVec
	senderRefused *prometheus.CounterVec
	ivRefused     *prometheus.CounterVec

	// The scrape-time series, a collector per concern, each with its
	// own descriptors: flows.go, link.go, interval.go, clock.go, capture.go.
	clock   *clockCollector
	capture *captureCollector

	// mu guards senders: the latest state of each sender, which the
	// flow, link and interval collectors read.
	mu      sync.Mutex
	senders map[string]*senderState
}

// eachSender calls f for every sender under r.mu: the scrape-time
// collectors' view of the senders' state.
func (r *Receiver) eachSender(f func(name string, s *senderState)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, s := range r.senders {
		f(name, s)
	}
}

// senderState is what the latest interval of one sender says; the flow,
// link and interval collectors emit it at scrape time, so a flow that left
// the tracked set has no series at all (nothing to delete, no ghosts).
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
		cfg: cfg, watch: watch, log: log, now: time.Now, health: newCaptureHealth(), exp: newExportSeries(),
		reg:     prometheus.NewRegistry(),
		senders: map[string]*senderState{},
		clock:   newClockCollector(),
		capture: newCaptureCollector(),
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
		// Per-packet delays of the uniform link sample: a native histogram
		// (buckets ~10 % wide) with the classic delay_buckets beside it
		// for servers without native histograms.
		packetHist: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lds_link_packet_delay_seconds",
			Help:                            "One-way delay of the packets of the uniform link sample (exact, from joined packet samples), per traffic class.",
			Buckets:                         slices.Clone(cfg.Buckets),
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour}, []string{"sender", "class"}),
		// 1 ms to 16 s: the paper estimator takes milliseconds, decode
		// tenths of a second at 150k flows.
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
		senderRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_sender_refusals_total",
			Help: "Sender streams refused at Hello, by reason (hello_timeout, no_hello, bad_sender_id, identity_mismatch, unknown_sender, config_mismatch, not_served)."}, []string{"reason"}),
		ivRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_interval_refusals_total",
			Help: "Interval halves the matcher refused or replaced, by reason (duplicate, superseded_early, early_overflow, receiver_after_final)."}, []string{"sender", "reason"}),
	}
	for _, c := range append([]prometheus.Collector{
		r.intervals, r.spikes, r.lossSpikes, r.linkSent, r.linkRecv, r.ivDrops, r.sketchBytes, r.frameErrs, r.watchCut, r.delayHist, r.packetHist, r.estTime, r.resErrs, r.resDropped,
		r.misassigned, r.window, r.connRefused, r.senderRefused, r.ivRefused,
		r.lost.listed, r.lost.extra, r.lost.incomplete, r.lost.reordered, r.lost.repaired,
		newFlowCollector(r), newLinkCollector(r), newIntervalCollector(r), r.clock, r.capture, r.health,
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
			r.intervals.WithLabelValues(name, string(o))
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

// IntervalOutcome counts one interval of sender by outcome: call it once for every interval, those published with
// ObserveInterval and those that produced none (voided by a seq gap, a
// duplicate, refused).
func (r *Receiver) IntervalOutcome(sender string, outcome results.Outcome) {
	r.mu.Lock()
	r.sender(sender)
	r.mu.Unlock()
	r.intervals.WithLabelValues(sender, string(outcome)).Inc()
}

// SenderConnected records whether the sender's stream is up.
func (r *Receiver) SenderConnected(sender string, up bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sender(sender).connected = &up
}

// SetClock records one end's clock: end is "sender" or "receiver", state the
// PTP state (ptp.StateSynced when disciplined), offsetNS the offset from the
// grandmaster, errBoundNS the bound on the clock error.
func (r *Receiver) SetClock(end, sender string, state ptp.State, offsetNS int64, errBoundNS float64) {
	r.clock.set(end, sender, state, offsetNS, errBoundNS)
}

// SetOwnClock makes every scrape read the receiver's own clock from f and
// export it as lds_ptp_state and lds_ptp_offset_seconds with end="receiver",
// sender="": from start, before any sender connects or any interval is
// published, so that an operator sees why delays are withheld. It takes
// the place of every SetClock("receiver", ...): the receiver's clock has
// one series, whichever senders it measures against. f must be safe for
// concurrent use and must not call back into r.
func (r *Receiver) SetOwnClock(f func() OwnClock) { r.clock.setOwn(f) }

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
		r.senderRefused.WithLabelValues(reason)
	}
}

// ConnectionRefusal counts a connection refused before a stream opened;
// reason comes from a fixed set (wire.ConnectionRefusalReasons).
func (r *Receiver) ConnectionRefusal(reason string) { r.connRefused.WithLabelValues(reason).Inc() }

// SenderRefusal counts a sender refused at Hello; reason comes from a
// fixed set (wire.SenderRefusalReasons). No sender label: the id of a
// refused sender is only claimed.
func (r *Receiver) SenderRefusal(reason string) { r.senderRefused.WithLabelValues(reason).Inc() }

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
	r.capture.set(packets, drops)
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
