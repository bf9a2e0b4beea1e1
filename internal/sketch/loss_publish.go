package sketch

import (
	"errors"
	"fmt"
	"math"
)

// AloneLoss returns, per candidate of comp (same order), the lost packets
// the count deficits pin on that flow alone. In a row with p = 1, a cell
// that no other candidate's vLDA covers can only have lost packets of this
// flow (or of a flow that lost every packet and is no candidate); the
// flow's value is the largest, over such rows, of the deficits (sender
// minus receiver packets, over the flow's weight) of those cells. At light
// load, where most flows have a row to themselves, it is their exact loss;
// at the paper's load it is mostly 0. Every flow gets 0 from a sketch
// without a p = 1 row.
func AloneLoss(snd, rcv *LDS, comp []FlowComposition) ([]float64, error) {
	if snd == nil || rcv == nil {
		return nil, errors.New("alone loss: both the sender's and the receiver's sketch are needed")
	}
	if !snd.p.Equal(rcv.p) {
		return nil, fmt.Errorf("alone loss: sender and receiver sketches differ (%s); both ends must run the same sketch configuration", snd.p.diff(rcv.p))
	}
	out := make([]float64, len(comp))
	k, C := snd.k, snd.cols
	cover := make([]uint8, C) // candidates whose vLDA covers each cell of the row, saturating at 2
	for r := 0; r < snd.rows; r++ {
		if snd.thr[r] != 1<<32 {
			continue
		}
		clear(cover)
		for i := range comp {
			c := snd.rowCol(comp[i].Flow, r)
			for range k {
				cover[c] = min(cover[c]+1, 2)
				if c++; c == C {
					c = 0
				}
			}
		}
		base := uint64(r) * C
		for i := range comp {
			w := comp[i].Weight
			if w == 0 {
				w = 1
			}
			c := snd.rowCol(comp[i].Flow, r)
			var lost float64
			for range k {
				if cover[c] == 1 { // rare at load: the cells are read only then
					if s, v := snd.cells[base+c].N, rcv.cells[base+c].N; s > v {
						lost += float64(s-v) / w
					}
				}
				if c++; c == C {
					c = 0
				}
			}
			out[i] = max(out[i], lost)
		}
	}
	return out, nil
}

// LossSupportMin is the point estimate of lost packets from which
// PublishedLoss passes it on unchanged, in packets. Below it the count
// deficits do not tell a flow that lost a packet from one that shares its
// cells with another flow's lost packet: deficit sharing gives a loss-free
// flow of a few hundred packets about one packet when both its p = 1 rows
// hold a deficit cell (docs/RESULTS.md §3), while a flow that really lost
// a few per cent of 100 packets or more comes out at 2 packets and above.
const LossSupportMin = 1.5

// PublishedLoss composes the loss the receiver publishes from decode's
// point estimate, the count-min bound and AloneLoss: the point estimate,
// never above the bound (which is never below the truth while a row is
// unsampled), divided by LossSupportMin where it is below LossSupportMin
// (so that an unsupported estimate stays below one packet); and never
// below what the flow's own cells prove (alone, within the bound).
func PublishedLoss(point, bound, alone float64) float64 {
	v := min(point, bound)
	switch {
	case math.IsNaN(v):
		v = 0
	case v < LossSupportMin:
		v /= LossSupportMin
	}
	return max(v, min(alone, bound))
}
