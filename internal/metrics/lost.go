package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lds-net/lds/internal/results"
)

// lostMetrics are the series of the lost-packet list (docs/operations.md).
type lostMetrics struct {
	listed, extra, incomplete *prometheus.CounterVec
	repaired                  *prometheus.CounterVec
	reordered                 *prometheus.GaugeVec
}

func newLostMetrics() lostMetrics {
	return lostMetrics{
		listed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_lost_packets_listed_total",
			Help: "Lost packets the receiver listed (tap A saw them, tap B did not), from the sender's complete intervals."}, []string{"sender"}),
		extra: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_extra_packets_listed_total",
			Help: "Packets tap B saw and tap A did not (duplicated, misdirected or injected), listed with kind extra."}, []string{"sender"}),
		incomplete: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_lost_list_incomplete_intervals_total",
			Help: "Complete intervals whose lost-packet list is incomplete (loss stays an estimate), by reason: overflow (more than lost.capacity), delay_beyond_window, capture_drops, late, unresolved, partial, no_answer, answer_gone, answer_refused, unanswered."},
			[]string{"sender", "reason"}),
		repaired: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lds_lost_repaired_cells_total",
			Help: "Flow sketch cells the complete lost-packet lists repaired: every listed packet in them had its exact send time and was taken out, so their delays are exact."}, []string{"sender"}),
		reordered: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lds_link_reordered_ratio",
			Help: "Share of the latest complete interval's joined packet samples that arrived after a sample of their flow sent later (RFC 4737 reordering)."}, []string{"sender"}),
	}
}

// Reordered sets the link's reordered ratio from a complete interval.
func (r *Receiver) Reordered(iv *results.Interval) {
	if iv.ReorderedRatio != nil {
		r.lost.reordered.WithLabelValues(iv.Sender).Set(*iv.ReorderedRatio)
	}
}

// LostList counts an interval's listed lost and extra packets, and the
// interval if its list is incomplete.
func (r *Receiver) LostList(iv *results.Interval) {
	if iv.LostList == nil {
		return
	}
	r.lost.listed.WithLabelValues(iv.Sender).Add(float64(iv.LostList.Lost))
	r.lost.extra.WithLabelValues(iv.Sender).Add(float64(iv.LostList.Extra))
	r.lost.repaired.WithLabelValues(iv.Sender).Add(float64(iv.LostList.RepairedCells))
	if !iv.LostList.Complete {
		r.lost.incomplete.WithLabelValues(iv.Sender, iv.LostList.Reason).Inc()
	}
}
