package sketch

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Receiver-side decoding (the model, the choices behind it and their
// measurements are in docs/decode.md). The receiver counted every packet it
// put into its sketch, so for each candidate flow it knows how many of its
// packets sit in each of its R·k cells. On a usable cell (same packet set at both ends)
//
//	ΔS_c = Σ_f a_fc·δ_f + e_c,   a_fc = w_f·n_fc,
//
// with δ_f the flow's mean delay and e_c the deviation of the cell's subset
// of each flow from that flow's mean. EstimateDecode solves the weighted
// least-squares problem over all usable cells with a Gaussian prior
// δ_f ~ N(μ, τ²/PriorWeight) (μ, τ² from the interval), which is the
// posterior mean of the flows' delays. Stddev and loss are decoded the same
// way from the signed sums and the count deficits.
//
// This file holds the entry points, the decoder's state and the order of
// its stages (estimateDecode); each stage has a file named after what it
// estimates, as docs/decode.md has a section: decode_build.go (the
// system), decode_delay.go, decode_variance.go, decode_identify.go,
// decode_loss.go, and decode_cg.go (the solver).

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
