package metrics

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lds-net/lds/internal/ptp"
)

// Sender holds the sender daemon's series. Methods are safe for concurrent use.
type Sender struct {
	reg *prometheus.Registry
	log *slog.Logger

	sent, acked, resent, dropped prometheus.Counter
	bytes                        prometheus.Counter
	buffer, connected            prometheus.Gauge

	capture   *captureCollector
	health    *CaptureHealth
	ptpOffset *prometheus.Desc
	ptpErr    *prometheus.Desc
	ptpState  *prometheus.Desc

	mu       sync.Mutex
	clock    *clockState
	ownClock func() OwnClock // nil: none; read at scrape time (SetOwnClock)
}

// NewSender checks cfg and registers the sender's series, plus the Go
// runtime and process collectors, on a new private registry. Only the
// listen/web_config keys of cfg matter to a sender.
func NewSender(cfg Config, log *slog.Logger) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sender metrics: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	s := &Sender{
		reg:       prometheus.NewRegistry(),
		log:       log,
		sent:      counter("lds_sender_intervals_sent_total", "Intervals sent to the receiver for the first time."),
		acked:     counter("lds_sender_intervals_acked_total", "Intervals the receiver acknowledged."),
		resent:    counter("lds_sender_intervals_resent_total", "Intervals sent again after a reconnect."),
		dropped:   counter("lds_sender_intervals_dropped_total", "Unacknowledged intervals dropped because the resend buffer was full."),
		bytes:     counter("lds_sender_sent_bytes_total", "Bytes of frames sent to the receiver."),
		buffer:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "lds_sender_buffered_intervals", Help: "Intervals held awaiting an acknowledgement."}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "lds_sender_connected", Help: "1 while the stream to the receiver is up, else 0."}),
		capture:   newCaptureCollector(),
		health:    newCaptureHealth(),
		ptpOffset: prometheus.NewDesc("lds_ptp_offset_seconds", "PTP offset from the grandmaster reported by ptp4l.", nil, nil),
		ptpErr:    prometheus.NewDesc("lds_ptp_error_bound_seconds", "Bound on this clock's error.", nil, nil),
		ptpState:  prometheus.NewDesc("lds_ptp_state", "1 for the current PTP state (only the current state has a series).", []string{"state"}, nil),
	}
	for _, c := range []prometheus.Collector{
		s.sent, s.acked, s.resent, s.dropped, s.bytes, s.buffer, s.connected,
		senderCollector{s}, s.capture, s.health,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := s.reg.Register(c); err != nil {
			return nil, fmt.Errorf("sender metrics: registering a collector: %w", err)
		}
	}
	return s, nil
}

// CaptureHealth is the capture interface's oversize-frame and link series.
func (s *Sender) CaptureHealth() *CaptureHealth { return s.health }

// Registry returns the private registry to serve.
func (s *Sender) Registry() *prometheus.Registry { return s.reg }

// IntervalSent counts an interval sent for the first time and its bytes.
func (s *Sender) IntervalSent(bytes int) { s.sent.Inc(); s.addBytes(bytes) }

// IntervalResent counts an interval sent again after a reconnect.
func (s *Sender) IntervalResent(bytes int) { s.resent.Inc(); s.addBytes(bytes) }

// SentBytes counts n bytes of frames written to the stream (the wire
// client's ClientStats.BytesSent).
func (s *Sender) SentBytes(n uint64) { s.bytes.Add(float64(n)) }

// IntervalAcked counts an acknowledgement.
func (s *Sender) IntervalAcked() { s.acked.Inc() }

// IntervalDropped counts an unacknowledged interval dropped from a full buffer.
func (s *Sender) IntervalDropped() { s.dropped.Inc() }

// BufferDepth sets the number of intervals awaiting an acknowledgement.
func (s *Sender) BufferDepth(n int) { s.buffer.Set(float64(n)) }

// Connected records whether the stream to the receiver is up.
func (s *Sender) Connected(up bool) { s.connected.Set(boolFloat(up)) }

func (s *Sender) addBytes(n int) {
	if n > 0 {
		s.bytes.Add(float64(n))
	}
}

// CaptureCounters sets the capture's cumulative totals: packets seen, and
// packets dropped or left out by reason (a fixed set of reasons).
func (s *Sender) CaptureCounters(packets uint64, drops map[string]uint64) {
	s.capture.set(packets, drops)
}

// SetClock records this end's PTP state (ptp.StateSynced when disciplined), offset
// from the grandmaster and error bound.
func (s *Sender) SetClock(state ptp.State, offsetNS int64, errBoundNS float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock = &clockState{state: state, offset: float64(offsetNS) / 1e9, errBound: errBoundNS / 1e9}
}

// SetOwnClock makes every scrape read this host's clock from f for
// lds_ptp_state and lds_ptp_offset_seconds: from start, before the first
// interval is shipped. The error bound still comes from SetClock. f must
// be safe for concurrent use and must not call back into s.
func (s *Sender) SetOwnClock(f func() OwnClock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ownClock = f
}

// senderCollector emits the sender's clock series at scrape time.
type senderCollector struct{ s *Sender }

func (c senderCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.s.ptpOffset, c.s.ptpErr, c.s.ptpState} {
		ch <- d
	}
}

func (c senderCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	oc, own := readOwnClock(&s.mu, &s.ownClock)
	s.mu.Lock()
	defer s.mu.Unlock()
	if own {
		if oc.HaveOffset {
			gauge(ch, s.ptpOffset, float64(oc.OffsetNS)/1e9)
		}
		gauge(ch, s.ptpState, 1, string(oc.State))
		if s.clock != nil {
			gauge(ch, s.ptpErr, s.clock.errBound)
		}
		return
	}
	if s.clock != nil {
		gauge(ch, s.ptpOffset, s.clock.offset)
		gauge(ch, s.ptpErr, s.clock.errBound)
		gauge(ch, s.ptpState, 1, string(s.clock.state))
	}
}
