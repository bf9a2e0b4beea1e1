package sketch

import (
	"errors"
	"fmt"
	"math"
)

// Loss (docs/decode.md, "Loss and packets"): decode's point estimate of
// every flow's lost packets (an EM sharing each cell's count deficit among
// the flows in it) and AloneLoss, what a flow's own cells prove. The rule
// that composes the published loss is in publish.go.

// lossIter bounds the loss EM's iterations. The EM converges slowly (on
// the 150k-flow benchmark it uses every iteration it is allowed), but what
// it moves after 25 does not show in accuracy: TestDecodeSimulated's mean
// absolute loss errors agree within 0.01–0.03 packets for 25, 50, 100 and
// 200 iterations.
const lossIter = 25

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
func (d *lsDecoder) solveLoss(flows []FlowComposition, warm []FlowEstimate) []float64 {
	out := make([]float64, len(flows))
	var cand []int32
	for i := range flows {
		if warm[i].Loss > 0 {
			cand = append(cand, int32(i))
		}
	}
	if len(cand) == 0 {
		return out
	}
	rows := d.lossRows()
	em := d.lossSystem(flows, warm, cand, rows, d.lossOdds(rows[0]))
	em.compact()
	em.run(max(1, min(d.opt.MaxIter, lossIter)))
	for j, i := range cand {
		if em.seen[j] {
			out[i] = em.th[j] * d.recv[d.inv[i]]
		} else {
			out[i] = em.th[j]
		}
	}
	return out
}

// lossRows returns the rows the loss EM uses. A flow's lost packets are a
// realized count: a p = 1 row holds all of them, a sampled row only a
// binomial share. Use the exact rows alone when there are any.
func (d *lsDecoder) lossRows() []int {
	if len(d.exact) > 0 {
		return d.exact
	}
	rows := make([]int, d.rows)
	for r := range rows {
		rows[r] = r
	}
	return rows
}

// lossOdds returns the interval's loss odds, from the whole of row r.
func (d *lsDecoder) lossOdds(r int) float64 {
	C := int(d.cols)
	var sn, rn float64
	for c := 0; c < C; c++ {
		gi := r*C + c
		sn += float64(d.pairs[gi].n)
		rn += float64(d.pairs[gi].rn)
	}
	return max(0, sn-rn) / max(1, rn)
}

// lossEM is the loss system of the candidates (flows with a positive
// count-min bound) and the EM's state.
type lossEM struct {
	// per candidate j
	th        []float64 // the unknown: odds θ (seen) or lost packets ℓ (never seen)
	ub        []float64 // its bound (the count-min bound, in the unknown's units)
	seen      []bool    // the receiver saw the flow
	stepScale []float64 // lost packets per unit of the unknown
	den       []float64 // Σ of its coefficients: the EM's fixed denominators
	eStart    []int32   // entries eStart[j]..eStart[j+1]
	// per entry: cell (deficit index) and coefficient
	ec   []int32
	ea   []float64
	cDef []float64 // per deficit index: the cell's count deficit
	// the MAP prior: Gamma at the interval's loss odds
	pa, pb float64

	// compact: only the entries in cells with a deficit (compact numbering)
	actStart []int32
	actC     []int32
	actA     []float64
	def      []float64 // deficit of each compact cell
}

// lossSystem sets up the candidates' entries and start values.
func (d *lsDecoder) lossSystem(flows []FlowComposition, warm []FlowEstimate, cand []int32, rows []int, rho float64) *lossEM {
	k, C := d.k, d.cols
	per := len(rows) * k
	// Global cell -> deficit index (-1: none yet); an array, as a map
	// costs more than the EM itself.
	cmap := make([]int32, d.snd.Len())
	for i := range cmap {
		cmap[i] = -1
	}
	n := len(cand)
	em := &lossEM{
		cDef:      make([]float64, 0, min(len(cmap), n*per)),
		ec:        make([]int32, 0, n*per),
		ea:        make([]float64, 0, n*per),
		eStart:    make([]int32, n+1),
		th:        make([]float64, n),
		ub:        make([]float64, n),
		seen:      make([]bool, n),
		stepScale: make([]float64, n),
		den:       make([]float64, n),
		// MAP rather than ML: a Gamma prior on θ_f at the interval's loss
		// odds, worth lossPriorPackets delivered packets. Without it a
		// small flow that happens to share a cell with a big flow's lost
		// packets can claim them (its odds are free to be huge).
		pa: rho * lossPriorPackets,
		pb: float64(lossPriorPackets),
	}
	for j, i := range cand {
		f := flows[i].Flow
		h1, h2 := d.snd.flowCols(f)
		fi := d.inv[i] // internal index
		recv, w := d.recv[fi], d.w[fi]
		em.seen[j] = recv > 0
		for _, r := range rows {
			col := fastMod(h1+uint64(r)*h2, d.snd.cmod, C)
			for o := 0; o < k; o++ {
				c := col + uint64(o)
				if c >= C {
					c -= C
				}
				gi := uint64(r)*C + c
				id := cmap[gi]
				if id < 0 {
					id = int32(len(em.cDef))
					cmap[gi] = id
					em.cDef = append(em.cDef, max(0, float64(d.pairs[gi].n-d.pairs[gi].rn)))
				}
				a := w * d.rate[r] / float64(k)
				if em.seen[j] {
					a = w * float64(flows[i].Cells[r*k+o])
				}
				if a == 0 {
					continue // adds nothing to the EM sums
				}
				em.ec = append(em.ec, id)
				em.ea = append(em.ea, a)
			}
		}
		em.eStart[j+1] = int32(len(em.ec))
		// Unknown: odds θ (seen) or lost packets ℓ (never seen).
		scale := 1.0
		if em.seen[j] {
			scale = 1 / recv
		}
		em.ub[j] = math.Inf(1)
		if len(d.exact) > 0 {
			em.ub[j] = warm[i].Loss * scale
		}
		em.th[j] = min(em.ub[j], rho*scale/max(1e-300, scaleOdds(em.seen[j], recv)))
		// A step is in lost packets: odds times the packets delivered for
		// a seen flow, packets already for one never seen.
		em.stepScale[j] = 1
		if em.seen[j] {
			em.stepScale[j] = recv
		}
	}
	return em
}

// compact numbers the cells with a deficit compactly and keeps only the
// entries in them. A cell without a deficit adds a·0/m = +0 to a flow's
// share: only the entries in cells with a deficit take part in the
// iterations; the denominators are fixed. The iterations touch only those
// cells (at 0.1 % loss ~2 % of the candidates' cells): numbered compactly,
// their running sums stay in L1 and the per-iteration clear is small.
func (em *lossEM) compact() {
	n := len(em.th)
	nAct := 0
	for j := range n {
		for e := em.eStart[j]; e < em.eStart[j+1]; e++ {
			em.den[j] += em.ea[e]
			if em.cDef[em.ec[e]] > 0 {
				nAct++
			}
		}
	}
	em.actStart = make([]int32, n+1)
	em.actC = make([]int32, 0, nAct)
	em.actA = make([]float64, 0, nAct)
	defID := make([]int32, len(em.cDef))
	for j := range n {
		for e := em.eStart[j]; e < em.eStart[j+1]; e++ {
			if c := em.ec[e]; em.cDef[c] > 0 {
				if defID[c] == 0 {
					em.def = append(em.def, em.cDef[c])
					defID[c] = int32(len(em.def)) // id + 1
				}
				em.actC = append(em.actC, defID[c]-1)
				em.actA = append(em.actA, em.ea[e])
			}
		}
		em.actStart[j+1] = int32(len(em.actC))
	}
}

// update returns candidate j's new value given its share num.
func (em *lossEM) update(j int, num float64) float64 {
	var nt float64
	if em.seen[j] {
		nt = (em.th[j]*num + em.pa) / (em.den[j] + em.pb)
	} else if em.den[j] > 0 {
		nt = em.th[j] * num / em.den[j]
	}
	return min(em.ub[j], nt)
}

// run iterates the EM at most iters times. A candidate with no entry in a
// cell with a deficit gets num = 0 in every iteration: it takes its final
// value, the prior's share (seen) or 0 (never seen), in the first and
// keeps it. Only the others iterate (about half of the candidates with a
// positive bound in the benchmark's 150k flows at 0.1 % loss); their first
// iteration's largest step includes the fixed ones', so the stopping rule
// sees what it saw over every candidate and the result is bit for bit that
// of iterating them all.
func (em *lossEM) run(iters int) {
	th := em.th
	var movedFixed float64
	act := make([]int32, 0, len(th))
	for j := range th {
		if em.actStart[j+1] > em.actStart[j] {
			act = append(act, int32(j))
			continue
		}
		nt := em.update(j, 0)
		movedFixed = max(movedFixed, math.Abs(nt-th[j])*em.stepScale[j])
		th[j] = nt
	}
	mean := make([]float64, len(em.def))
	for it := 0; it < iters; it++ {
		clear(mean)
		for _, j := range act {
			for e := em.actStart[j]; e < em.actStart[j+1]; e++ {
				mean[em.actC[e]] += em.actA[e] * th[j]
			}
		}
		var moved float64
		if it == 0 {
			moved = movedFixed
		}
		for _, j := range act {
			var num float64
			for e := em.actStart[j]; e < em.actStart[j+1]; e++ {
				c := em.actC[e]
				if m := mean[c]; m > 0 {
					num += em.actA[e] * em.def[c] / m
				}
			}
			nt := em.update(int(j), num)
			if step := math.Abs(nt-th[j]) * em.stepScale[j]; step > moved {
				moved = step
			}
			th[j] = nt
		}
		// Converged when no flow's lost packets move by a thousandth of a
		// packet: finer is below what a count can mean.
		if moved < 1e-3 {
			break
		}
	}
}

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
