package sketch

import "math"

// varPriorWeight is the (weak) prior precision of a flow's delay variance
// toward the interval's typical variance σ̄², in units of 1/σ̄⁴: one cell
// of a flow alone brings 1/(2σ⁴), so the prior counts as 2 % of one cell.
const varPriorWeight = 0.01

// solveVariance decodes every flow's delay variance from the signed sums
// (docs/decode.md, "Stddev"). In a usable cell, x_c = ΔSPM_c − m_c·SN_c =
// Σ_p σ_p·w_p·(d_p − m_c) for any constant m_c, and over the signs
// E[x_c²] = Σ_f w_f²·n_fc·(σ_f² + (δ_f − m_c)²). With δ_f decoded, the
// second part is known, leaving one linear equation in the σ_f² per cell,
// with noise variance about 2·E[x_c²]² (a χ²₁ per cell).
func (d *lsDecoder) solveVariance(warm []FlowEstimate) {
	nC := len(d.cY)
	y := make([]float64, nC)
	wgt := make([]float64, nC)
	s2 := d.sig2
	for c := 0; c < nC; c++ {
		miss := d.cMiss[c]
		if math.IsNaN(miss) || d.cN[c] <= 0 {
			continue
		}
		m := d.cY[c] / d.cN[c]
		x := d.cSPM[c] - m*d.cSN[c]
		dm := d.mu - m
		known := miss * (s2 + d.tau2 + dm*dm)
		expect := known
		for j := d.cStart[c]; j < d.cStart[c+1]; j++ {
			e := d.cEnt[j]
			f := d.eFlow[e]
			dd := d.mu + d.x[f] - m
			b := d.eB[e]
			known += b * (dd*dd + s2) // s2: the unknowns are centred on σ̄²
			v := s2
			if sd := warm[f].Stddev; !math.IsNaN(sd) {
				v = sd * sd
			}
			expect += b * (dd*dd + v)
		}
		y[c] = x*x - known
		wgt[c] = 1 / (2*expect*expect + noiseFloor*s2*s2)
	}
	xs := make([]float64, len(d.x))
	for f := range xs {
		if sd := warm[f].Stddev; !math.IsNaN(sd) {
			xs[f] = max(-s2, min(10*s2, sd*sd-s2))
		}
	}
	lam := make([]float64, len(xs))
	for f := range lam {
		lam[f] = d.opt.PriorWeight * varPriorWeight / (s2 * s2)
	}
	d.iters[1] = d.pcg(d.eB, wgt, y, lam, xs, min(d.opt.MaxIter, preIter))
	var typical []float64
	for f := range xs {
		d.varF[f] = max(0, s2+xs[f])
		if d.smp[f] >= 20 {
			typical = append(typical, d.varF[f])
		}
	}
	// The typical packet variance, now from decoded flows rather than the
	// collision-blurred warm start: it sets the noise floors.
	if len(typical) >= 5 {
		d.sig2 = max(1, median(typical))
	}
	d.setPrior()
}

// identify computes each flow's posterior variance of δ_f by marginalizing
// the other flows of its cells locally (docs/decode.md, "Identification"):
// for flow f with usable cells U, the other flows g in U are integrated out
// with the variance they keep from their cells outside U (those cells'
// other flows taken at the prior), so that
//
//	Var(δ_f) ≈ 1 / (λ + a_fᵀ (V + Σ_g s_g·a_g·a_gᵀ)⁻¹ a_f)
//
// over U. Flows that share all their cells in the same proportions (no
// separating cell) keep about the prior variance and are not identified.
func (d *lsDecoder) identify() {
	nF, nC := len(d.x), len(d.cY)
	lam := d.lam
	// Level-1 information each entry brings to its flow: the cell's other
	// flows at their prior variance.
	q := make([]float64, nC)
	copy(q, d.cV)
	for e, c := range d.eCell {
		q[c] += d.eA[e] * d.eA[e] / lam[d.eFlow[e]]
	}
	pe := make([]float64, len(d.eCell))
	P := make([]float64, nF)
	for f := 0; f < nF; f++ {
		P[f] = lam[f]
		for e := d.fStart[f]; e < d.fStart[f+1]; e++ {
			c := d.eCell[e]
			if math.IsInf(d.cV[c], 1) {
				continue
			}
			a := d.eA[e]
			den := max(d.cV[c], q[c]-a*a/lam[f])
			pe[e] = a * a / den
			P[f] += pe[e]
		}
	}

	// T_c = Σ_g a_gc²·s_g over the cell, s_g the variance g keeps without
	// cell c: a flow with a single usable cell needs nothing else (no loop
	// can pass through one cell), which spares most small flows the scan.
	T := make([]float64, nC)
	for e, c := range d.eCell {
		if !math.IsInf(d.cV[c], 1) {
			g := d.eFlow[e]
			T[c] += d.eA[e] * d.eA[e] / max(P[g]-pe[e], lam[g])
		}
	}
	type rec struct {
		g, li, prev int32
		a           float64
	}
	var recs []rec
	stamp := make([]int32, nF)
	excl := make([]float64, nF)
	head := make([]int32, nF)
	maxL := d.rows * d.k
	S := make([]float64, maxL*maxL)
	af := make([]float64, maxL)
	cells := make([]int32, maxL)
	for f := 0; f < nF; f++ {
		L := 0
		for e := d.fStart[f]; e < d.fStart[f+1]; e++ {
			if c := d.eCell[e]; !math.IsInf(d.cV[c], 1) {
				af[L] = d.eA[e]
				cells[L] = c
				L++
			}
		}
		if L == 0 {
			d.post[f] = 1 / lam[f]
			continue
		}
		if L == 1 {
			e := d.fStart[f]
			for math.IsInf(d.cV[d.eCell[e]], 1) {
				e++
			}
			c := d.eCell[e]
			other := max(0, T[c]-af[0]*af[0]/max(P[f]-pe[e], lam[f]))
			d.post[f] = 1 / (lam[f] + af[0]*af[0]/(d.cV[c]+other))
			continue
		}
		S := S[:L*L]
		clear(S)
		recs = recs[:0]
		for li := 0; li < L; li++ {
			c := cells[li]
			S[li*L+li] = d.cV[c]
			for j := d.cStart[c]; j < d.cStart[c+1]; j++ {
				e2 := d.cEnt[j]
				g := d.eFlow[e2]
				if int(g) == f {
					continue
				}
				if stamp[g] != int32(f+1) {
					stamp[g], excl[g], head[g] = int32(f+1), 0, -1
				}
				excl[g] += pe[e2]
				recs = append(recs, rec{g: g, li: int32(li), prev: head[g], a: d.eA[e2]})
				head[g] = int32(len(recs) - 1)
			}
		}
		for _, rc := range recs {
			s := 1 / max(P[rc.g]-excl[rc.g], lam[rc.g])
			i := int(rc.li)
			S[i*L+i] += rc.a * rc.a * s
			for j := rc.prev; j >= 0; j = recs[j].prev {
				o := int(recs[j].li)
				v := rc.a * recs[j].a * s
				S[i*L+o] += v
				S[o*L+i] += v
			}
		}
		d.post[f] = 1 / (lam[f] + quadInv(S, af[:L], L))
	}
}

// quadInv returns aᵀ S⁻¹ a for a symmetric positive (semi)definite L×L
// matrix S (overwritten by its Cholesky factor). Pivots that round to zero
// or below are raised to a tiny fraction of the diagonal, which only ever
// lowers the information (never invents it).
func quadInv(S, a []float64, L int) float64 {
	for j := 0; j < L; j++ {
		s := S[j*L+j]
		orig := s
		for m := 0; m < j; m++ {
			s -= S[j*L+m] * S[j*L+m]
		}
		if s <= 1e-13*orig || s <= 0 {
			s = max(1e-13*orig, math.SmallestNonzeroFloat64)
		}
		s = math.Sqrt(s)
		S[j*L+j] = s
		for i := j + 1; i < L; i++ {
			v := S[i*L+j]
			for m := 0; m < j; m++ {
				v -= S[i*L+m] * S[j*L+m]
			}
			S[i*L+j] = v / s
		}
	}
	var info float64
	y := a // forward substitution in place of a copy: a is scratch
	for i := 0; i < L; i++ {
		v := y[i]
		for m := 0; m < i; m++ {
			v -= S[i*L+m] * y[m]
		}
		y[i] = v / S[i*L+i]
		info += y[i] * y[i]
	}
	return info
}

// solveLoss shares each cell's count deficit (sender minus receiver) among
// the flows in it, consistently across rows (docs/decode.md, "Loss"). With
// independent loss, the packets a flow lost in a cell are about θ_f times
// those it delivered there (θ_f = the flow's loss odds), whatever the row's
// sampling or vLDA offset, so deficits are Poisson with mean
// Σ_f w_f·n_fc·θ_f. The maximum-likelihood θ is found by EM (share each
// deficit in proportion to w_f·n_fc·θ_f, then θ_f = shares / delivered);
// θ_f never exceeds the paper's count-min bound. Flows the receiver never
// saw are in the same system with coefficient w_f·p_r/k and ℓ_f itself as
// the unknown. Only flows whose count-min bound is positive take part, and
// only the rows with p = 1 when there are any.
// lossPriorPackets is the weight of the loss prior, in delivered packets.
const lossPriorPackets = 50

// scaleOdds converts between odds and packets for the start value: a seen
// flow's unknown is its odds (1 per packet delivered), an unseen flow's is
// its lost packets.
func scaleOdds(seen bool, recv float64) float64 {
	if seen {
		return 1 / recv
	}
	return 1
}

func (d *lsDecoder) solveLoss(flows []FlowComposition, warm []FlowEstimate) []float64 {
	k, C := d.k, d.cols
	out := make([]float64, len(flows))
	// A flow's lost packets are a realized count: a p = 1 row holds all of
	// them, a sampled row only a binomial share. Use the exact rows alone
	// when there are any.
	rows := d.exact
	if len(rows) == 0 {
		rows = make([]int, d.rows)
		for r := range rows {
			rows[r] = r
		}
	}
	var cand []int32
	for i := range flows {
		if warm[i].Loss > 0 {
			cand = append(cand, int32(i))
		}
	}
	if len(cand) == 0 {
		return out
	}
	// The interval's loss odds, from the whole first used row.
	var sn, rn float64
	for c := 0; c < int(C); c++ {
		gi := rows[0]*int(C) + c
		sn += float64(d.snd.cells[gi].N)
		rn += float64(d.rcv.cells[gi].N)
	}
	rho := max(0, sn-rn) / max(1, rn)
	per := len(rows) * k
	cmap := make(map[uint64]int32, len(cand)*per)
	var cDef []float64
	ec := make([]int32, 0, len(cand)*per)
	ea := make([]float64, 0, len(cand)*per)
	th := make([]float64, len(cand))
	ub := make([]float64, len(cand))
	for j, i := range cand {
		f := flows[i].Flow
		h1 := (f & 0xffffffff) % C
		h2 := ((f >> 32) | 1) % C
		seen := d.recv[i] > 0
		for _, r := range rows {
			col := (h1 + uint64(r)*h2) % C
			for o := 0; o < k; o++ {
				c := col + uint64(o)
				if c >= C {
					c -= C
				}
				gi := uint64(r)*C + c
				id, ok := cmap[gi]
				if !ok {
					id = int32(len(cDef))
					cmap[gi] = id
					cDef = append(cDef, max(0, float64(d.snd.cells[gi].N-d.rcv.cells[gi].N)))
				}
				a := d.w[i] * d.rate[r] / float64(k)
				if seen {
					a = d.w[i] * float64(flows[i].Cells[r*k+o])
				}
				ec = append(ec, id)
				ea = append(ea, a)
			}
		}
		// Unknown: odds θ (seen) or lost packets ℓ (never seen).
		scale := 1.0
		if seen {
			scale = 1 / d.recv[i]
		}
		ub[j] = math.Inf(1)
		if len(d.exact) > 0 {
			ub[j] = warm[i].Loss * scale
		}
		th[j] = min(ub[j], rho*scale/max(1e-300, scaleOdds(seen, d.recv[i])))
	}
	// MAP rather than ML: a Gamma prior on θ_f at the interval's loss odds,
	// worth lossPriorPackets delivered packets. Without it a small flow
	// that happens to share a cell with a big flow's lost packets can
	// claim them (its odds are free to be huge).
	pa, pb := rho*lossPriorPackets, float64(lossPriorPackets)
	mean := make([]float64, len(cDef))
	iters := max(1, min(d.opt.MaxIter, 100))
	for it := 0; it < iters; it++ {
		clear(mean)
		for j := range cand {
			for e := j * per; e < (j+1)*per; e++ {
				mean[ec[e]] += ea[e] * th[j]
			}
		}
		var moved float64
		for j := range cand {
			var num, den float64
			for e := j * per; e < (j+1)*per; e++ {
				a := ea[e]
				den += a
				if m := mean[ec[e]]; m > 0 {
					num += a * cDef[ec[e]] / m
				}
			}
			var nt float64
			if d.recv[cand[j]] > 0 {
				nt = (th[j]*num + pa) / (den + pb)
			} else if den > 0 {
				nt = th[j] * num / den
			}
			nt = min(ub[j], nt)
			moved += math.Abs(nt - th[j])
			th[j] = nt
		}
		if moved < 1e-9 {
			break
		}
	}
	for j, i := range cand {
		if d.recv[i] > 0 {
			out[i] = th[j] * d.recv[i]
		} else {
			out[i] = th[j]
		}
	}
	return out
}
