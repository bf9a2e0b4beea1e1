package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// captureCollector is the capture's cumulative totals, which either
// daemon sets whole (CaptureCounters): lds_capture_packets_total and
// lds_capture_drops_total. Its series exist once the totals were set.
type captureCollector struct {
	descSet
	packets, drops *prometheus.Desc

	mu sync.Mutex
	st captureState
}

type captureState struct {
	packets uint64
	drops   map[string]uint64
	set     bool
}

func newCaptureCollector() *captureCollector {
	c := &captureCollector{}
	c.packets = c.add("lds_capture_packets_total", "Packets this daemon's capture saw.")
	c.drops = c.add("lds_capture_drops_total", "Packets this daemon's capture lost or left out, by reason.", "reason")
	return c
}

// set replaces the totals: packets seen, and packets dropped or left out
// by reason (a fixed set of reasons).
func (c *captureCollector) set(packets uint64, drops map[string]uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st = captureState{packets: packets, drops: cloneMap(drops), set: true}
}

func (c *captureCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.st.set {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(c.st.packets))
	for reason, n := range c.st.drops {
		ch <- prometheus.MustNewConstMetric(c.drops, prometheus.CounterValue, float64(n), reason)
	}
}
