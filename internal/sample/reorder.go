package sample

import (
	"cmp"
	"math"
	"slices"
)

// txRx is one joined sample's send and receive time (Unix ns).
type txRx struct{ tx, rx int64 }

// OvertakenBuckets is the length of FlowDist.Overtaken.
const OvertakenBuckets = 8

// reordering counts, among one flow's joined samples, those received after
// a sample sent later (RFC 4737's reordered packet, with the send time as
// the sequence), the largest lateness (a reordered sample's receive time
// less the earliest receive time of the samples sent after it), and, per
// reordered sample, how many later-sent samples arrived before it:
// over[k-1] counts those overtaken by k (the last bucket: k or more). It
// reorders v.
func reordering(v []txRx) (n int, extent float64, over [OvertakenBuckets]int32) {
	if len(v) == 0 {
		return 0, 0, over
	}
	// Ranks of the receive times, for a Fenwick tree of the samples
	// already passed (sent later).
	rxs := make([]int64, len(v))
	for i := range v {
		rxs[i] = v[i].rx
	}
	slices.Sort(rxs)
	bit := make([]int32, len(v)+1)
	slices.SortFunc(v, func(a, b txRx) int { return cmp.Or(cmp.Compare(b.tx, a.tx), cmp.Compare(a.rx, b.rx)) })
	firstRx := int64(math.MaxInt64) // earliest receive time of the samples sent later than the current one
	for i := 0; i < len(v); {
		j := i
		for j < len(v) && v[j].tx == v[i].tx {
			if v[j].rx > firstRx {
				n++
				extent = max(extent, float64(v[j].rx-firstRx))
				// Samples sent later and received strictly before this one.
				k := 0
				for p := rank(rxs, v[j].rx); p > 0; p -= p & -p {
					k += int(bit[p])
				}
				over[min(k, OvertakenBuckets)-1]++
			}
			j++
		}
		for k := i; k < j; k++ {
			firstRx = min(firstRx, v[k].rx)
			for p := rank(rxs, v[k].rx) + 1; p < len(bit); p += p & -p {
				bit[p]++
			}
		}
		i = j
	}
	return n, extent, over
}

// rank is the number of receive times in sorted rxs below rx.
func rank(rxs []int64, rx int64) int {
	i, _ := slices.BinarySearch(rxs, rx)
	return i
}

// ReorderedEstimate estimates how many of a flow's delivered packets were
// reordered from its joined samples, delivered being the packets the flow
// delivered in the interval and q = len(d.Delays)/delivered the share
// joined. A reordered packet shows as reordered among the samples only if
// one of the packets that overtook it was sampled too, so the samples'
// reordered share understates the packets'. The estimate scales the
// observed share by the ratio of the two that a model gives: packets sent
// as a Poisson process at the flow's rate λ (delivered over the samples'
// send span), each delay drawn from the samples' delays F, so that a
// packet of delay d is overtaken by a Poisson number of later packets of
// mean λ·G(d), G(d) = ∫₀ᵈ F, and reordered with probability
// 1 − exp(−λG(d)), seen so among the samples with 1 − exp(−qλG(d)).
// The model sets only the ratio: the observed share carries the evidence,
// so a flow with no reordered sample reports none. Exact when every
// packet is a sample.
func (d *FlowDist) ReorderedEstimate(delivered float64) float64 {
	n := len(d.Delays)
	if n == 0 || d.Reordered == 0 || delivered <= 0 {
		return 0
	}
	q := min(1, float64(n)/delivered)
	observed := float64(d.Reordered) / float64(n)
	if q >= 1 || d.TxSpanNS <= 0 || n < 2 {
		return observed * delivered
	}
	lambda := delivered * float64(n-1) / float64(n) / d.TxSpanNS // packets a ns
	var pTrue, pSamp, prefix float64
	for i, x := range d.Delays { // ascending
		g := (float64(i)*x - prefix) / float64(n) // G(x): the delays below x, integrated
		prefix += x
		m := lambda * g
		pTrue += -math.Expm1(-m)
		pSamp += -math.Expm1(-q * m)
	}
	if pSamp <= 0 {
		return observed * delivered
	}
	return min(delivered, observed*delivered*pTrue/pSamp)
}
