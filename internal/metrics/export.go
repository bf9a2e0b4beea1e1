package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// exportSeries are the exporters' series (internal/export): labels are the
// exporter kind (ipfix, kafka) and the configured collector or broker list,
// so their number is fixed by the configuration.
type exportSeries struct {
	sent, dropped, errors *prometheus.CounterVec
	last, up, queued      *prometheus.GaugeVec
}

func newExportSeries() *exportSeries {
	l := []string{"exporter", "collector"}
	return &exportSeries{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_export_records_total",
			Help: "Flow records an exporter handed to its collector (IPFIX: written; Kafka: acknowledged)."}, l),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_export_dropped_records_total",
			Help: "Flow records an exporter dropped, by reason (queue_full, send_error, stop, encode)."}, append(l, "reason")),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_export_errors_total",
			Help: "Transport errors of an exporter (failed connects and writes, failed deliveries)."}, l),
		last: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lds_export_last_success_timestamp_seconds",
			Help: "Unix time of an exporter's latest successful send."}, l),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lds_export_up",
			Help: "1 while an exporter's latest attempt succeeded, else 0."}, l),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lds_export_queued_records",
			Help: "Flow records waiting in an exporter's buffer."}, l),
	}
}

func (e *exportSeries) collectors() []prometheus.Collector {
	return []prometheus.Collector{e.sent, e.dropped, e.errors, e.last, e.up, e.queued}
}

// ExportSent counts n records sent by an exporter and stamps its last success.
func (r *Receiver) ExportSent(kind, collector string, n int) {
	r.exp.sent.WithLabelValues(kind, collector).Add(float64(n))
	r.exp.last.WithLabelValues(kind, collector).Set(float64(r.now().UnixNano()) / 1e9)
}

// ExportDropped counts n records an exporter dropped for reason.
func (r *Receiver) ExportDropped(kind, collector, reason string, n int) {
	r.exp.dropped.WithLabelValues(kind, collector, reason).Add(float64(n))
}

// ExportError counts one transport error of an exporter.
func (r *Receiver) ExportError(kind, collector string) {
	r.exp.errors.WithLabelValues(kind, collector).Inc()
}

// ExportUp sets whether an exporter's latest attempt succeeded; the counters
// are created at 0 with it, so that increase() works from the first error.
func (r *Receiver) ExportUp(kind, collector string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	r.exp.up.WithLabelValues(kind, collector).Set(v)
	r.exp.sent.WithLabelValues(kind, collector)
	r.exp.errors.WithLabelValues(kind, collector)
	r.exp.dropped.WithLabelValues(kind, collector, "queue_full")
	r.exp.dropped.WithLabelValues(kind, collector, "send_error")
}

// ExportQueued sets how many records wait in an exporter's buffer.
func (r *Receiver) ExportQueued(kind, collector string, n int) {
	r.exp.queued.WithLabelValues(kind, collector).Set(float64(n))
}

// ExportTotals sums the records sent and dropped over every exporter (for
// `ldsctl replay`'s summary).
func (r *Receiver) ExportTotals() (sent, dropped float64) {
	mfs, err := r.reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "lds_export_records_total":
				sent += m.GetCounter().GetValue()
			case "lds_export_dropped_records_total":
				dropped += m.GetCounter().GetValue()
			}
		}
	}
	return sent, dropped
}
