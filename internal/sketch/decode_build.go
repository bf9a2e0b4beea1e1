package sketch

import (
	"fmt"
	"math"
	"sync/atomic"
)

// Building decode's system (docs/decode.md, "What the receiver keeps"):
// the receiver's compositions become the sparse least-squares system over
// the usable cells, its flows numbered by equation count; the warm start
// (the paper's estimate of every flow) runs alongside.

// warmRun: the flows a warm-start goroutine claims at a time.
const warmRun = 2048

// buildAndWarm builds the system and computes the warm start and
// fallbacks: the paper's estimate, with each flow's own weight
// (flowWeighted takes a weight of 0 as 1, as build does).
func (d *lsDecoder) buildAndWarm(pe *estimator, flows []FlowComposition, plan decodePlan, clock *stageClock) ([]FlowEstimate, error) {
	out := make([]FlowEstimate, len(flows))
	// Each goroutine of the warm start gets its own scratch, cloned here:
	// cloning in the worker would read pe while worker 0 already writes
	// its scratch. The flows go out in runs claimed as goroutines free up,
	// so that build's goroutine takes a share of what is left when it is
	// done (at the paper's load the two cost about the same CPU). Each
	// flow's estimate is the same whoever computes it.
	nEst := plan.warmWorkers
	if plan.together {
		nEst++
	}
	ests := []*estimator{pe}
	for len(ests) < nEst {
		ests = append(ests, pe.clone())
	}
	var next atomic.Int64
	warmFrom := func(e *estimator) {
		for {
			lo := int(next.Add(warmRun)) - warmRun
			if lo >= len(flows) {
				return
			}
			for i := lo; i < min(len(flows), lo+warmRun); i++ {
				out[i] = e.flowWeighted(flows[i].Flow, flows[i].Weight)
			}
		}
	}
	if !plan.together {
		if err := d.build(flows, plan.buildWorkers); err != nil {
			return nil, err
		}
		clock.lap(0)
		fanOut(plan.warmWorkers, func(w int) { warmFrom(ests[w]) })
		return out, nil
	}
	var buildErr error
	fanOut(1+plan.warmWorkers, func(i int) {
		if i == 0 {
			buildErr = d.build(flows, plan.buildWorkers)
			warmFrom(ests[plan.warmWorkers])
		} else {
			warmFrom(ests[i-1])
		}
	})
	clock.lap(0) // build and warm start together
	if buildErr != nil {
		return nil, buildErr
	}
	return out, nil
}

// cellEntry is an entry in cell-major order, with what the per-cell loops
// read.
type cellEntry struct {
	e, f int32   // the entry (flow-major index) and its flow
	a, b float64 // its eA and eB
	v    float64 // w²·n·fpc: coefficient of σ_f² in the noise of ΔS_c
}

// keptCell is a usable non-empty cell of a flow, kept by build's first
// pass for its second.
type keptCell struct{ gi, n uint32 }

// flowCell is one nonzero count of a flow's composition: the global cell
// and row it is in.
type flowCell struct {
	gi uint64
	r  int
	n  uint32
}

// nonzeroCells returns, in buf, the nonzero counts of fc's composition
// with their cells, rows and offsets in order: both of build's passes walk
// a flow's cells the same way.
func (d *lsDecoder) nonzeroCells(fc FlowComposition, buf []flowCell) []flowCell {
	k, C := d.k, d.cols
	buf = buf[:0]
	h1, h2 := d.snd.flowCols(fc.Flow)
	col := h1
	for r := 0; r < d.rows; r++ {
		base := uint64(r) * C
		for o := 0; o < k; o++ {
			if n := fc.Cells[r*k+o]; n != 0 {
				c := col + uint64(o)
				if c >= C {
					c -= C
				}
				buf = append(buf, flowCell{gi: base + c, r: r, n: n})
			}
		}
		if col += h2; col >= C {
			col -= C
		}
	}
	return buf
}

// build turns the compositions into the sparse system over usable cells.
// A first pass validates, counts each flow's equations and numbers the
// usable cells (in the caller's flow order); the flows are then renumbered
// by equation count (counting sort) and a second pass fills the entry
// arrays, sized exactly.
func (d *lsDecoder) build(flows []FlowComposition, workers int) error {
	b := &buildPass{cmap: d.classifyCells()}
	if err := d.countFlows(flows, workers, b); err != nil {
		return err
	}
	d.numberCells(b)
	d.renumber(b.cnt)
	eVar := d.fillEntries(workers, b)
	d.fillCells(eVar)
	d.cellMisses(workers)
	d.allocSolve()
	return nil
}

// Global cell -> usable cell id in buildPass.cmap: cellUnseen usable but
// not (yet) in a candidate's composition, cellUnusable empty or different
// at the two ends.
const cellUnseen, cellUnusable = -1, -2

// buildPass is what build's first pass finds, for the later stages.
type buildPass struct {
	cmap []int32 // global cell -> usable cell id, cellUnseen or cellUnusable
	// per flow, caller's order: weight, received packets, samples, equations
	w0, recv0, smp0 []float64
	cnt             []int32
	// per worker: the usable cells some of its flows are in, and its flows'
	// usable non-empty cells in the order pass 2 takes them (pass 2 splits
	// the flows the same way), so that pass 2 reads them in order instead
	// of walking the compositions again
	touched [][]bool
	kept    [][]keptCell
}

// classifyCells classifies the whole sketch first, in memory order, so that
// the per-flow passes only read it and can run on every worker.
func (d *lsDecoder) classifyCells() []int32 {
	cmap := make([]int32, d.snd.Len())
	for gi, ok := range d.usable {
		cmap[gi] = cellUnusable
		if ok {
			cmap[gi] = cellUnseen
		}
	}
	return cmap
}

// countFlows is pass 1, in the caller's order: validate, count each flow's
// equations, and mark the usable cells some candidate is in (a mark array
// per worker). It returns the first bad flow in the caller's order,
// whatever the split.
func (d *lsDecoder) countFlows(flows []FlowComposition, workers int, b *buildPass) error {
	nF := len(flows)
	var sumRate float64
	for _, p := range d.rate {
		sumRate += p
	}
	b.w0 = make([]float64, nF)
	b.recv0 = make([]float64, nF)
	b.smp0 = make([]float64, nF)
	b.cnt = make([]int32, nF)
	b.touched = make([][]bool, workers)
	b.kept = make([][]keptCell, workers)
	errs := make([]error, workers)
	parallelChunks(workers, nF, d.grain, func(wk, lo, hi int) {
		s := countScratch{
			mark:  make([]bool, len(b.cmap)),
			kept:  make([]keptCell, 0, (hi-lo)*4),
			rowN:  make([]float64, d.rows),
			cells: make([]flowCell, 0, d.rows*d.k),
		}
		for i := lo; i < hi; i++ {
			if errs[wk] = d.countFlow(b, &s, i, flows[i], sumRate); errs[wk] != nil {
				break
			}
		}
		b.touched[wk], b.kept[wk] = s.mark, s.kept
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// countScratch is one worker's scratch and output in countFlows.
type countScratch struct {
	mark  []bool     // usable cells its flows are in
	kept  []keptCell // its flows' usable non-empty cells, in order
	rowN  []float64  // per row
	cells []flowCell // one flow's nonzero counts
}

// countFlow validates flow i and counts its equations.
func (d *lsDecoder) countFlow(b *buildPass, s *countScratch, i int, fc FlowComposition, sumRate float64) error {
	R, k := d.rows, d.k
	maxL := R * k
	if len(fc.Cells) != maxL {
		return fmt.Errorf("decode: flow %d (%x) has %d cell counts; the receiver must keep rows*vlda = %d per flow", i, fc.Flow, len(fc.Cells), maxL)
	}
	w := fc.Weight
	if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
		return fmt.Errorf("decode: flow %d (%x) has weight %v: must be a finite number >= 0 (0 = 1)", i, fc.Flow, w)
	}
	if w == 0 {
		w = 1
	}
	b.w0[i] = w
	// Received packets: exact from a p = 1 row; otherwise the
	// sampling-weighted estimate Σ_r n_r / Σ_r p_r.
	rowN := s.rowN
	var tot float64
	for r := 0; r < R; r++ {
		var sum float64
		for o := 0; o < k; o++ {
			sum += float64(fc.Cells[r*k+o])
		}
		rowN[r] = sum
		tot += sum
	}
	if len(d.exact) > 0 {
		b.recv0[i] = rowN[d.exact[0]]
	} else {
		b.recv0[i] = tot / sumRate
	}
	clear(rowN)
	var L int32
	s.cells = d.nonzeroCells(fc, s.cells)
	for _, fcl := range s.cells {
		if b.cmap[fcl.gi] == cellUnusable {
			continue
		}
		s.mark[fcl.gi] = true
		L++
		rowN[fcl.r] += float64(fcl.n)
		s.kept = append(s.kept, keptCell{gi: uint32(fcl.gi), n: fcl.n})
	}
	var best float64
	for _, n := range rowN {
		best = max(best, n)
	}
	b.smp0[i] = best
	if len(d.exact) > 0 {
		b.smp0[i] = min(best, b.recv0[i]) // never more than were received
	}
	clear(rowN)
	b.cnt[i] = L
	return nil
}

// numberCells numbers the usable cells in sketch order (row, column): a
// flow's cells in a row are then neighbours, and so are those of flows
// with nearby columns, which keeps identify's scans in cache.
func (d *lsDecoder) numberCells(b *buildPass) {
	var nCell int32
	for gi, id := range b.cmap {
		if id != cellUnseen {
			continue
		}
		for _, mark := range b.touched {
			if mark != nil && mark[gi] {
				b.cmap[gi] = nCell
				d.cGlob = append(d.cGlob, int32(gi))
				nCell++
				break
			}
		}
	}
}

// renumber sets perm and inv: flows by equation count 1..maxL, then the
// flows with none.
func (d *lsDecoder) renumber(cnt []int32) {
	maxL := d.rows * d.k
	nF := len(cnt)
	start := make([]int32, maxL+2)
	for _, L := range cnt {
		b := L
		if L == 0 {
			b = int32(maxL + 1)
		}
		start[b]++
	}
	var acc int32
	for b := range start {
		acc, start[b] = acc+start[b], acc
	}
	d.nA = int(start[maxL+1])
	d.perm = make([]int32, nF)
	d.inv = make([]int32, nF)
	for i, L := range cnt {
		b := L
		if L == 0 {
			b = int32(maxL + 1)
		}
		d.perm[start[b]] = int32(i)
		d.inv[i] = start[b]
		start[b]++
	}
}

// fillEntries is pass 2, in internal order: the entries, each flow at its
// own offset. It returns each entry's coefficient of σ_f² in the noise.
func (d *lsDecoder) fillEntries(workers int, b *buildPass) []float64 {
	nF := len(b.cnt)
	d.w = make([]float64, nF)
	d.recv = make([]float64, nF)
	d.smp = make([]float64, nF)
	d.fStart = make([]int32, nF+1)
	for f, i := range d.perm {
		d.fStart[f+1] = d.fStart[f] + b.cnt[i]
	}
	nE := int(d.fStart[nF])
	d.eCell = make([]int32, nE)
	d.eA = make([]float64, nE)
	d.eB = make([]float64, nE)
	eVar := make([]float64, nE)
	// In the caller's order, each flow writing at its internal offset:
	// the writes land at random, which costs less than reading the flows
	// and their compositions at random.
	parallelChunks(workers, nF, d.grain, func(wk, lo, hi int) {
		mine := b.kept[wk]
		for i := lo; i < hi; i++ {
			f := d.inv[i]
			w, pop := b.w0[i], b.recv0[i]
			d.w[f], d.recv[f], d.smp[f] = w, pop, b.smp0[i]
			e := d.fStart[f]
			for _, kc := range mine[:b.cnt[i]] {
				id := b.cmap[kc.gi]
				fn := float64(kc.n)
				// Finite-population correction: the cell holds n of the
				// flow's pop received packets; their mean deviates from
				// the flow's mean with variance σ²/n·(pop-n)/(pop-1), so a
				// cell holding all of them (k = 1, p = 1) is exact.
				fpc := 0.0
				if pop > 1 {
					fpc = min(1, max(0, (pop-fn)/(pop-1)))
				}
				d.eCell[e] = id
				d.eA[e] = w * fn
				d.eB[e] = w * w * fn
				eVar[e] = w * w * fn * fpc
				e++
			}
			mine = mine[b.cnt[i]:]
		}
	})
	return eVar
}

// fillCells sets the per-cell arrays and the cell-major entries: each
// cell's entries in flow-major order, with copies of what the per-cell
// loops read (noise, variance equations, identification), so that those
// loops read memory in order and only the per-flow values at random.
func (d *lsDecoder) fillCells(eVar []float64) {
	nC, nF, nE := len(d.cGlob), len(d.w), len(d.eCell)
	d.cY = make([]float64, nC)
	d.cN = make([]float64, nC)
	d.cSPM = make([]float64, nC)
	d.cSN = make([]float64, nC)
	d.cMiss = make([]float64, nC)
	d.cV = make([]float64, nC)
	for c, gi := range d.cGlob {
		p := &d.pairs[gi]
		d.cY[c] = float64(p.dS)
		d.cSPM[c] = float64(p.dSPM)
		d.cSN[c] = float64(p.sn)
		d.cN[c] = float64(p.n)
	}
	d.cStart = make([]int32, nC+1)
	for _, c := range d.eCell {
		d.cStart[c+1]++
	}
	for c := 0; c < nC; c++ {
		d.cStart[c+1] += d.cStart[c]
	}
	d.cE = make([]cellEntry, nE)
	fill := make([]int32, nC)
	copy(fill, d.cStart[:nC])
	for f := range nF {
		for e := d.fStart[f]; e < d.fStart[f+1]; e++ {
			c := d.eCell[e]
			j := fill[c]
			fill[c]++
			d.cE[j] = cellEntry{e: e, f: int32(f), a: d.eA[e], b: d.eB[e], v: eVar[e]}
		}
	}
}

// cellMisses sets the mass the candidates do not explain, per cell.
func (d *lsDecoder) cellMisses(workers int) {
	parallelChunks(workers, len(d.cMiss), d.grain, func(_, lo, hi int) {
		for c := lo; c < hi; c++ {
			var a float64
			for _, ce := range d.cE[d.cStart[c]:d.cStart[c+1]] {
				a += ce.a
			}
			m := d.cN[c] - a
			if m < -1e-9*d.cN[c] {
				// The composition claims more packets than the cell holds
				// (duplicate flows, or a composition from another sketch):
				// the cell is left out (weight 0, below).
				m = math.NaN()
			}
			d.cMiss[c] = max(0, m)
			if math.IsNaN(m) {
				d.cMiss[c] = math.NaN()
			}
		}
	})
}

// allocSolve allocates the solves' unknowns and scratch.
func (d *lsDecoder) allocSolve() {
	nF, nA, nC := len(d.w), d.nA, len(d.cY)
	d.x = make([]float64, nF)
	d.varF = make([]float64, nF)
	d.post = make([]float64, nF)
	d.lam = make([]float64, nF)
	d.r = make([]float64, nA)
	d.z = make([]float64, nA)
	d.p = make([]float64, nA)
	d.q = make([]float64, nA)
	d.diag = make([]float64, nA)
	d.t = make([]float64, nC)
	d.t2 = make([]float64, nC)
	d.y = make([]float64, nC)
	d.wgt = make([]float64, nC)
	d.buf = make([]float64, 0, nF)
}
