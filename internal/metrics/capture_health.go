package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// CaptureHealth holds the state of a daemon's capture interface: packets
// coalesced before the capture and link outages. Its series exist only
// once a live interface source reported (Set), so file replays export
// none.
type CaptureHealth struct {
	oversize, downs, up *prometheus.Desc

	mu            sync.Mutex
	set           bool
	nOver, nDowns uint64
	linkUp        bool
}

func newCaptureHealth() *CaptureHealth {
	return &CaptureHealth{
		oversize: prometheus.NewDesc("lds_capture_oversize_frames_total",
			"Captured frames longer than the interface MTU plus the link header: packets coalesced (GRO/LRO) before the capture.", nil, nil),
		downs: prometheus.NewDesc("lds_capture_link_down_total",
			"Outages of the capture interface (down, no carrier or missing), including one found at start.", nil, nil),
		up: prometheus.NewDesc("lds_capture_link_up",
			"1 while the capture interface is up and running, else 0.", nil, nil),
	}
}

// Set records the cumulative counters and the link state of a live
// capture interface.
func (h *CaptureHealth) Set(oversize, linkDowns uint64, linkUp bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.set, h.nOver, h.nDowns, h.linkUp = true, oversize, linkDowns, linkUp
}

// Describe implements prometheus.Collector.
func (h *CaptureHealth) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.oversize
	ch <- h.downs
	ch <- h.up
}

// Collect implements prometheus.Collector.
func (h *CaptureHealth) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.set {
		return
	}
	ch <- prometheus.MustNewConstMetric(h.oversize, prometheus.CounterValue, float64(h.nOver))
	ch <- prometheus.MustNewConstMetric(h.downs, prometheus.CounterValue, float64(h.nDowns))
	ch <- prometheus.MustNewConstMetric(h.up, prometheus.GaugeValue, boolFloat(h.linkUp))
}
