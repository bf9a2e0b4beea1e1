package sample

import (
	"cmp"
	"math"
	"slices"
)

// sendRecv is one joined sample's send and receive time (Unix ns).
type sendRecv struct{ send, recv int64 }

// OvertakenBuckets is the length of FlowDist.Overtaken.
const OvertakenBuckets = 8

// reordering counts, among one flow's joined samples, those received after
// a sample sent later (RFC 4737's reordered packet, with the send time as
// the sequence), the largest lateness (a reordered sample's receive time
// less the earliest receive time of the samples sent after it), and, per
// reordered sample, how many later-sent samples arrived before it:
// over[k-1] counts those overtaken by k (the last bucket: k or more). It
// reorders v.
func reordering(v []sendRecv) (n int, extent float64, over [OvertakenBuckets]int32) {
	if len(v) == 0 {
		return 0, 0, over
	}
	// Ranks of the receive times, for a Fenwick tree of the samples
	// already passed (sent later).
	rxs := make([]int64, len(v))
	for i := range v {
		rxs[i] = v[i].recv
	}
	slices.Sort(rxs)
	bit := make([]int32, len(v)+1)
	slices.SortFunc(v, func(a, b sendRecv) int { return cmp.Or(cmp.Compare(b.send, a.send), cmp.Compare(a.recv, b.recv)) })
	firstRx := int64(math.MaxInt64) // earliest receive time of the samples sent later than the current one
	for i := 0; i < len(v); {
		j := i
		for j < len(v) && v[j].send == v[i].send {
			if v[j].recv > firstRx {
				n++
				extent = max(extent, float64(v[j].recv-firstRx))
				// Samples sent later and received strictly before this one.
				k := 0
				for p := rank(rxs, v[j].recv); p > 0; p -= p & -p {
					k += int(bit[p])
				}
				over[min(k, OvertakenBuckets)-1]++
			}
			j++
		}
		for k := i; k < j; k++ {
			firstRx = min(firstRx, v[k].recv)
			for p := rank(rxs, v[k].recv) + 1; p < len(bit); p += p & -p {
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

// ReorderPrior is how many expected reordered samples the interval's
// pooled evidence weighs in a flow's estimate (ReorderedEstimate): a flow
// whose samples expect fewer leans on the pool, one whose samples expect
// many on its own.
const ReorderPrior = 2

// ReorderPool is the reordering evidence of all the flows of an interval
// (Add each, then pass it to ReorderedEstimate): the reordered samples
// observed and the number the model expects of them were every delay
// independent, each flow's expectation weighed by how independent its
// delays look (a flow behind a swinging queue expects much and shows
// nothing: it would drag the ratio down for the flows that do reorder).
type ReorderPool struct{ Observed, Expected float64 }

// Add counts d's evidence (delivered: as for ReorderedEstimate).
func (p *ReorderPool) Add(d *FlowDist, delivered float64) {
	if m := d.reorderModel(delivered); m.ok {
		p.Observed += float64(d.Reordered)
		p.Expected += d.independence() * m.samples
	}
}

// Ratio is the pool's reordering against the independent-delay model
// (0: none observed, or no evidence).
func (p ReorderPool) Ratio() float64 {
	if p.Expected <= 0 {
		return 0
	}
	return p.Observed / p.Expected
}

// reorderModelOut is what the model gives for one flow.
type reorderModelOut struct {
	ok      bool    // the model applies (delivered > 0, at least 2 samples over a send span, q < 1)
	samples float64 // reordered samples expected among the joined samples, were delays independent
	packets float64 // reordered packets expected among the delivered ones, the same
}

// reorderModel: packets sent as a Poisson process at the flow's rate λ
// (delivered over the samples' send span), each delay drawn from the
// samples' delays F, so that a packet of delay d is overtaken by a Poisson
// number of later packets of mean λ·G(d), G(d) = ∫₀ᵈ F, and reordered with
// probability 1 − exp(−λG(d)), seen so among the samples (a share q of
// the packets) with 1 − exp(−qλG(d)).
func (d *FlowDist) reorderModel(delivered float64) reorderModelOut {
	n := len(d.Delays)
	if n < 2 || delivered <= 0 || d.SendSpanNS <= 0 {
		return reorderModelOut{}
	}
	q := min(1, float64(n)/delivered)
	if q >= 1 {
		return reorderModelOut{}
	}
	lambda := delivered * float64(n-1) / float64(n) / d.SendSpanNS // packets a ns
	var pTrue, pSamp, prefix float64
	for i, x := range d.Delays { // ascending
		g := (float64(i)*x - prefix) / float64(n) // G(x): the delays below x, integrated
		prefix += x
		m := lambda * g
		pTrue += -math.Expm1(-m)
		pSamp += -math.Expm1(-q * m)
	}
	return reorderModelOut{ok: true, samples: pSamp, packets: pTrue * delivered / float64(n)}
}

// independence is how far the flow's delays look drawn one by one, from
// their lag-1 correlation r among n samples, whose spread is about 1/√n
// were they independent: 1 up to r = 1/√n, 0 from r = 3/√n on (a
// flow behind a slowly swinging queue shows r near 1), linear between.
func (d *FlowDist) independence() float64 {
	sd := 1 / math.Sqrt(float64(max(len(d.Delays), 1)))
	return min(1, max(0, (3*sd-d.SerialCorr)/(2*sd)))
}

// ReorderedEstimate estimates how many of a flow's delivered packets were
// reordered from its joined samples, delivered being the packets the flow
// delivered in the interval and q = len(d.Delays)/delivered the share
// joined. A reordered packet shows as reordered among the samples only if
// one of the packets that overtook it was sampled too, so the samples'
// reordered share understates the packets'. The model (reorderModel:
// independent delays drawn from the samples' own) gives E_s, the
// reordered samples expected, and E_p, the reordered packets expected;
// the evidence scales it: the estimate is θ·E_p, with θ the observed
// reordered samples O against E_s, shrunk towards the interval's pooled
// ratio θ₀ (pool.Ratio) by ReorderPrior expected samples, as far as the
// flow's own delays look drawn one by one (w, independence: a flow whose
// delays follow a slow swing borrows nothing):
//
//	θ = (O + ReorderPrior·w·θ₀) / (E_s + ReorderPrior)
//
// A flow of many samples is judged on its own (E_s ≫ ReorderPrior); one of
// a few dozen samples spread over the interval sees few of its
// overtakers (E_s below 1 at heavy reordering) and borrows the ratio the
// interval's flows show together. Where no flow's samples show reordering
// (θ₀ = 0), a flow with none reports none; delays that never reorder
// (FIFO queues) show none, whatever their spread. Exact when every packet
// is a sample. pool may be the zero value (no pooling).
func (d *FlowDist) ReorderedEstimate(delivered float64, pool ReorderPool) float64 {
	n := len(d.Delays)
	if n == 0 || delivered <= 0 {
		return 0
	}
	observed := float64(d.Reordered) / float64(n)
	m := d.reorderModel(delivered)
	if !m.ok || m.samples <= 0 {
		return min(delivered, observed*delivered)
	}
	theta := (float64(d.Reordered) + ReorderPrior*d.independence()*pool.Ratio()) / (m.samples + ReorderPrior)
	return min(delivered, theta*m.packets)
}
