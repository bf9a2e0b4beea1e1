package sketch

import "math"

// Variance (docs/decode.md, "Stddev"): every flow's delay variance,
// decoded from the signed sums. It feeds the noise model of the final
// delay solve; the published stddev stays the paper's (results).

// sigCollapse: decoded variances whose median is below this fraction of
// the warm start's have collapsed (σ below a tenth), and the warm start's
// typical variance is kept.
const sigCollapse = 0.01

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
	y, wgt := d.y, d.wgt
	s2 := d.sig2
	// The warm start's variances in solver order (pcg's q as scratch: it
	// is only used once pcg runs): 8 bytes per flow instead of a
	// FlowEstimate per look-up in the loop over entries. Filled in the
	// caller's order, each flow writing at its internal index, so that the
	// warm start is read in order.
	wv := d.q[:d.nA]
	nA := d.nA
	xs := make([]float64, nA) // the unknowns σ_f² − σ̄², from the warm start
	parallelChunks(d.workers, len(warm), d.grain, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			f := int(d.inv[i])
			if f >= nA {
				continue
			}
			wv[f] = s2
			if sd := warm[i].Stddev; !math.IsNaN(sd) {
				wv[f] = sd * sd
				xs[f] = max(-s2, min(10*s2, sd*sd-s2))
			}
		}
	})
	parallelChunks(d.workers, nC, d.grain, func(_, lo, hi int) {
		for c := lo; c < hi; c++ {
			miss := d.cMiss[c]
			if math.IsNaN(miss) || d.cN[c] <= 0 {
				y[c], wgt[c] = 0, 0
				continue
			}
			m := d.cY[c] / d.cN[c]
			x := d.cSPM[c] - m*d.cSN[c]
			dm := d.mu - m
			known := miss * (s2 + d.tau2 + dm*dm)
			expect := known
			for j := d.cStart[c]; j < d.cStart[c+1]; j++ {
				ce := &d.cE[j]
				f := ce.f
				dd := d.mu + d.x[f] - m
				b := ce.b
				known += b * (dd*dd + s2) // s2: the unknowns are centred on σ̄²
				expect += b * (dd*dd + wv[f])
			}
			y[c] = x*x - known
			wgt[c] = 1 / (2*expect*expect + noiseFloor*s2*s2)
		}
	})
	// Only the nA flows with an equation are solved for; the others keep
	// σ̄² (their prior variance is all they get).
	lam := make([]float64, nA)
	l0 := d.opt.PriorWeight * varPriorWeight / (s2 * s2)
	for f := range lam {
		lam[f] = l0
	}
	d.iters[1] = d.pcg(d.eB, wgt, y, lam, xs, min(d.opt.MaxIter, varIter), 0)
	typical := d.buf[:0]
	for f := range d.varF {
		v := s2
		if f < nA {
			v = max(0, s2+xs[f])
		}
		d.varF[f] = v
		if d.smp[f] >= 20 {
			typical = append(typical, v)
		}
	}
	// The typical packet variance σ̄² (the noise floors): the decoded one
	// where it holds, the warm start's (the paper's per-cell sign-hash
	// estimates, inflated by collisions) where the decoded variances have
	// collapsed. At the paper's load without sampling most decoded
	// variances fall to 0 (a few sign sums per flow): taking their median
	// would put σ̄ at its 1 ns floor, the delay equations would look exact
	// where they are not, and flows of 1000+ packets would lose a factor
	// of ten in accuracy. With sampled rows under loss the decoded σ̄ is the
	// better one (docs/decode.md, "Delay").
	if len(typical) >= 5 {
		if dm := medianInPlace(typical); dm >= sigCollapse*d.sig2 {
			d.sig2 = max(1, dm)
		}
	}
	d.setPrior()
}
