package receiver

import (
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
)

// applyReorder gives each flow with enough joined samples its reordering
// (RFC 4737: a packet received after a packet of its flow sent later):
// the share of its joined samples received after a later-sent sample,
// scaled to the packets it delivered and corrected for the overtakers the
// samples miss (sample.FlowDist.ReorderedEstimate), and the largest
// lateness among them (a lower bound: the samples' largest);
// and the interval the share over all joined samples. Called last, so that
// the delivered packets are packets − loss with the final loss (exact
// where the lost-packet list is). hashes are the flows' hashes, index for
// index with iv.Flows.
//
// Reordering needs no compensation in loss: the sketches and the
// lost-packet table hold a flow's packets whatever their order, and the
// boundary placement puts a packet in its send interval whatever arrived
// before it.
func applyReorder(iv *results.Interval, joined *sample.Joined, hashes []uint64) {
	if joined == nil {
		return
	}
	var all, reordered int
	for i := range iv.Flows {
		if i >= len(hashes) {
			break // records added for flows that lost every packet: no samples
		}
		d := joined.Flows[hashes[i]]
		if d == nil {
			continue
		}
		n := len(d.Delays)
		all += n
		reordered += d.Reordered
		if n < sample.MinP50 {
			continue
		}
		r := &iv.Flows[i]
		delivered := max(float64(n), r.Packets-r.LossOr(0)) // withheld: the packets sent bound it
		r.Reordered = results.Float(d.ReorderedEstimate(delivered))
		r.ReorderExtentNS = results.Float(d.ReorderExtentNS)
	}
	if all > 0 {
		iv.ReorderedRatio = results.Float(float64(reordered) / float64(all))
	}
}
