package metrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// descSet is the descriptors a scrape-time collector owns: each is made
// once, by add, and Describe sends them all.
type descSet []*prometheus.Desc

// add makes a descriptor of the set (no constant labels).
func (s *descSet) add(name, help string, labels ...string) *prometheus.Desc {
	d := prometheus.NewDesc(name, help, labels, nil)
	*s = append(*s, d)
	return d
}

// Describe sends every descriptor of the set.
func (s descSet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s {
		ch <- d
	}
}

// gauge emits a gauge unless v is NaN (no estimate: no series).
func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	if math.IsNaN(v) {
		return
	}
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}
