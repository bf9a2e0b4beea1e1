package sketch

import (
	"math"
	"math/bits"
)

// Identification (docs/decode.md, "Identification and CI95"): each
// flow's posterior variance, which says whether the cells pin its delay
// down and gives its CI95, and the flows whose mean a p = 1 row gives
// exactly.

// identifiedFraction: a flow counts as identified when the data leave at
// most this fraction of the prior variance τ² (posterior sd <= τ/√10).
const identifiedFraction = 0.1

// findAlone marks the flows whose mean alone gives exactly (d.alone): the
// identification skips them, as their exact value overrides whatever it
// would find. At light load that is most flows (92 % of 3000 flows on
// 4 × 4096, as in bench-replay's intervals), at the paper's load almost
// none.
func (d *lsDecoder) findAlone() {
	d.aloneOK = make([]bool, d.nA)
	d.aloneVal = make([]float64, d.nA)
	if len(d.exact) == 0 {
		return
	}
	for f := range d.nA {
		d.aloneVal[f], d.aloneOK[f] = d.alone(f)
	}
}

// alone returns flow f's exact mean delay when, in some row with p = 1,
// all its received packets lie in usable cells that hold no other packets.
func (d *lsDecoder) alone(f int) (float64, bool) {
	for _, r := range d.exact {
		var y, a float64
		for e := d.fStart[f]; e < d.fStart[f+1]; e++ {
			c := d.eCell[e]
			if int(uint64(d.cGlob[c])/d.cols) != r {
				continue
			}
			if d.cStart[c+1]-d.cStart[c] != 1 || d.cMiss[c] != 0 {
				a = -1
				break
			}
			y += d.cY[c]
			a += d.eA[e]
		}
		if a > 0 && a == d.w[f]*d.recv[f] {
			return y / a, true
		}
	}
	return 0, false
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
//
// Cost: the scan of f's cells is sequential over cell-major copies of what
// it needs (no random access per flow g). A flow g with a single usable
// cell can share only that cell with f, so its term (a²/(P_g − p_gc)) is
// precomputed per entry and just added; only flows with several usable
// cells go through a small hash table (reset by generation, in L1) that
// finds those sharing more than one of f's cells, whose terms couple them.
//
// The stages below each split their loop over the workers; every element
// is computed by one goroutine with the arithmetic of one loop, so the
// results do not depend on the split.
func (d *lsDecoder) identify(workers int) {
	for f := d.nA; f < len(d.post); f++ {
		d.post[f] = 1 / d.lam[f]
	}
	q := d.cellPriorNoise(workers)
	id := d.settleFlows(workers, q)
	d.singleCellPosts(workers, id)
	sc := d.scanCopies(workers, id)
	d.scanFlows(workers, d.scanOrder(id.scan), sc)
}

// cellPriorNoise returns, per cell, the level-1 information each entry
// brings to its flow: the cell's noise plus its flows at their prior
// variance. The per-cell sums run cell by cell over cE, which lists a
// cell's entries in flow-major order: the same additions in the same
// order as a scatter over the entries, and independent per cell. Its own
// slice: the final solve may run alongside.
func (d *lsDecoder) cellPriorNoise(workers int) []float64 {
	nC := len(d.cY)
	q := make([]float64, nC)
	parallelChunks(workers, nC, d.grain, func(_, lo, hi int) {
		for c := lo; c < hi; c++ {
			v := d.cV[c]
			for _, ce := range d.cE[d.cStart[c]:d.cStart[c+1]] {
				v += ce.a * ce.a / d.lam[ce.f]
			}
			q[c] = v
		}
	})
	return q
}

// oneCell is a flow and the entry of its one usable cell.
type oneCell struct{ f, e int32 }

// idFlows is what settleFlows finds per flow for the later stages.
type idFlows struct {
	pe     []float64   // per entry: p_fc, the information the cell brings its flow
	P      []float64   // per solver flow: λ + Σ p_fc
	scan   []bool      // per solver flow: needs the scan
	single [][]oneCell // per worker: flows with one usable cell the bound did not settle
}

// settleFlows computes P_f and each entry's p_fc, and settles the flows
// that need no scan. Without cells: the prior. Otherwise the cells' other
// flows only ever add to M = V + Σ_g s_g·a_g·a_gᵀ (each term is positive
// semidefinite), so a_fᵀ M⁻¹ a_f ≤ Σ_c a_fc²/V_c; a flow that this bound
// leaves short of identification (identifiedFraction) is not identified
// whatever its neighbours, and its exact posterior is never used: it keeps
// the bound's 1/(λ + Σ a²/V), a lower bound on its posterior variance. At
// the paper's load with k = 5 that is 97 % of the flows with several cells
// (94 % of the scan). A flow with one usable cell that the bound does not
// settle has a closed form (singleCellPosts); the others are scanned.
func (d *lsDecoder) settleFlows(workers int, q []float64) idFlows {
	nA := d.nA
	lam := d.lam
	id := idFlows{
		pe:     make([]float64, len(d.eCell)),
		P:      make([]float64, nA),
		scan:   make([]bool, nA),
		single: make([][]oneCell, max(1, min(workers, nA/d.grain))),
	}
	pe, P := id.pe, id.P
	d.parallelEntries(workers, nA, func(w, lo, hi int) {
		for f := lo; f < hi; f++ {
			P[f] = lam[f]
			L, last := 0, int32(-1)
			ub := lam[f]
			for e := d.fStart[f]; e < d.fStart[f+1]; e++ {
				c := d.eCell[e]
				v := d.cV[c]
				if math.IsInf(v, 1) {
					continue
				}
				a := d.eA[e]
				den := max(v, q[c]-a*a/lam[f])
				pe[e] = a * a / den
				P[f] += pe[e]
				L++
				last = e
				ub += a * a / v
			}
			switch {
			case d.aloneOK[f]:
				// exact: its posterior is not used
			case L == 0:
				d.post[f] = 1 / lam[f]
			case 1/ub > (1+1e-9)*identifiedFraction*d.priorVar(f):
				d.post[f] = 1 / ub
			case L == 1:
				id.single[w] = append(id.single[w], oneCell{int32(f), last})
			default:
				id.scan[f] = true
			}
		}
	})
	return id
}

// singleCellPosts sets the posterior of the flows with one usable cell c:
// with T_c = Σ_g a_gc²·s_g over the cell (s_g the variance g keeps without
// cell c), a closed form; no loop can pass through one cell. T only for
// the cells such flows are in.
func (d *lsDecoder) singleCellPosts(workers int, id idFlows) {
	nC := len(d.cY)
	lam, P, pe := d.lam, id.P, id.pe
	T := make([]float64, nC)
	needT := make([]bool, nC)
	for _, fl := range id.single {
		for _, o := range fl {
			needT[d.eCell[o.e]] = true
		}
	}
	parallelChunks(workers, nC, d.grain, func(_, lo, hi int) {
		for c := lo; c < hi; c++ {
			if !needT[c] {
				continue
			}
			var v float64
			for _, ce := range d.cE[d.cStart[c]:d.cStart[c+1]] {
				v += ce.a * ce.a / max(P[ce.f]-pe[ce.e], lam[ce.f])
			}
			T[c] = v
		}
	})
	for _, fl := range id.single {
		for _, o := range fl {
			f, e, c := o.f, o.e, d.eCell[o.e]
			a := d.eA[e]
			other := max(0, T[c]-a*a/max(P[f]-pe[e], lam[f]))
			d.post[f] = 1 / (lam[f] + a*a/(d.cV[c]+other))
		}
	}
}

// hotEntry is what the scan reads of every entry of a cell it visits: the
// flow, the single-cell term a²·s_g, and a 32-bit signature of g's other
// usable cells (bit c mod 32; a flow's cells in a row are consecutive
// numbers, so they get distinct bits). If the signature misses f's cells,
// g shares no other cell with f and the single-cell term is exact;
// otherwise (a real share, common with k > 1 as neighbouring windows
// overlap, or a false alarm) it goes through the hash table.
type hotEntry struct {
	g     int32
	other uint32
	s1    float64
}

// coldEntry is what the scan reads of an entry whose flow really shares
// several cells with the scanned flow.
type coldEntry struct {
	a, pe, pg, lmg float64
}

// scanCells holds cell-major copies of the entries of the cells the
// scanned flows are in, packed: cell c's at hStart[c]..hStart[c+1].
type scanCells struct {
	hStart []int32
	hot    []hotEntry
	cold   []coldEntry
}

// scanCopies makes the cell-major copies of what the scan needs, so that
// it reads memory in order (the scan touches Σ_c |c|² entries, mostly out
// of cache).
func (d *lsDecoder) scanCopies(workers int, id idFlows) scanCells {
	nC, nE := len(d.cY), len(d.eCell)
	lam, P, pe := d.lam, id.P, id.pe
	// The cells the scanned flows need.
	need := make([]bool, nC)
	for f, ok := range id.scan {
		if !ok {
			continue
		}
		for e := d.fStart[f]; e < d.fStart[f+1]; e++ {
			need[d.eCell[e]] = true
		}
	}
	hStart := make([]int32, nC+1)
	for c := range nC {
		hStart[c+1] = hStart[c]
		if need[c] {
			hStart[c+1] += d.cStart[c+1] - d.cStart[c]
		}
	}
	pos := make([]int32, nE)
	for c := range nC {
		if need[c] {
			for j := d.cStart[c]; j < d.cStart[c+1]; j++ {
				pos[d.cE[j].e] = hStart[c] + j - d.cStart[c]
			}
		}
	}
	sc := scanCells{hStart: hStart, hot: make([]hotEntry, hStart[nC]), cold: make([]coldEntry, hStart[nC])}
	d.parallelEntries(workers, d.nA, func(_, lo, hi int) {
		sigE := make([]uint32, 0, d.rows*d.k) // per entry of a flow: prefix ORs
		for g := lo; g < hi; g++ {
			needed := false
			for e := d.fStart[g]; e < d.fStart[g+1]; e++ {
				needed = needed || need[d.eCell[e]]
			}
			if !needed {
				continue
			}
			sigE = d.otherCellSigs(g, sigE)
			for e := d.fStart[g]; e < d.fStart[g+1]; e++ {
				if c := d.eCell[e]; !need[c] || math.IsInf(d.cV[c], 1) {
					continue
				}
				j := pos[e]
				a := d.eA[e]
				sc.hot[j] = hotEntry{g: int32(g), s1: a * a * (1 / max(P[g]-pe[e], lam[g])), other: sigE[e-d.fStart[g]]}
				sc.cold[j] = coldEntry{a: a, pe: pe[e], pg: P[g], lmg: lam[g]}
			}
		}
	})
	return sc
}

// otherCellSigs returns, in buf, the signature of flow g's usable cells
// other than each entry's own (the OR of the prefix and the suffix).
func (d *lsDecoder) otherCellSigs(g int, buf []uint32) []uint32 {
	buf = buf[:0]
	var acc uint32
	for e := d.fStart[g]; e < d.fStart[g+1]; e++ {
		buf = append(buf, acc)
		if c := d.eCell[e]; !math.IsInf(d.cV[c], 1) {
			acc |= 1 << (uint(c) & 31)
		}
	}
	acc = 0 // suffix ORs
	for e := d.fStart[g+1] - 1; e >= d.fStart[g]; e-- {
		i := e - d.fStart[g]
		buf[i] |= acc
		if c := d.eCell[e]; !math.IsInf(d.cV[c], 1) {
			acc |= 1 << (uint(c) & 31)
		}
	}
	return buf
}

// scanOrder returns the flows to scan in the order of their last usable
// cell (cells are numbered by row and column): consecutive flows then
// share cells, which stay in cache. A counting sort.
func (d *lsDecoder) scanOrder(scan []bool) []int32 {
	nA, nC := d.nA, len(d.cY)
	nScan := 0
	for _, ok := range scan {
		if ok {
			nScan++
		}
	}
	order := make([]int32, nScan)
	key := make([]int32, nA)
	start := make([]int32, nC+2)
	for f := 0; f < nA; f++ {
		if !scan[f] {
			continue
		}
		k := int32(0)
		for e := d.fStart[f]; e < d.fStart[f+1]; e++ {
			if c := d.eCell[e]; !math.IsInf(d.cV[c], 1) {
				k = c + 1
			}
		}
		key[f] = k
		start[k+1]++
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	for f := 0; f < nA; f++ {
		if scan[f] {
			order[start[key[f]]] = int32(f)
			start[key[f]]++
		}
	}
	return order
}

// scanFlows sets the posterior of the flows in order. Flows are
// independent here: runs of the cache-friendly order go to the workers as
// they free up (the identification shares the cores with the final solve
// and the loss EM, so fixed halves left one goroutine finishing alone),
// each run with its own scratch.
func (d *lsDecoder) scanFlows(workers int, order []int32, sc scanCells) {
	parallelDynamic(workers, len(order), max(d.grain/4, len(order)/(8*workers)), func(lo, hi int) {
		s := newFlowScan(d.rows * d.k)
		for _, f := range order[lo:hi] {
			d.post[f] = 1 / (d.lam[f] + s.info(d, sc, int(f)))
		}
	})
}

// scanSlot is the hash table's slot of a flow g that passed the signature
// filter; its records (one per shared cell) are chained from head. Only a
// g with several records (really sharing cells) reads the cold entries; a
// false alarm adds the hot single-cell term, which is then exact.
type scanSlot struct {
	gen, g, head, n int32
	s               float64 // 0 until computed
}

// scanRec is one shared cell of a slot's flow: the single-cell term is
// hot[j].s1.
type scanRec struct {
	slot, li, prev, j int32
}

// flowScan is the scratch of one run of scanFlows.
type flowScan struct {
	recs  []scanRec
	table []scanSlot
	gen   int32
	S     []float64 // L×L
	af    []float64 // the flow's coefficients in its usable cells
	cells []int32   // its usable cells
}

func newFlowScan(maxL int) *flowScan {
	return &flowScan{S: make([]float64, maxL*maxL), af: make([]float64, maxL), cells: make([]int32, maxL)}
}

// info returns a_fᵀ M⁻¹ a_f for flow f: the information its usable cells
// bring with their other flows integrated out.
func (s *flowScan) info(d *lsDecoder, sc scanCells, f int) float64 {
	af, cells := s.af, s.cells
	L, bound := 0, 0
	for e := d.fStart[f]; e < d.fStart[f+1]; e++ {
		if c := d.eCell[e]; !math.IsInf(d.cV[c], 1) {
			af[L] = d.eA[e]
			cells[L] = c
			L++
			bound += int(d.cStart[c+1] - d.cStart[c])
		}
	}
	// Open addressing at load <= 1/2, on the smallest power-of-two
	// prefix of the table that allows it (small stays in L1).
	size := 1 << bits.Len(uint(2*bound))
	if size > len(s.table) {
		s.table = make([]scanSlot, size)
		s.gen = 0
	}
	s.gen++
	if bound > len(s.recs) {
		s.recs = make([]scanRec, 2*bound)
	}
	S := s.S[:L*L]
	clear(S)
	nRec := s.diagonal(d, sc, int32(f), cells[:L], uint32(size-1), S)
	s.couple(sc, nRec, L, S)
	return quadInv(S, af[:L], L)
}

// diagonal sets S's diagonal to each cell's noise plus the single-cell
// terms of the flows that share no other cell with f, and records the
// others in the hash table. It returns the number of records.
func (s *flowScan) diagonal(d *lsDecoder, sc scanCells, self int32, cells []int32, mask uint32, S []float64) int32 {
	L := len(cells)
	table, recs, gen := s.table, s.recs, s.gen
	var sigF uint32
	for _, c := range cells {
		sigF |= 1 << (uint(c) & 31)
	}
	nRec := int32(0)
	for li := 0; li < L; li++ {
		c := cells[li]
		sum := d.cV[c]
		for j := sc.hStart[c]; j < sc.hStart[c+1]; j++ {
			h := &sc.hot[j]
			g := h.g
			if g == self {
				continue
			}
			if h.other&sigF == 0 {
				sum += h.s1
				continue
			}
			k := (uint32(g) * 0x9e3779b1) & mask
			for table[k].gen == gen && table[k].g != g {
				k = (k + 1) & mask
			}
			t := &table[k]
			if t.gen != gen {
				*t = scanSlot{gen: gen, g: g, head: -1}
			}
			t.n++
			recs[nRec] = scanRec{slot: int32(k), li: int32(li), prev: t.head, j: j}
			t.head = nRec
			nRec++
		}
		S[li*L+li] = sum
	}
	return nRec
}

// couple adds the terms of the flows in the hash table: a flow sharing
// several of f's cells couples them.
func (s *flowScan) couple(sc scanCells, nRec int32, L int, S []float64) {
	recs, table := s.recs, s.table
	for ri := range nRec {
		rc := &recs[ri]
		t := &table[rc.slot]
		i := int(rc.li)
		if t.n == 1 {
			S[i*L+i] += sc.hot[rc.j].s1
			continue
		}
		if t.s == 0 {
			var excl float64
			for j := t.head; j >= 0; j = recs[j].prev {
				excl += sc.cold[recs[j].j].pe
			}
			en := &sc.cold[rc.j]
			t.s = 1 / max(en.pg-excl, en.lmg)
		}
		sv := t.s
		a := sc.cold[rc.j].a
		S[i*L+i] += a * a * sv
		for j := rc.prev; j >= 0; j = recs[j].prev {
			o := int(recs[j].li)
			v := a * sc.cold[recs[j].j].a * sv
			S[i*L+o] += v
			S[o*L+i] += v
		}
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
