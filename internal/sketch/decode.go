package sketch

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// Receiver-side decoding (the model, the choices behind it and their
// measurements are in docs/decode.md). The receiver counted every packet it put into its
// sketch, so for each candidate flow it knows how many of its packets sit in
// each of its R·k cells. On a usable cell (same packet set at both ends)
//
//	ΔS_c = Σ_f a_fc·δ_f + e_c,   a_fc = w_f·n_fc,
//
// with δ_f the flow's mean delay and e_c the deviation of the cell's subset
// of each flow from that flow's mean. EstimateDecode solves the weighted
// least-squares problem over all usable cells with a Gaussian prior
// δ_f ~ N(μ, τ²/PriorWeight) (μ, τ² from the interval), which is the
// posterior mean of the flows' delays. Stddev and loss are decoded the same
// way from the signed sums and the count deficits.

// FlowComposition is what the receiver knows exactly about one candidate flow.
type FlowComposition struct {
	Flow   uint64   // flow hash
	Cells  []uint32 // len R*k: packets of this flow that row r sampled at vLDA offset o, index r*k+o (0s for a flow the receiver never saw)
	Weight float64  // the flow's weight w (0 or 1 = unweighted)
}

// DecodeOptions tune EstimateDecode. The zero value is the default.
type DecodeOptions struct {
	// Paper configures the Fig. 6 estimate used as warm start and for what
	// the composition cannot tell (bytes, usable-cell counts). Its Weight
	// function is ignored: FlowComposition.Weight is used instead.
	Paper EstimateOptions
	// MaxIter bounds the conjugate-gradient iterations of each solve;
	// 0 means DefaultDecodeMaxIter.
	MaxIter int
	// Tol is the relative residual (preconditioned norm) at which a solve
	// stops; 0 means DefaultDecodeTol.
	Tol float64
	// PriorWeight scales the prior's precision: the flows' mean delays are
	// taken as N(μ, τ²/PriorWeight), μ the interval's mean delay and τ² the
	// spread of flow means in the interval (estimated from the data).
	// 1 (the default, used for 0) is the empirical-Bayes prior; larger pulls
	// poorly identified flows harder toward μ, smaller trusts the cells more.
	PriorWeight float64
	// Workers bounds the goroutines of the per-flow stages (the warm
	// start and the identification); 0 means GOMAXPROCS. The results do
	// not depend on it.
	Workers int

	// grain is the fewest flows (or loss candidates) a goroutine gets
	// (0 = minChunk); tests lower it so that small inputs take the
	// parallel paths.
	grain int
}

// Defaults of DecodeOptions.
const (
	DefaultDecodeMaxIter = 400
	DefaultDecodeTol     = 1e-10
	DefaultPriorWeight   = 1.0
)

// identifiedFraction: a flow counts as identified when the data leave at
// most this fraction of the prior variance τ² (posterior sd <= τ/√10).
const identifiedFraction = 0.1

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

// warmRun: the flows a warm-start goroutine claims at a time.
const warmRun = 2048

// Validate reports every problem at once.
func (o DecodeOptions) Validate() error {
	var errs []error
	if _, err := o.Paper.alpha(); err != nil {
		errs = append(errs, err)
	}
	if o.MaxIter < 0 {
		errs = append(errs, fmt.Errorf("decode max iterations %d: must be >= 0 (0 = default %d)", o.MaxIter, DefaultDecodeMaxIter))
	}
	if math.IsNaN(o.Tol) || o.Tol < 0 || o.Tol >= 1 {
		errs = append(errs, fmt.Errorf("decode tolerance %v: must be in [0, 1) (0 = default %g)", o.Tol, DefaultDecodeTol))
	}
	if o.Workers < 0 {
		errs = append(errs, fmt.Errorf("decode workers %d: must be >= 0 (0 = GOMAXPROCS)", o.Workers))
	}
	if math.IsNaN(o.PriorWeight) || math.IsInf(o.PriorWeight, 0) || o.PriorWeight < 0 {
		errs = append(errs, fmt.Errorf("decode prior weight %v: must be a finite number >= 0 (0 = default %g)", o.PriorWeight, DefaultPriorWeight))
	}
	return errors.Join(errs...)
}

func (o DecodeOptions) normalized() DecodeOptions {
	if o.MaxIter == 0 {
		o.MaxIter = DefaultDecodeMaxIter
	}
	if o.Tol == 0 {
		o.Tol = DefaultDecodeTol
	}
	if o.PriorWeight == 0 {
		o.PriorWeight = DefaultPriorWeight
	}
	return o
}

// lsDecoder holds the sparse system of one EstimateDecode call.
//
// Flows are renumbered internally (perm: internal -> caller's index, inv:
// the reverse) in order of their number of equations, flows with none last
// (nA flows have at least one): the solver's per-flow loops then have
// runs of equal trip counts, which the branch predictor follows (the
// conjugate gradients run about twice as fast as in the caller's order;
// docs/decode.md, "Time"), and flows with no equation stay out of the
// solver.
type lsDecoder struct {
	snd, rcv *LDS
	rows, k  int
	cols     uint64
	rate     []float64
	usable   []bool     // per sketch cell: non-empty and usable (the paper estimator's)
	pairs    []cellPair // per sketch cell: both ends' sums and counts (the paper estimator's)
	exact    []int      // rows with p = 1
	opt      DecodeOptions
	workers  int
	grain    int         // see DecodeOptions.grain
	cgJoin   func() bool // non-nil: CG starts on one goroutine, other work alongside, and pairs up once this says that work is done

	perm, inv []int32
	nA        int // flows with at least one equation: internal 0..nA-1

	// per flow (internal order)
	w      []float64 // weight
	recv   []float64 // received packets (exact with a p = 1 row)
	smp    []float64 // packets in usable cells, best row
	fStart []int32   // entries of flow f: fStart[f]..fStart[f+1]

	// per entry (flow f in usable cell c), flow-major
	eCell []int32
	eA    []float64 // a = w·n
	eB    []float64 // w²·n: coefficient of σ_f² in the variance equations

	// per usable cell touched by a candidate
	cGlob  []int32
	cY     []float64   // ΔS
	cN     []float64   // Σw (both ends)
	cSPM   []float64   // ΔSPM
	cSN    []float64   // SN
	cMiss  []float64   // weighted packets from flows not among the candidates
	cV     []float64   // noise variance of ΔS
	cStart []int32     // cell-major: entries cE[cStart[c]..cStart[c+1]], in flow-major order
	cE     []cellEntry // 32 bytes an entry: written at random once, then read in order

	mu, tau2, sig2 float64          // prior mean, spread of flow means, typical packet variance
	lam            []float64        // prior precision of each flow's mean: PriorWeight/(τ² + σ_f²/N_f)
	iters          [3]int           // CG iterations of the three solves (tests, docs)
	stages         [7]time.Duration // wall time of build, warm start, first solve, variances, final solve, identification, loss (benchmarks)

	aloneOK  []bool    // per solver flow: alone in its cells of some p = 1 row (findAlone)
	aloneVal []float64 // its exact mean delay then

	x    []float64 // δ_f - μ
	varF []float64 // σ_f²
	post []float64 // posterior variance of δ_f

	// scratch: right-hand side and weights of a solve (per cell), pcg's
	// vectors (per solver flow) and a median buffer
	y, wgt                  []float64
	r, z, p, q, diag, t, t2 []float64
	buf                     []float64
}

// EstimateDecode estimates every candidate flow from both sketches and the
// receiver's exact composition of its own cells. Results are in the order of
// flows and fill the same fields as EstimatePaper; Identified says whether
// the cells pin the flow's delay down (if not, Delay is the posterior mean,
// close to the interval's mean delay, and CI95 is NaN). A flow with no
// usable cell gets Delay NaN, as with EstimatePaper.
//
// The composition must come from the same receiver sketch: a flow's counts
// are of the packets each row sampled, indexed r*k + vLDA offset. Flows
// must be distinct; a cell whose candidates claim more packets than it
// holds is left out.
func EstimateDecode(snd, rcv *LDS, flows []FlowComposition, opt DecodeOptions) ([]FlowEstimate, error) {
	_, out, err := estimateDecode(snd, rcv, flows, opt, nil)
	return out, err
}

// EstimateDecodeAndPaper is EstimateDecode that also returns the paper's
// estimate of every flow (EstimatePaper with each flow's weight), which
// the decoder computes anyway as its warm start: a caller that wants both
// (the receiver publishes the paper's value where decode cannot separate a
// flow) spares a second pass.
func EstimateDecodeAndPaper(snd, rcv *LDS, flows []FlowComposition, opt DecodeOptions) (dec, paper []FlowEstimate, err error) {
	paper = make([]FlowEstimate, len(flows))
	_, dec, err = estimateDecode(snd, rcv, flows, opt, paper)
	if err != nil {
		return nil, nil, err
	}
	return dec, paper, nil
}

// estimateDecode is EstimateDecode, also returning the solved system (for
// tests); a non-nil paper (len(flows)) receives the paper's estimates.
//
// The stages run in a fixed order; two steps run stages side by side
// (planDecode says how the workers are shared). Every stage computes each
// of its values on one goroutine with the arithmetic of one loop, and its
// reductions in a fixed order, so the results are the same bits for any
// worker count and any scheduling (TestDecodeGolden).
func estimateDecode(snd, rcv *LDS, flows []FlowComposition, opt DecodeOptions, paper []FlowEstimate) (*lsDecoder, []FlowEstimate, error) {
	if err := opt.Validate(); err != nil {
		return nil, nil, fmt.Errorf("decode: %w", err)
	}
	opt = opt.normalized()
	pe, err := newEstimator(snd, rcv, opt.Paper)
	if err != nil {
		return nil, nil, err
	}
	pe.pairCells(decodeWorkers(opt.Workers))
	d := &lsDecoder{snd: snd, rcv: rcv, rows: snd.rows, k: int(snd.k), cols: snd.cols, rate: pe.rate, usable: pe.ok, pairs: pe.pairs, opt: opt,
		workers: decodeWorkers(opt.Workers), grain: cmp.Or(opt.grain, minChunk)}
	for r := range d.rate {
		if snd.thr[r] == 1<<32 {
			d.exact = append(d.exact, r)
		}
	}
	plan := planDecode(d.workers)
	clock := stageClock{d: d, t0: time.Now()}
	out, err := d.buildAndWarm(pe, flows, plan, &clock)
	if err != nil {
		return nil, nil, err
	}
	copy(paper, out)
	clock.lap(1)
	d.prior(out)
	d.solveDelay(out, false)
	d.respread()
	clock.lap(2)
	d.solveVariance(out)
	clock.lap(3)
	loss := d.finalStages(flows, out, plan, &clock)
	clock.lap(6)
	d.results(out, loss)
	return d, out, nil
}

// stageClock records the wall time of each stage in d.stages (benchmarks).
type stageClock struct {
	d  *lsDecoder
	t0 time.Time
}

// lap ends stage i.
func (c *stageClock) lap(i int) {
	t := time.Now()
	c.d.stages[i] = t.Sub(c.t0)
	c.t0 = t
}

// decodePlan shares the workers among the stages that run side by side.
type decodePlan struct {
	// together: build runs alongside the warm start, on buildWorkers of
	// them, the warm start on warmWorkers; build's goroutine joins the
	// warm start when build is done. Otherwise build runs first on all.
	together                  bool
	buildWorkers, warmWorkers int
	// side: the identification (on idWorkers) and the loss EM run
	// alongside the final delay solve, which holds one worker; lossAlone:
	// the loss EM has a goroutine of its own, otherwise it runs first on
	// the identification's. Otherwise the three run one after the other.
	side      bool
	idWorkers int
	lossAlone bool
}

// planDecode shares workers. The warm start needs only the sketches, so
// with two workers or more it runs alongside build, each on half of them
// (both are loops over the flows, and side by side neither waits at the
// other's joins). The identification needs the final noise model and
// priors, not the final means, and the loss EM only the compositions and
// the warm start: both run alongside the final solve, which then runs on
// one goroutine (its two halves would wait for each other at every step
// behind goroutines that never wait). With one worker left beside the
// solve, the loss EM runs on it first and then the identification: at
// k = 5 the two take about as long as the solve (docs/decode.md, "Time"),
// and a third goroutine would only take turns on the same two cores.
func planDecode(workers int) decodePlan {
	if workers < 2 {
		return decodePlan{buildWorkers: workers, warmWorkers: workers, idWorkers: workers}
	}
	warm := workers / 2
	side := workers - 1
	return decodePlan{
		together: true, buildWorkers: workers - warm, warmWorkers: warm,
		side: true, idWorkers: max(1, side-1), lossAlone: side >= 2,
	}
}

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

// finalStages runs the final delay solve, the identification and the loss
// EM, and returns the loss estimates.
func (d *lsDecoder) finalStages(flows []FlowComposition, out []FlowEstimate, plan decodePlan, clock *stageClock) []float64 {
	var loss []float64
	identify := func() {
		d.findAlone()
		d.identify(plan.idWorkers)
	}
	if !plan.side {
		d.solveDelay(out, true)
		clock.lap(4)
		identify()
		clock.lap(5)
		return d.solveLoss(flows, out)
	}
	d.prepDelay(out, true)
	side := []func(){
		func() { loss = d.solveLoss(flows, out); identify() },
	}
	if plan.lossAlone {
		side = []func(){identify, func() { loss = d.solveLoss(flows, out) }}
	}
	var running atomic.Int32
	running.Store(int32(len(side)))
	// fanOut re-panics a side stage's panic on this goroutine once all
	// have ended.
	fanOut(1+len(side), func(i int) {
		if i > 0 {
			defer running.Add(-1)
			side[i-1]()
			return
		}
		// A long solve (k = 1: ~180 iterations) outlasts the other work:
		// it takes its second goroutine back when that work is done.
		d.cgJoin = func() bool { return running.Load() == 0 }
		defer func() { d.cgJoin = nil }()
		d.runDelay(true)
		clock.lap(4)
	})
	clock.lap(5)
	return loss
}

// results fills out from the solved system and the loss estimates.
func (d *lsDecoder) results(out []FlowEstimate, loss []float64) {
	for i := range out {
		e := &out[i]
		f := int(d.inv[i])
		e.Loss = loss[i]
		e.Packets = d.recv[f] + loss[i]
		e.Samples = d.smp[f]
		e.Identified = false
		if f >= d.nA {
			e.Delay, e.Stddev, e.CI95 = nan, nan, nan
			continue
		}
		e.Delay = d.mu + d.x[f]
		// Stddev stays the paper's per-cell sign-hash estimate (from the
		// warm start): on the paper-shaped trace at the paper's load the
		// decoded variances (d.varF, used for the noise model) collapse to
		// 0 for most mid-size flows, and at 10x memory they are no better
		// (docs/RESULTS.md §5).
		e.CI95 = nan
		if d.post[f] <= identifiedFraction*d.priorVar(f) {
			e.Identified = true
			e.CI95 = z95 * math.Sqrt(d.post[f])
		}
		if d.aloneOK[f] {
			delay := d.aloneVal[f]
			// Every received packet of the flow sits, in some unsampled
			// row, in usable cells holding nothing else: the mean is
			// exact, and the prior must not pull it.
			e.Delay, e.Identified, e.CI95 = delay, true, 0
		}
	}
}

// parallelEntries runs body over the solver's flows [0, n), split into at
// most workers contiguous runs of about equal cost (entries plus one a
// flow): the flows are numbered by equation count, so runs of equal
// flows would leave the last one most of the work (at k = 5, 80 % of the
// entries in the second half).
func (d *lsDecoder) parallelEntries(workers, n int, body func(w, lo, hi int)) {
	workers = max(1, min(workers, n/d.grain))
	fs := d.fStart
	cost := func(f int) int { return int(fs[f]-fs[0]) + f }
	total := cost(n)
	at := func(w int) int {
		if w == workers {
			return n
		}
		return sort.Search(n, func(f int) bool { return cost(f) >= w*total/workers })
	}
	fanOut(workers, func(w int) { body(w, at(w), at(w+1)) })
}

// cellEntry is an entry in cell-major order, with what the per-cell loops
// read.
type cellEntry struct {
	e, f int32   // the entry (flow-major index) and its flow
	a, b float64 // its eA and eB
	v    float64 // w²·n·fpc: coefficient of σ_f² in the noise of ΔS_c
}

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

// variance is the population variance of x (two passes: the values sit far
// from 0 relative to their spread).
func variance(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	m := s / float64(len(x))
	var ss float64
	for _, v := range x {
		ss += (v - m) * (v - m)
	}
	return ss / float64(len(x))
}

func (d *lsDecoder) tauFloor() float64 { return max(1, 1e-6*d.mu*d.mu) }

// madVar is the squared normal-consistent median absolute deviation: a
// variance that a few wild values do not inflate. It overwrites x.
func madVar(x []float64) float64 {
	m := medianInPlace(x)
	for i, v := range x {
		x[i] = math.Abs(v - m)
	}
	s := 1.4826 * medianInPlace(x)
	return s * s
}

// medianInPlace is median (the upper one for an even count) without the
// copy: it reorders x. Quickselect, not a sort: the decoder takes up to six
// medians of 150k values per interval.
func medianInPlace(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	return selectNth(x, len(x)/2)
}

// selectNth reorders x so that x[n] is the element slices.Sort would put
// there (NaN orders first, as in cmp.Less) and returns it: Hoare's
// partition around the median of three, iterating into one side.
func selectNth(x []float64, n int) float64 {
	less := func(a, b float64) bool { return a < b || (a != a && b == b) }
	lo, hi := 0, len(x)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if less(x[mid], x[lo]) {
			x[mid], x[lo] = x[lo], x[mid]
		}
		if less(x[hi], x[lo]) {
			x[hi], x[lo] = x[lo], x[hi]
		}
		if less(x[hi], x[mid]) {
			x[hi], x[mid] = x[mid], x[hi]
		}
		pivot := x[mid]
		i, j := lo, hi
		for i <= j {
			for less(x[i], pivot) {
				i++
			}
			for less(pivot, x[j]) {
				j--
			}
			if i <= j {
				x[i], x[j] = x[j], x[i]
				i++
				j--
			}
		}
		switch {
		case n <= j:
			hi = j
		case n >= i:
			lo = i
		default:
			return x[n]
		}
	}
	return x[n]
}

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
