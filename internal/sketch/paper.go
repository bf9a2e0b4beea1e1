package sketch

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// The LDS paper's estimator (Fig. 6; docs/sketch.md, "Estimator
// "paper""): each flow from its least crowded usable cells. Decode runs it
// as its warm start.

// EstimateOptions tune EstimatePaper.
type EstimateOptions struct {
	// Alpha: keep cells whose rescaled count is within (1+Alpha) of the
	// smallest (paper Fig. 6). 0 means the default 0.1; must not be
	// negative.
	Alpha float64
	// Weight returns the weight w the flow's packets were recorded with
	// (paper section 4.1). nil means 1 for every flow. The mean delay does
	// not need it; the variance, the sample size and the packet and loss
	// counts are divided by it.
	Weight func(flow uint64) float64
	// SamplingSlack (multi-bank only; 0 = the paper exactly) widens the
	// selection by that many standard deviations of the sampling noise of
	// the smallest cell: with N raw packets at rate p the rescaled count
	// N/p has standard deviation sqrt(N(1-p))/p, so a lightly sampled row
	// whose count came out low by chance no longer shuts out every
	// unsampled cell. Rows with p = 1 have no such noise, so without
	// sampling this changes nothing.
	SamplingSlack float64
}

// DefaultAlpha is the paper's empirically chosen alpha.
const DefaultAlpha = 0.1

func (o EstimateOptions) alpha() (float64, error) {
	switch {
	case math.IsNaN(o.Alpha) || o.Alpha < 0 || math.IsInf(o.Alpha, 0):
		return 0, fmt.Errorf("sketch.alpha = %v: must be a finite number >= 0", o.Alpha)
	case o.Alpha == 0:
		return DefaultAlpha, nil
	}
	return o.Alpha, nil
}

// candidate is one usable, non-empty cell of a flow.
type candidate struct {
	cell   int32 // index into the cell records; -1 once not selected
	row    int32
	scaled float64 // Σ w with the row's sampling undone
}

// cellPair is one cell as the per-flow estimate reads it from both ends:
// one 40-byte record instead of two (the estimate is bound by these reads:
// 150k flows at k = 5 touch 20 cells each, mostly out of cache).
type cellPair struct {
	dS, dSPM int64 // receiver minus sender sums
	sn, n    int64 // the sender's signed weight and weight
	rn       int64 // the receiver's weight
}

// estimator holds per-call scratch space so that the per-flow loop does not
// allocate.
type estimator struct {
	snd, rcv *LDS
	alpha    float64
	slack    float64
	weight   func(uint64) float64
	exact    []int     // rows used for counts: those with p = 1, else all
	rate     []float64 // effective sampling rate per row
	cand     []candidate
	rowN     []int64
	rowS     []int64
	// pairs and ok (usable and non-empty) per cell, made by pairCells:
	// read-only, shared by clones.
	pairs []cellPair
	ok    []bool
}

// pairCells fills e.pairs and e.ok from both sketches, over the given
// number of goroutines; flowWeighted reads them.
func (e *estimator) pairCells(workers int) {
	n := e.snd.Len()
	e.pairs = make([]cellPair, n)
	e.ok = make([]bool, n)
	parallelChunks(workers, n, 1<<14, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			s, v := e.snd.cells[i], e.rcv.cells[i]
			e.pairs[i] = cellPair{dS: v.S - s.S, dSPM: v.SPM - s.SPM, sn: s.SN, n: s.N, rn: v.N}
			e.ok[i] = s.N > 0 && usable(s, v)
		}
	})
}

func newEstimator(snd, rcv *LDS, opt EstimateOptions) (*estimator, error) {
	if snd == nil || rcv == nil {
		return nil, errors.New("estimate: both the sender's and the receiver's sketch are needed")
	}
	if !snd.p.Equal(rcv.p) {
		return nil, fmt.Errorf("estimate: sender and receiver sketches differ (%s); both ends must run the same sketch configuration", snd.p.diff(rcv.p))
	}
	a, err := opt.alpha()
	if err != nil {
		return nil, fmt.Errorf("estimate: %w", err)
	}
	if math.IsNaN(opt.SamplingSlack) || opt.SamplingSlack < 0 || math.IsInf(opt.SamplingSlack, 0) {
		return nil, fmt.Errorf("estimate: sampling slack %v: must be a finite number >= 0", opt.SamplingSlack)
	}
	e := &estimator{
		snd: snd, rcv: rcv, alpha: a, weight: opt.Weight, slack: opt.SamplingSlack,
		rate: make([]float64, snd.rows),
		cand: make([]candidate, 0, snd.rows*int(snd.k)),
		rowN: make([]int64, snd.rows),
		rowS: make([]int64, snd.rows),
	}
	for r := range e.rate {
		e.rate[r] = snd.SamplingRate(r)
		if snd.thr[r] == 1<<32 {
			e.exact = append(e.exact, r)
		}
	}
	if len(e.exact) == 0 {
		for r := range e.rate {
			e.exact = append(e.exact, r)
		}
	}
	return e, nil
}

// EstimatePaper runs the LDS paper's Fig. 6 estimator for each flow, with
// the multi-bank rescaling of section 4.2 and the mining of section 4.3
// (variance, count-min packets and bytes, loss). snd and rcv are the two
// ends' sketches of the same interval.
func EstimatePaper(snd, rcv *LDS, flows []uint64, opt EstimateOptions) ([]FlowEstimate, error) {
	e, err := newEstimator(snd, rcv, opt)
	if err != nil {
		return nil, err
	}
	e.pairCells(1)
	out := make([]FlowEstimate, len(flows))
	for i, f := range flows {
		out[i] = e.flow(f)
	}
	return out, nil
}

func (e *estimator) flow(f uint64) FlowEstimate {
	w := 1.0
	if e.weight != nil {
		w = e.weight(f)
	}
	return e.flowWeighted(f, w)
}

// clone is an estimator for another goroutine: the same sketches and
// settings, its own scratch.
func (e *estimator) clone() *estimator {
	c := *e
	c.cand = make([]candidate, 0, cap(e.cand))
	c.rowN = make([]int64, len(e.rowN))
	c.rowS = make([]int64, len(e.rowS))
	return &c
}

// flowWeighted estimates flow f recorded with weight w (a weight that is
// not a positive finite number counts as 1).
func (e *estimator) flowWeighted(f uint64, w float64) FlowEstimate {
	snd := e.snd
	pairs, ok := e.pairs, e.ok
	C := snd.cols
	k := int(snd.k)
	if !(w > 0) || math.IsInf(w, 0) {
		w = 1
	}
	est := FlowEstimate{Flow: f, Delay: nan, Stddev: nan, CI95: nan, Bytes: nan}

	// Pass 1: usable non-empty cells, their rescaled counts (section 4.2:
	// "packet counts need to be inverted before deciding which cell will be
	// selected") and the smallest of those.
	e.cand = e.cand[:0]
	nmin, nminRaw, nminRate := math.Inf(1), int64(0), 1.0
	h1, h2 := snd.flowCols(f)
	col := h1
	for r := 0; r < snd.rows; r++ {
		base := uint64(r) * C
		c := col
		for j := 0; j < k; j++ {
			if ok[base+c] {
				n := pairs[base+c].n
				sc := float64(n)
				if rate := e.rate[r]; rate != 1 {
					sc /= rate // x/1 is x: the division only where it does something
				}
				e.cand = append(e.cand, candidate{cell: int32(base + c), row: int32(r), scaled: sc})
				if sc < nmin {
					nmin, nminRaw, nminRate = sc, n, e.rate[r]
				}
			}
			if c++; c == C {
				c = 0
			}
		}
		if col += h2; col >= C {
			col -= C
		}
	}
	est.Usable = len(e.cand)

	// Counts (section 4.3): count-min over rows of the sender's vLDA sums,
	// sampling undone; loss likewise from the count differences. Rows with
	// p = 1 give upper bounds (collisions only add), so they alone are used
	// when there are any; otherwise every row, rescaled.
	pk, loss, by := math.Inf(1), math.Inf(1), math.Inf(1)
	for _, r := range e.exact {
		var ns, nr int64
		var b uint64
		c := fastMod(h1+uint64(r)*h2, snd.cmod, C)
		base := uint64(r) * C
		for j := 0; j < k; j++ {
			ns += pairs[base+c].n
			nr += pairs[base+c].rn
			if snd.bytes != nil {
				b += snd.bytes[base+c]
			}
			if c++; c == C {
				c = 0
			}
		}
		pk = min(pk, float64(ns)/e.rate[r])
		loss = min(loss, float64(ns-nr)/e.rate[r])
		by = min(by, float64(b)/e.rate[r])
	}
	est.Packets = pk / w
	est.Loss = max(0, loss/w)
	est.LossBound = est.Loss
	if snd.bytes != nil {
		est.Bytes = by
	}
	if len(e.cand) == 0 {
		return est
	}

	// Pass 2: keep cells within (1+alpha) of the smallest and pool them.
	// (Fig. 6 writes "<"; "<=" keeps the minimum itself when alpha = 0.)
	ref := nmin
	if e.slack > 0 && nminRate < 1 {
		ref += e.slack * math.Sqrt(float64(nminRaw)*(1-nminRate)) / nminRate
	}
	limit := ref * (1 + e.alpha) * (1 + 1e-12)
	var sumS, sumN int64
	clear(e.rowN)
	clear(e.rowS)
	for i := range e.cand {
		c := &e.cand[i]
		if c.scaled > limit {
			c.cell = -1 // not selected
			continue
		}
		p := &pairs[c.cell]
		sumS += p.dS
		sumN += p.n
		e.rowS[c.row] += p.dS
		e.rowN[c.row] += p.n
	}
	mean := float64(sumS) / float64(sumN)
	est.Delay = mean
	est.Identified = true

	// Effective sample size: rows hold the same packets again, so take the
	// best row rather than the sum, and never more than were received.
	var best int64
	for _, n := range e.rowN {
		best = max(best, n)
	}
	samples := float64(best) / w
	if recv := est.Packets - est.Loss; recv >= 0 && samples > recv {
		samples = recv
	}
	est.Samples = samples

	// Variance (LDA paper eq. 4-5, centred): in a cell, Σσ·w·(d-μ) =
	// ΔSPM - μ·SN has expectation zero and E[(Σσ·w·(d-μ))²] = Σ w²(d-μ)²
	// over the cell's packets (cross terms vanish because the σ are
	// independent). Pooling the selected cells as eq. 5 does:
	// var ≈ Σ_cells (ΔSPM - μ·SN)² / (w · Σ_cells N).
	if samples >= 2 {
		var num float64
		for _, c := range e.cand {
			if c.cell < 0 {
				continue
			}
			p := &pairs[c.cell]
			x := float64(p.dSPM) - mean*float64(p.sn)
			num += x * x
		}
		v := max(0, num/(w*float64(sumN)))
		est.Stddev = math.Sqrt(v)

		// CI95: sampling error of the mean over the effective sample,
		// combined with half the spread between rows' pooled means, which
		// is where differing collisions show (zero when rows agree).
		se := z95 * math.Sqrt(v/samples)
		lo, hi := math.Inf(1), math.Inf(-1)
		for r, n := range e.rowN {
			if n == 0 {
				continue
			}
			m := float64(e.rowS[r]) / float64(n)
			lo, hi = min(lo, m), max(hi, m)
		}
		spread := (hi - lo) / 2
		est.CI95 = math.Sqrt(se*se + spread*spread)
	}
	return est
}

// HeavyHitters returns up to n of flows, largest count-min packet estimate
// first (ties by flow hash), without duplicates.
func HeavyHitters(l *LDS, flows []uint64, n int) []uint64 {
	if l == nil || n <= 0 || len(flows) == 0 {
		return nil
	}
	type fc struct {
		f uint64
		c float64
	}
	e, err := newEstimator(l, l, EstimateOptions{})
	if err != nil {
		return nil
	}
	all := make([]fc, len(flows))
	for i, f := range flows {
		all[i] = fc{f, e.packets(f)}
	}
	slices.SortFunc(all, func(a, b fc) int {
		switch {
		case a.c > b.c:
			return -1
		case a.c < b.c:
			return 1
		case a.f < b.f:
			return -1
		case a.f > b.f:
			return 1
		}
		return 0
	})
	out := make([]uint64, 0, min(n, len(all)))
	for i, x := range all {
		if i > 0 && x.f == all[i-1].f {
			continue
		}
		if len(out) == n {
			break
		}
		out = append(out, x.f)
	}
	return out
}

// packets is the count-min estimate of the flow's packets in snd.
func (e *estimator) packets(f uint64) float64 {
	l := e.snd
	C := l.cols
	h1, h2 := l.flowCols(f)
	pk := math.Inf(1)
	for _, r := range e.exact {
		c := fastMod(h1+uint64(r)*h2, l.cmod, C)
		base := uint64(r) * C
		var ns int64
		for j := 0; j < int(l.k); j++ {
			ns += l.cells[base+c].N
			if c++; c == C {
				c = 0
			}
		}
		pk = min(pk, float64(ns)/e.rate[r])
	}
	return pk
}
