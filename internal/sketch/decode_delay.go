package sketch

import "math"

// Delay (docs/decode.md, "Delay"): the prior (μ, τ², σ̄²), the noise
// model of every equation and the two delay solves. The solver itself,
// pcg, is in decode_cg.go.

// noiseFloor keeps every equation's variance positive: a cell whose
// packets are exactly those of its flows (k = 1, no sampling) has none.
// Relative to one packet's delay variance.
const noiseFloor = 1.0

// stepTolFraction: a delay solve has converged when no flow's mean moves
// by more than this fraction of τ (the spread of flow means) in three
// iterations running. That is far below any error the estimates have;
// ill-conditioned systems (weighted flows, elephants at the paper's load)
// need hundreds of iterations to reach it, well-conditioned ones (sampled
// rows, k > 1) tens. A step test, not a relative residual: with weights
// the heavy flows dominate the residual, which then stops the solve early.
// A smaller fraction only costs iterations (the paper-shaped trace and
// TestDecodeSimulated come out the same); a larger one starts to move the
// simulation's errors (docs/decode.md, "Delay").
const stepTolFraction = 3e-4

// delayPreIter bounds the first delay solve: it only has to centre the
// sign sums and give τ² its spread (the final solve continues from it).
// varIter bounds the variance solve, whose own noise (a χ²₁ per cell)
// swamps anything finer. More iterations of either buy no accuracy on the
// paper-shaped trace or in TestDecodeSimulated; fewer variance iterations
// start to cost some (docs/decode.md, "Delay").
const (
	delayPreIter = 10
	varIter      = 10
)

// prior sets μ (the interval's mean delay over the usable cells), a first
// τ² (the spread of flow means: robustly from the warm start's
// better-sampled flows; respread refines it) and σ̄² (a typical packet
// delay variance).
func (d *lsDecoder) prior(warm []FlowEstimate) {
	var sy, sn float64
	for c := range d.cY {
		if !math.IsNaN(d.cMiss[c]) {
			sy += d.cY[c]
			sn += d.cN[c]
		}
	}
	d.mu = 0
	if sn > 0 {
		d.mu = sy / sn
	}
	// The warm means and variances of the flows with enough samples, read
	// on every worker; each worker's run is appended in order, so the
	// lists are those of one loop.
	means, vars := d.buf[:0], make([]float64, 0, len(warm))
	nw := max(1, min(d.workers, len(warm)/d.grain))
	wm, wv := make([][]float64, nw), make([][]float64, nw)
	for _, minS := range []float64{20, 1} {
		parallelChunks(nw, len(warm), d.grain, func(w, lo, hi int) {
			m, v := wm[w][:0], wv[w][:0]
			for _, e := range warm[lo:hi] {
				if e.Samples >= minS && !math.IsNaN(e.Delay) {
					m = append(m, e.Delay)
					if !math.IsNaN(e.Stddev) {
						v = append(v, e.Stddev*e.Stddev)
					}
				}
			}
			wm[w], wv[w] = m, v
		})
		means, vars = means[:0], vars[:0]
		for w := range nw {
			means = append(means, wm[w]...)
			vars = append(vars, wv[w]...)
		}
		if len(means) >= 10 {
			break
		}
	}
	// The first pass only needs a prior that is not too strong: never
	// below (μ/2)², since colliding flows can make the warm start's means
	// look alike. respread refines it from the decoded means.
	d.tau2 = max(d.tauFloor(), d.mu*d.mu/4)
	if len(means) > 1 {
		d.tau2 = max(d.tau2, madVar(means))
	}
	d.sig2 = d.tau2
	if len(vars) > 0 {
		d.sig2 = max(1, medianInPlace(vars))
	}
	for i := range d.varF {
		d.varF[i] = d.sig2
	}
	d.setPrior()
}

// setPrior sets each flow's prior precision. The unknown is the mean of the
// flow's received packets, so its spread around μ is that of the flows'
// true means (τ²) plus the sampling noise of a mean of N_f packets.
func (d *lsDecoder) setPrior() {
	parallelChunks(d.workers, len(d.lam), d.grain, func(_, lo, hi int) {
		for f := lo; f < hi; f++ {
			d.lam[f] = d.opt.PriorWeight / d.priorVar(f)
		}
	})
}

func (d *lsDecoder) priorVar(f int) float64 {
	return d.tau2 + d.varF[f]/max(1, d.recv[f])
}

// respread re-estimates τ² from the decoded means of the flows the sketch
// pins down best (the warm start's are blurred by collisions, and a
// handful of colliding flows can even look identical). The prior is
// Gaussian, so its spread is the means' variance, not a robust scale:
// flow means are often multimodal (flows on different paths, the LDS
// paper's Fig. 8), and there the MAD measures one mode's width (55 µs
// against a spread of 314 µs on the paper-shaped trace, which made the
// prior far too strong; docs/decode.md, "Delay"). A variance also counts
// each decoded mean's own error, hence the best-sampled flows: at 100
// samples a mean's sampling error is a tenth of a packet's spread.
func (d *lsDecoder) respread() {
	means := d.buf[:0]
	for _, minS := range []float64{spreadSamples, 20, 2} {
		means = means[:0]
		for f, x := range d.x[:d.nA] {
			if d.smp[f] >= minS {
				means = append(means, x)
			}
		}
		if len(means) >= 10 {
			break
		}
	}
	if len(means) >= 2 {
		d.tau2 = max(d.tauFloor(), variance(means))
	}
	d.setPrior()
}

// spreadSamples: the flows whose decoded means measure τ² (respread), when
// at least ten have that many samples.
const spreadSamples = 100

func (d *lsDecoder) tauFloor() float64 { return max(1, 1e-6*d.mu*d.mu) }

// noise sets the variance of every delay equation from the flows' delay
// variances (σ_f², floored so that a low estimate cannot make a noisy
// cell look exact) and the mass of unknown flows.
func (d *lsDecoder) noise(perFlow bool) {
	// Cell by cell over cE (a cell's entries in flow-major order: the
	// same sums as a scatter over the entries), split over the workers.
	parallelChunks(d.workers, len(d.cV), d.grain, func(_, lo, hi int) {
		for c := lo; c < hi; c++ {
			m := d.cMiss[c]
			if math.IsNaN(m) {
				d.cV[c] = math.Inf(1)
				continue
			}
			v := noiseFloor*d.sig2 + m*m*d.tau2 + m*d.sig2
			for _, ce := range d.cE[d.cStart[c]:d.cStart[c+1]] {
				s := d.sig2
				if perFlow {
					s = max(d.varF[ce.f], 0.1*d.sig2)
				}
				v += ce.v * s
			}
			d.cV[c] = v
		}
	})
}

// solveDelay computes the posterior mean of the flows' delays.
func (d *lsDecoder) solveDelay(warm []FlowEstimate, perFlow bool) {
	d.prepDelay(warm, perFlow)
	d.runDelay(perFlow)
}

// prepDelay sets the noise model, the right-hand side and (first solve)
// the start of a delay solve.
func (d *lsDecoder) prepDelay(warm []FlowEstimate, perFlow bool) {
	d.noise(perFlow)
	y, wgt := d.y, d.wgt
	parallelChunks(d.workers, len(y), d.grain, func(_, lo, hi int) {
		for c := lo; c < hi; c++ {
			y[c] = d.cY[c] - d.mu*d.cN[c] // unknown flows' mass is centred at μ too
			wgt[c] = 1 / d.cV[c]
		}
	})
	if !perFlow {
		// In the caller's order, each flow writing at its internal index:
		// the solver's order would read the warm start at random.
		// A wild warm start (a crowded cell) is clamped so that it does
		// not slow the solve: the prior says flows sit within a few τ.
		s := 5 * math.Sqrt(d.tau2)
		parallelChunks(d.workers, len(warm), d.grain, func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				f := int(d.inv[i])
				if f >= d.nA {
					continue
				}
				d.x[f] = 0
				if v := warm[i].Delay; !math.IsNaN(v) {
					d.x[f] = max(-s, min(s, v-d.mu))
				}
			}
		})
	}
}

// runDelay runs the delay solve prepDelay set up.
func (d *lsDecoder) runDelay(perFlow bool) {
	y, wgt := d.y, d.wgt
	it := d.opt.MaxIter
	if !perFlow {
		it = min(it, delayPreIter) // a start for the variances; refined below
	}
	n := d.pcg(d.eA, wgt, y, d.lam[:d.nA], d.x[:d.nA], it, stepTolFraction*math.Sqrt(d.tau2))
	if perFlow {
		d.iters[2] = n
	} else {
		d.iters[0] = n
	}
}
