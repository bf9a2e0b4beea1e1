package receiver

import (
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
)

// applyReorder gives each flow with enough joined samples its reordering
// (RFC 4737: a packet received after a packet of its flow sent later):
// the share of its joined samples received after a later-sent sample,
// scaled to the packets it delivered and corrected for the overtakers the
// samples miss, leaning on the evidence of all the interval's flows where
// its own samples are few (sample.FlowDist.ReorderedEstimate,
// sample.ReorderPool), and the largest
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
	var pool sample.ReorderPool
	delivered := func(i int, d *sample.FlowDist) float64 {
		r := &iv.Flows[i]
		return max(float64(len(d.Delays)), r.Packets-r.LossOr(0)) // withheld: the packets sent bound it
	}
	for i := range iv.Flows {
		if i >= len(hashes) {
			break // records added for flows that lost every packet: no samples
		}
		if d := joined.Flows[hashes[i]]; d != nil && len(d.Delays) >= sample.MinP50 {
			pool.Add(d, delivered(i, d))
		}
	}
	for i := range iv.Flows {
		if i >= len(hashes) {
			break
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
		r.Reordered = results.Float(d.ReorderedEstimate(delivered(i, d), pool))
		r.ReorderExtentNS = results.Float(d.ReorderExtentNS)
	}
	if all > 0 {
		iv.ReorderedRatio = results.Float(float64(reordered) / float64(all))
	}
}
