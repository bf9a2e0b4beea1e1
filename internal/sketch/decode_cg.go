package sketch

import (
	"math"
	"sort"
)

// The conjugate-gradient solver of decode's delay and variance systems
// (docs/decode.md, "How it is made fast"): pcg sets a solve up and runs
// it on the two halves below.

// pcg solves (Aᵀ W A + λ I) x = Aᵀ W y by conjugate gradients with a
// Jacobi preconditioner, starting from x. A is flow-major (d.fStart,
// d.eCell, coef); W = diag(wgt); x and lambda are the nA solver flows.
// It returns the iterations used.
func (d *lsDecoder) pcg(coef, wgt, y, lambda, x []float64, maxIter int, stepTol float64) int {
	nF := len(x)
	r, z, p, diag, t := d.r, d.z, d.p, d.diag, d.t
	fs, ec := d.fStart, d.eCell
	// t = W (y - A x)
	copy(t, y)
	for f := 0; f < nF; f++ {
		xf := x[f]
		for e := fs[f]; e < fs[f+1]; e++ {
			t[ec[e]] -= coef[e] * xf
		}
	}
	for c := range t {
		t[c] *= wgt[c]
	}
	// Per flow, on every worker; the two norms are summed afterwards in
	// flow order (q and p hold the terms until then), as one loop would.
	q := d.q
	d.parallelEntries(d.workers, nF, func(_, lo, hi int) {
		for f := lo; f < hi; f++ {
			var s, dg, b float64
			for e := fs[f]; e < fs[f+1]; e++ {
				a := coef[e]
				c := ec[e]
				s += a * t[c]
				dg += a * a * wgt[c]
				b += a * wgt[c] * y[c]
			}
			dg += lambda[f]
			// The inverse: the iterations multiply, as a division per flow
			// and iteration costs more than all of that flow's products.
			diag[f] = 1 / dg
			r[f] = s - lambda[f]*x[f]
			z[f] = r[f] / dg
			q[f] = r[f] * z[f]
			p[f] = b * b / dg
		}
	})
	var bnorm, rz float64
	for f := range nF {
		rz += q[f]
		bnorm += p[f]
	}
	clear(p[:nF])
	tol2 := d.opt.Tol * d.opt.Tol * bnorm
	if !(rz > tol2 && rz > 0) || maxIter <= 0 {
		return 0
	}
	cg := d.newCGParts(coef, wgt, lambda, x, fs, ec)
	pairs := d.workers >= 2 && nF >= 2*d.grain
	if d.cgJoin != nil {
		return cg.run(false, func() bool { return pairs && d.cgJoin() }, rz, tol2, maxIter, stepTol)
	}
	return cg.run(pairs, nil, rz, tol2, maxIter, stepTol)
}

// The conjugate-gradient iterations of lsDecoder.pcg, split into two fixed
// halves of the flows (by entries) so that two goroutines can share them.
// Each half scatters into a cell vector of its own and the two are added
// cell by cell; the scalar products are the two halves' partial sums
// added in a fixed order. The split is the same whatever the number of
// goroutines, so one goroutine running both halves computes bit for bit
// what two do (TestDecodeWorkersSameResult). An iteration has four
// phases, with a pairBarrier between them.

// cgParts holds one solve's operands and the halves' partial results.
type cgParts struct {
	coef, wgt, lambda   []float64
	x, r, z, p, q, diag []float64
	fs, ec              []int32
	t                   [2][]float64 // per half: A·p, then (t[0]) W·A·p
	flo, ulo, clo       [3]int       // half h: flows flo[h]..flo[h+1] (scatter, gather), ulo (update), cells clo
	pq, rz, pmax        [2]float64   // per half, written by its goroutine only
	seg                 [2][]cgSeg   // per half: its flows in runs of equal equation count
}

// cgSeg is a run of flows lo..hi with l equations each (the flows are
// numbered by equation count, so a half has at most a run per count).
type cgSeg struct{ lo, hi, l int }

func (d *lsDecoder) newCGParts(coef, wgt, lambda, x []float64, fs, ec []int32) *cgParts {
	nF, nC := len(x), len(d.t)
	cg := &cgParts{
		coef: coef, wgt: wgt, lambda: lambda[:nF],
		x: x[:nF], r: d.r[:nF], z: d.z[:nF], p: d.p[:nF], q: d.q[:nF], diag: d.diag[:nF],
		fs: fs[:nF+1], ec: ec,
		t: [2][]float64{d.t, d.t2},
	}
	// The halves must take the same time, or the first goroutine at each
	// of the four barriers waits, and past pairSpin parks (a wake-up costs
	// ~100 µs). With the short runs' own loops (scatter) the scatter and
	// the gather cost about the same per entry whatever a flow's equation
	// count, so halves of equal entries come out within 1 %; charging a
	// flow even one entry more or less unbalances them past the spin
	// (docs/decode.md, "Time").
	cost := func(f int) int { return int(fs[f]) }
	half := cost(nF) / 2
	mid := sort.Search(nF, func(f int) bool { return cost(f) >= half })
	cg.flo = [3]int{0, mid, nF}
	for h := range 2 {
		for f := cg.flo[h]; f < cg.flo[h+1]; {
			l := int(fs[f+1] - fs[f])
			g := f + 1
			for g < cg.flo[h+1] && int(fs[g+1]-fs[g]) == l {
				g++
			}
			cg.seg[h] = append(cg.seg[h], cgSeg{f, g, l})
			f = g
		}
	}
	cg.ulo = [3]int{0, nF / 2, nF}
	cg.clo = [3]int{0, nC / 2, nC}
	return cg
}

// cgState is where the iterations stand: enough to resume them, on the
// same goroutine or on a pair.
type cgState struct {
	it, calm int
	rz, beta float64
	done     bool
}

// loop runs the iterations from st (p = 0 and the residual in r, z and
// st.rz at the start) over the given halves, meeting the other goroutine
// (if any) at b. Both goroutines compute the same scalars and stop
// together. A goroutine alone may be handed join: it is asked before each
// iteration, and when it says yes loop returns the state unfinished, for a
// pair to resume it.
func (cg *cgParts) loop(halves []int, b *pairBarrier, st cgState, tol2 float64, maxIter int, stepTol float64, join func() bool) cgState {
	rz, beta, it, calm := st.rz, st.beta, st.it, st.calm
	for ; it < maxIter && rz > tol2 && rz > 0; it++ {
		if join != nil && join() {
			return cgState{it: it, calm: calm, rz: rz, beta: beta}
		}
		for _, h := range halves {
			cg.scatter(h, beta)
		}
		b.wait()
		for _, h := range halves {
			cg.combine(h)
		}
		b.wait()
		for _, h := range halves {
			cg.pq[h] = cg.gather(h)
		}
		b.wait()
		pq := cg.pq[0] + cg.pq[1]
		if !(pq > 0) {
			break
		}
		alpha := rz / pq
		for _, h := range halves {
			cg.rz[h], cg.pmax[h] = cg.update(h, alpha)
		}
		b.wait()
		rzNew := cg.rz[0] + cg.rz[1]
		// The largest step |α·p_f| is |α|·max|p_f| exactly (rounding is
		// monotone).
		step := math.Abs(alpha) * max(cg.pmax[0], cg.pmax[1])
		beta = rzNew / rz
		rz = rzNew
		// Converged when no flow moves by more than stepTol for a few
		// iterations in a row (CG's steps are not monotone).
		if step <= stepTol {
			if calm++; calm >= 3 {
				it++
				break
			}
		} else {
			calm = 0
		}
	}
	return cgState{it: it, calm: calm, rz: rz, beta: beta, done: true}
}

// run runs the iterations from rz: on two goroutines when two is set;
// else on this one, and, if join says another core has come free, on two
// from that iteration on (the halves compute the same either way). It
// returns the iterations used.
func (cg *cgParts) run(two bool, join func() bool, rz, tol2 float64, maxIter int, stepTol float64) int {
	st := cgState{rz: rz}
	if !two {
		if st = cg.loop([]int{0, 1}, &pairBarrier{}, st, tol2, maxIter, stepTol, join); st.done {
			return st.it
		}
	}
	var it int
	pairRun(true, func(halves []int, b *pairBarrier) {
		end := cg.loop(halves, b, st, tol2, maxIter, stepTol, nil)
		if b.me == 0 {
			it = end.it
		}
	})
	return it
}

// scatter sets p = z + β·p on half h's flows and t[h] = A·p over them.
// Runs of flows with one to four equations have loops of their own: the
// entries of such a run follow each other at a fixed stride, and a flow's
// few products then cost no inner loop (most flows have few equations;
// the same products in the same order as the general loop).
func (cg *cgParts) scatter(h int, beta float64) {
	t := cg.t[h]
	clear(t)
	for _, sg := range cg.seg[h] {
		z, p := cg.z[sg.lo:sg.hi], cg.p[sg.lo:sg.hi]
		z = z[:len(p)]
		e0, n := int(cg.fs[sg.lo]), sg.l*len(p)
		cs, ec := cg.coef[e0:e0+n], cg.ec[e0:e0+n]
		switch sg.l {
		case 1:
			ec = ec[:len(cs)]
			for f := range p {
				pf := z[f] + beta*p[f]
				p[f] = pf
				t[ec[f]] += cs[f] * pf
			}
		case 2:
			for f := range p {
				pf := z[f] + beta*p[f]
				p[f] = pf
				c, e := cs[2*f:2*f+2], ec[2*f:2*f+2]
				t[e[0]] += c[0] * pf
				t[e[1]] += c[1] * pf
			}
		case 3:
			for f := range p {
				pf := z[f] + beta*p[f]
				p[f] = pf
				c, e := cs[3*f:3*f+3], ec[3*f:3*f+3]
				t[e[0]] += c[0] * pf
				t[e[1]] += c[1] * pf
				t[e[2]] += c[2] * pf
			}
		case 4:
			for f := range p {
				pf := z[f] + beta*p[f]
				p[f] = pf
				c, e := cs[4*f:4*f+4], ec[4*f:4*f+4]
				t[e[0]] += c[0] * pf
				t[e[1]] += c[1] * pf
				t[e[2]] += c[2] * pf
				t[e[3]] += c[3] * pf
			}
		default:
			l := sg.l
			for f := range p {
				pf := z[f] + beta*p[f]
				p[f] = pf
				c := cs[l*f : l*f+l]
				for i, e := range ec[l*f : l*f+l][:len(c)] {
					t[e] += c[i] * pf
				}
			}
		}
	}
}

// combine adds the halves' cell vectors over half h of the cells and
// weights them: t[0] = W·(t[0] + t[1]).
func (cg *cgParts) combine(h int) {
	lo, hi := cg.clo[h], cg.clo[h+1]
	t0, t1, w := cg.t[0][lo:hi], cg.t[1][lo:hi], cg.wgt[lo:hi]
	t1, w = t1[:len(t0)], w[:len(t0)]
	for c := range t0 {
		t0[c] = (t0[c] + t1[c]) * w[c]
	}
}

// gather sets q = (AᵀWA + Λ)·p on half h's flows and returns their pᵀq
// (runs of one to four equations as in scatter).
func (cg *cgParts) gather(h int) float64 {
	t := cg.t[0]
	var pq float64
	for _, sg := range cg.seg[h] {
		p, q, lambda := cg.p[sg.lo:sg.hi], cg.q[sg.lo:sg.hi], cg.lambda[sg.lo:sg.hi]
		q, lambda = q[:len(p)], lambda[:len(p)]
		e0, n := int(cg.fs[sg.lo]), sg.l*len(p)
		cs, ec := cg.coef[e0:e0+n], cg.ec[e0:e0+n]
		switch sg.l {
		case 1:
			ec = ec[:len(cs)]
			for f := range p {
				s := lambda[f]*p[f] + cs[f]*t[ec[f]]
				q[f] = s
				pq += p[f] * s
			}
		case 2:
			for f := range p {
				c, e := cs[2*f:2*f+2], ec[2*f:2*f+2]
				s := lambda[f] * p[f]
				s += c[0] * t[e[0]]
				s += c[1] * t[e[1]]
				q[f] = s
				pq += p[f] * s
			}
		case 3:
			for f := range p {
				c, e := cs[3*f:3*f+3], ec[3*f:3*f+3]
				s := lambda[f] * p[f]
				s += c[0] * t[e[0]]
				s += c[1] * t[e[1]]
				s += c[2] * t[e[2]]
				q[f] = s
				pq += p[f] * s
			}
		case 4:
			for f := range p {
				c, e := cs[4*f:4*f+4], ec[4*f:4*f+4]
				s := lambda[f] * p[f]
				s += c[0] * t[e[0]]
				s += c[1] * t[e[1]]
				s += c[2] * t[e[2]]
				s += c[3] * t[e[3]]
				q[f] = s
				pq += p[f] * s
			}
		default:
			l := sg.l
			for f := range p {
				c := cs[l*f : l*f+l]
				s := lambda[f] * p[f]
				for i, e := range ec[l*f : l*f+l][:len(c)] {
					s += c[i] * t[e]
				}
				q[f] = s
				pq += p[f] * s
			}
		}
	}
	return pq
}

// update takes the step α on half h's flows and returns their rᵀz and
// max |p_f|.
func (cg *cgParts) update(h int, alpha float64) (rz, pmax float64) {
	lo, hi := cg.ulo[h], cg.ulo[h+1]
	x, r, z, p, q, diag := cg.x[lo:hi], cg.r[lo:hi], cg.z[lo:hi], cg.p[lo:hi], cg.q[lo:hi], cg.diag[lo:hi]
	r, z, p, q, diag = r[:len(x)], z[:len(x)], p[:len(x)], q[:len(x)], diag[:len(x)]
	for f := range x {
		pf := p[f]
		x[f] += alpha * pf
		if a := math.Abs(pf); a > pmax {
			pmax = a
		}
		rf := r[f] - alpha*q[f]
		r[f] = rf
		zf := rf * diag[f]
		z[f] = zf
		rz += rf * zf
	}
	return rz, pmax
}
