package sketch

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// compositions builds what the receiver keeps, exactly as internal/interval
// does: per received packet, the row's cell and its offset in the flow's
// vLDA. Flows in keys with no received packet get all-zero counts.
func compositions(rcv *LDS, keys []uint64, pkts []pk) []FlowComposition {
	p := rcv.Params()
	R, k, C := p.Rows, p.VLDA, p.Columns
	idx := make(map[uint64]int, len(keys))
	out := make([]FlowComposition, len(keys))
	for i, f := range keys {
		idx[f] = i
		out[i] = FlowComposition{Flow: f, Cells: make([]uint32, R*k)}
	}
	var buf []int32
	for _, x := range pkts {
		i, ok := idx[x.flow]
		if !ok {
			continue
		}
		out[i].Weight = float64(x.w)
		buf = rcv.Positions(x.flow, x.hash, buf)
		for r, pos := range buf {
			if pos < 0 {
				continue
			}
			first, _ := rcv.FlowCells(x.flow, r)
			off := (int(pos) - r*C - first + C) % C
			out[i].Cells[r*k+off]++
		}
	}
	return out
}

// findFlow draws flow hashes until one satisfies ok on its per-row columns.
func findFlow(t *testing.T, rng *rand.Rand, l *LDS, ok func(cols []int) bool) uint64 {
	t.Helper()
	cols := make([]int, l.Params().Rows)
	for range 1_000_000 {
		f := rng.Uint64()
		for r := range cols {
			cols[r], _ = l.FlowCells(f, r)
		}
		if ok(cols) {
			return f
		}
	}
	t.Fatal("no flow hash with the wanted columns in 10^6 draws")
	return 0
}

// sameCells returns a flow hash that occupies exactly the cells of f in
// every row: same h1, and h2 differing by a multiple of C (keeping parity).
func sameCells(f uint64, C int, j int) uint64 {
	return f + uint64(2*C*j)<<32
}

type flowTruth struct {
	n, sum, sum2 float64
}

func (x flowTruth) mean() float64 { return x.sum / x.n }

func truthOf(pkts []pk) map[uint64]*flowTruth {
	tr := map[uint64]*flowTruth{}
	for _, x := range pkts {
		t := tr[x.flow]
		if t == nil {
			t = &flowTruth{}
			tr[x.flow] = t
		}
		t.n++
		t.sum += float64(x.delay)
		t.sum2 += float64(x.delay) * float64(x.delay)
	}
	return tr
}

// TestDecodeExactRecovery: flows that collide in every row, with
// compositions that separate them, are recovered exactly, where the
// paper's estimator can only report mixtures.
func TestDecodeExactRecovery(t *testing.T) {
	cases := []struct {
		name string
		p    Params
		// flows builds the flow hashes; sizes, means and spreads are per flow.
		flows  func(t *testing.T, rng *rand.Rand, l *LDS) []uint64
		sizes  []int
		means  []float64
		spread float64 // per-packet delay spread (uniform ±spread·mean)
	}{
		{
			// k = 1: every cell holds all of a flow's packets, so any delays
			// work. With C = 12, double hashing lets pairs collide in some
			// rows only: row 0 A=B, row 1 A=C, row 3 A=B=C, row 2 apart.
			// The paper's rule also keeps A's A+B cell (within 1+α of its
			// own), so it is biased; the decoder is exact.
			name: "three flows k=1 random delays",
			p:    Params{Rows: 4, Columns: 12, VLDA: 1},
			flows: func(t *testing.T, rng *rand.Rand, l *LDS) []uint64 {
				a := findFlow(t, rng, l, func([]int) bool { return true })
				ca := make([]int, 4)
				for r := range ca {
					ca[r], _ = l.FlowCells(a, r)
				}
				b := findFlow(t, rng, l, func(c []int) bool {
					return c[0] == ca[0] && c[1] != ca[1] && c[2] != ca[2] && c[3] == ca[3]
				})
				c := findFlow(t, rng, l, func(c []int) bool {
					return c[0] != ca[0] && c[1] == ca[1] && c[2] != ca[2] && c[3] == ca[3]
				})
				return []uint64{a, b, c}
			},
			sizes:  []int{4000, 37, 500},
			means:  []float64{2e5, 1.5e6, 7e5},
			spread: 0.5,
		},
		{
			// k = 3: two flows in the same cells of every row; the random
			// vLDA offsets give each cell different proportions. Each flow
			// has one delay, so every equation is exact.
			name: "two flows same cells k=3 constant delays",
			p:    Params{Rows: 4, Columns: 50, VLDA: 3},
			flows: func(t *testing.T, rng *rand.Rand, l *LDS) []uint64 {
				a := rng.Uint64()
				return []uint64{a, sameCells(a, 50, 1)}
			},
			sizes: []int{300, 90},
			means: []float64{1e5, 9e5},
		},
		{
			name: "three flows same cells multi-bank k=2 constant delays",
			p:    Params{Rows: 4, Columns: 40, VLDA: 2, Sampling: []float64{0.5, 0.7, 1, 1}},
			flows: func(t *testing.T, rng *rand.Rand, l *LDS) []uint64 {
				a := rng.Uint64()
				return []uint64{a, sameCells(a, 40, 1), sameCells(a, 40, 2)}
			},
			sizes: []int{400, 200, 120},
			means: []float64{3e5, 1e6, 5e4},
		},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci), 77))
			l, err := NewLDS(c.p)
			if err != nil {
				t.Fatal(err)
			}
			keys := c.flows(t, rng, l)
			var pkts []pk
			for i, f := range keys {
				for range c.sizes[i] {
					d := c.means[i] * (1 + c.spread*(2*rng.Float64()-1))
					pkts = append(pkts, pk{flow: f, hash: rng.Uint64(), ts: rng.Int64N(1e9), delay: int64(d), w: 1, size: 100})
				}
			}
			snd, rcv := build(t, c.p, pkts, pkts)
			tr := truthOf(pkts)
			comp := compositions(rcv, keys, pkts)
			// A negligible prior: the equations alone determine the flows,
			// so the solution must be exact. The default prior shrinks
			// toward the interval mean a little; its CI must cover.
			exact, err := EstimateDecode(snd, rcv, comp, DecodeOptions{PriorWeight: 1e-12})
			if err != nil {
				t.Fatal(err)
			}
			dec, err := EstimateDecode(snd, rcv, comp, DecodeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pap, _ := EstimatePaper(snd, rcv, keys, EstimateOptions{})
			var paperWrong bool
			for i, e := range exact {
				want := tr[keys[i]].mean()
				t.Logf("flow %d: truth %.3f decode %.6f, default prior %.3f ± %.3g (identified %v), paper %.3f", i, want, e.Delay, dec[i].Delay, dec[i].CI95, dec[i].Identified, pap[i].Delay)
				if math.Abs(e.Delay-want) > 1e-6*want {
					t.Errorf("flow %d: decoded delay %.6f, exact mean %.6f", i, e.Delay, want)
				}
				// Only k = 1 without sampling makes the cells exact in the
				// decoder's own noise model; with k > 1 it must assume each
				// cell's share of a flow is a noisy sample of its delays (it
				// cannot know they are constant here), so there only the
				// negligible-prior solution is asserted.
				if c.p.VLDA == 1 && (!dec[i].Identified || !(math.Abs(dec[i].Delay-want) <= dec[i].CI95)) {
					t.Errorf("flow %d: default prior: delay %.3f CI95 %v identified %v; must be identified and cover %.3f", i, dec[i].Delay, dec[i].CI95, dec[i].Identified, want)
				}
				if e.Loss != 0 || e.Packets != tr[keys[i]].n || e.Samples != tr[keys[i]].n {
					t.Errorf("flow %d: loss %v packets %v samples %v, want 0 and %v", i, e.Loss, e.Packets, e.Samples, tr[keys[i]].n)
				}
				if math.Abs(pap[i].Delay-want) > 1e-3*want {
					paperWrong = true
				}
			}
			if !paperWrong {
				t.Error("the paper's estimator is exact here too: the case does not exercise the decoder")
			}
		})
	}
}

// TestDecodeRankDeficient: two flows in the same cells of every row with
// k = 1 are in the same proportion everywhere; only their combined delay is
// known. Both fall back to the prior (here the interval mean, which is
// exactly their combined mean), say they are not identified, and give no CI.
func TestDecodeRankDeficient(t *testing.T) {
	p := Params{Rows: 4, Columns: 64, VLDA: 1}
	rng := rand.New(rand.NewPCG(5, 6))
	a := rng.Uint64()
	keys := []uint64{a, sameCells(a, 64, 1)}
	var pkts []pk
	for i, f := range keys {
		for range 200 + 300*i {
			pkts = append(pkts, pk{flow: f, hash: rng.Uint64(), ts: rng.Int64N(1e9), delay: int64(1e5 + 8e5*float64(i) + 1e4*rng.NormFloat64()), w: 1, size: 100})
		}
	}
	snd, rcv := build(t, p, pkts, pkts)
	var sum float64
	for _, x := range pkts {
		sum += float64(x.delay)
	}
	interval := sum / float64(len(pkts))
	dec, err := EstimateDecode(snd, rcv, compositions(rcv, keys, pkts), DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range dec {
		if e.Identified || !math.IsNaN(e.CI95) {
			t.Errorf("flow %d: identified %v CI95 %v; want not identified, CI NaN", i, e.Identified, e.CI95)
		}
		if math.Abs(e.Delay-interval) > 1e-6*interval {
			t.Errorf("flow %d: delay %.3f, want the prior (interval mean %.3f)", i, e.Delay, interval)
		}
		if e.Usable != 4 {
			t.Errorf("flow %d: usable %d, want 4", i, e.Usable)
		}
	}
}

// TestDecodeSimulated compares both estimators per flow-size bin on the
// simulated traffic of TestSimulatedTraffic, against the exact per-flow
// means of the received packets.
func TestDecodeSimulated(t *testing.T) {
	nFlows := 8000
	if testing.Short() {
		nFlows = 3000
	}
	mb := []float64{0.01, 0.1, 0.5, 1}
	bins := []struct {
		name   string
		lo, hi int
	}{{">=1000", 1000, 1 << 30}, {"100-999", 100, 999}, {"10-99", 10, 99}}
	cases := []struct {
		name  string
		p     Params
		loss  float64
		heavy float64 // fraction of flows with 5 % loss
		slack float64
		// required ratio paper/decode of the median error per bin (0: none)
		ratio []float64
	}{
		{name: "paper load 2 flows/counter k=1", p: Params{Rows: 4, Columns: nFlows / 8, VLDA: 1}, ratio: []float64{5, 3, 1}},
		{name: "10x memory k=1", p: Params{Rows: 4, Columns: 10 * nFlows / 8, VLDA: 1}, ratio: []float64{5, 3, 1}},
		{name: "0.2% loss + 5% lossy flows, multi-bank k=5", p: Params{Rows: 4, Columns: 5 * nFlows / 8, VLDA: 5, Sampling: mb}, loss: 0.002, heavy: 0.01, ratio: []float64{3, 1, 1}},
		{name: "same, paper with slack 2", p: Params{Rows: 4, Columns: 5 * nFlows / 8, VLDA: 5, Sampling: mb}, loss: 0.002, heavy: 0.01, slack: 2, ratio: []float64{1, 1, 1}},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sndP, rcvP, flows := simulateLossy(uint64(300+ci), nFlows, c.loss, c.heavy)
			snd, rcv := build(t, c.p, sndP, rcvP)
			keys := make([]uint64, len(flows))
			for i, f := range flows {
				keys[i] = f.hash
			}
			comp := compositions(rcv, keys, rcvP)
			pap, err := EstimatePaper(snd, rcv, keys, EstimateOptions{SamplingSlack: c.slack})
			if err != nil {
				t.Fatal(err)
			}
			dec, err := EstimateDecode(snd, rcv, comp, DecodeOptions{Paper: EstimateOptions{SamplingSlack: c.slack}})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d flows, %d sent, %d received, usable cell ratio %.3f", len(flows), len(sndP), len(rcvP), UsableCellRatio(snd, rcv))
			for b, bn := range bins {
				var pe, de, le, lp []float64
				var ident, covered, n int
				for i, f := range flows {
					if f.recv < bn.lo || f.recv > bn.hi {
						continue
					}
					n++
					lp = append(lp, math.Abs(pap[i].Loss-float64(f.sent-f.recv)))
					le = append(le, math.Abs(dec[i].Loss-float64(f.sent-f.recv)))
					if math.IsNaN(pap[i].Delay) || math.IsNaN(dec[i].Delay) {
						continue
					}
					pe = append(pe, math.Abs(pap[i].Delay-f.mean)/f.mean)
					de = append(de, math.Abs(dec[i].Delay-f.mean)/f.mean)
					if dec[i].Identified {
						ident++
						if math.Abs(dec[i].Delay-f.mean) <= dec[i].CI95 {
							covered++
						}
					}
				}
				mp, md := median(pe), median(de)
				t.Logf("  %-8s %5d flows (%d both estimated): paper median %.5f p95 %.5f | decode median %.5f p95 %.5f | ratio %.1f | identified %d, CI95 coverage %.3f | loss abs err median/mean paper %.2f/%.2f decode %.2f/%.2f",
					bn.name, n, len(pe), mp, quantile(pe, 0.95), md, quantile(de, 0.95), mp/md, ident, float64(covered)/float64(max(1, ident)),
					median(lp), mean(lp), median(le), mean(le))
				if len(pe) < 5 {
					t.Fatalf("bin %s: only %d flows; the simulation is too small", bn.name, len(pe))
				}
				if r := c.ratio[b]; !(mp >= r*md) {
					t.Errorf("bin %s: paper median %.5f / decode median %.5f = %.2f, want >= %v", bn.name, mp, md, mp/md, r)
				}
				if ident >= 20 && float64(covered) < 0.8*float64(ident) {
					t.Errorf("bin %s: CI95 covers the truth for only %d of %d identified flows", bn.name, covered, ident)
				}
			}
		})
	}
}

// simulateLossy is simulate with a fraction of flows losing 5 % of their
// packets on top of the uniform loss.
func simulateLossy(seed uint64, nFlows int, loss, heavy float64) (snd, rcv []pk, flows []*simFlow) {
	if heavy == 0 {
		return simulate(seed, nFlows, loss)
	}
	snd, _, flows = simulate(seed, nFlows, 0)
	rng := rand.New(rand.NewPCG(seed, 99))
	lossy := map[uint64]bool{}
	byHash := map[uint64]*simFlow{}
	for _, f := range flows {
		byHash[f.hash] = f
		lossy[f.hash] = rng.Float64() < heavy
		f.recv, f.sumD, f.sumD2 = 0, 0, 0
	}
	for _, x := range snd {
		pl := loss
		if lossy[x.flow] {
			pl = 0.05
		}
		if rng.Float64() < pl {
			continue
		}
		rcv = append(rcv, x)
		f := byHash[x.flow]
		f.recv++
		f.sumD += float64(x.delay)
		f.sumD2 += float64(x.delay) * float64(x.delay)
	}
	for _, f := range flows {
		f.mean, f.stddev = 0, 0
		if f.recv > 0 {
			f.mean = f.sumD / float64(f.recv)
			f.stddev = math.Sqrt(max(0, f.sumD2/float64(f.recv)-f.mean*f.mean))
		}
	}
	return snd, rcv, flows
}

func quantile(x []float64, q float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := slices.Clone(x)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func mean(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(max(1, len(x)))
}

func TestDecodeOptionsAndInputErrors(t *testing.T) {
	p := Params{Rows: 2, Columns: 8, VLDA: 2}
	snd, _ := NewLDS(p)
	rcv, _ := NewLDS(p)
	other, _ := NewLDS(Params{Rows: 2, Columns: 9, VLDA: 2})
	ok := []FlowComposition{{Flow: 1, Cells: make([]uint32, 4)}}
	cases := []struct {
		name     string
		snd, rcv *LDS
		flows    []FlowComposition
		opt      DecodeOptions
		wantErr  bool
	}{
		{"defaults", snd, rcv, ok, DecodeOptions{}, false},
		{"negative iterations", snd, rcv, ok, DecodeOptions{MaxIter: -1}, true},
		{"tolerance 1", snd, rcv, ok, DecodeOptions{Tol: 1}, true},
		{"NaN prior", snd, rcv, ok, DecodeOptions{PriorWeight: math.NaN()}, true},
		{"negative alpha", snd, rcv, ok, DecodeOptions{Paper: EstimateOptions{Alpha: -1}}, true},
		{"short composition", snd, rcv, []FlowComposition{{Flow: 1, Cells: make([]uint32, 3)}}, DecodeOptions{}, true},
		{"negative weight", snd, rcv, []FlowComposition{{Flow: 1, Cells: make([]uint32, 4), Weight: -2}}, DecodeOptions{}, true},
		{"different sketches", snd, other, ok, DecodeOptions{}, true},
		{"nil sketch", nil, rcv, ok, DecodeOptions{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := EstimateDecode(c.snd, c.rcv, c.flows, c.opt)
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v, want error %v", err, c.wantErr)
			}
			if err == nil && (len(out) != 1 || !math.IsNaN(out[0].Delay) || out[0].Identified) {
				t.Fatalf("empty sketches: %+v, want no delay and not identified", out)
			}
		})
	}
}

// FuzzEstimateDecode feeds arbitrary packets, losses and (possibly
// inconsistent) compositions: the decoder must not panic and must return
// one sane estimate per flow.
func FuzzEstimateDecode(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, uint8(1), uint8(0))
	f.Add([]byte("a longer seed with several flows and packets in it"), uint8(5), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, k uint8, mode uint8) {
		p := Params{Rows: 3, Columns: 7, VLDA: 1 + int(k%4)}
		if mode&1 == 1 {
			p.Sampling = []float64{0.5, 1, 0.25}
		}
		snd, err := NewLDS(p)
		if err != nil {
			t.Skip(err)
		}
		rcv, _ := NewLDS(p)
		nF := 1 + len(data)%5
		keys := make([]uint64, nF)
		for i := range keys {
			keys[i] = uint64(i+1) * 0x9e3779b97f4a7c15
		}
		var pkts []pk
		for i, b := range data {
			x := pk{flow: keys[int(b)%nF], hash: uint64(i) * 0xff51afd7ed558ccd, ts: int64(i), delay: int64(b) * 1000, w: 1, size: 100}
			snd.Update(x.flow, x.hash, x.ts, 1, 100)
			if b%7 == 0 { // lost
				continue
			}
			rcv.Update(x.flow, x.hash, x.ts+x.delay, 1, 100)
			pkts = append(pkts, x)
		}
		comp := compositions(rcv, keys, pkts)
		if mode&2 == 2 && len(data) > 0 { // corrupt a count
			comp[0].Cells[int(data[0])%len(comp[0].Cells)] += uint32(data[0])
		}
		out, err := EstimateDecode(snd, rcv, comp, DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != nF {
			t.Fatalf("%d estimates for %d flows", len(out), nF)
		}
		for i, e := range out {
			if math.IsInf(e.Delay, 0) || e.Loss < 0 || math.IsNaN(e.Loss) || e.CI95 < 0 || (e.Identified && math.IsNaN(e.Delay)) {
				t.Fatalf("flow %d: %+v", i, e)
			}
		}
	})
}

// TestDecodeAndPaperMatchesPaper: the paper estimates EstimateDecodeAndPaper
// hands back are EstimatePaper's, flow weights included, and its decoded
// ones are EstimateDecode's.
func TestDecodeAndPaperMatchesPaper(t *testing.T) {
	p := Params{Rows: 4, Columns: 300, VLDA: 3, Sampling: []float64{0.5, 1, 1, 1}}
	sndP, rcvP, flows := simulateLossy(77, 2000, 0.01, 0.01)
	for i := range sndP {
		if sndP[i].flow%3 == 0 { // a third of the flows weigh 4
			sndP[i].w = 4
		}
	}
	for i := range rcvP {
		if rcvP[i].flow%3 == 0 {
			rcvP[i].w = 4
		}
	}
	snd, rcv := build(t, p, sndP, rcvP)
	keys := make([]uint64, len(flows))
	for i, f := range flows {
		keys[i] = f.hash
	}
	comp := compositions(rcv, keys, rcvP)
	weight := func(f uint64) float64 {
		if f%3 == 0 {
			return 4
		}
		return 1
	}
	for i := range comp {
		comp[i].Weight = weight(comp[i].Flow)
	}
	opt := EstimateOptions{Weight: weight}
	dec, pap, err := EstimateDecodeAndPaper(snd, rcv, comp, DecodeOptions{Paper: opt})
	if err != nil {
		t.Fatal(err)
	}
	wantPap, err := EstimatePaper(snd, rcv, keys, opt)
	if err != nil {
		t.Fatal(err)
	}
	wantDec, err := EstimateDecode(snd, rcv, comp, DecodeOptions{Paper: opt})
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b FlowEstimate) bool {
		eq := func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }
		return eq(a.Delay, b.Delay) && eq(a.Stddev, b.Stddev) && eq(a.CI95, b.CI95) && eq(a.Loss, b.Loss) &&
			eq(a.Packets, b.Packets) && a.Identified == b.Identified
	}
	weighted := 0
	for i := range keys {
		if keys[i]%3 == 0 && !math.IsNaN(pap[i].Delay) {
			weighted++
		}
		if !same(pap[i], wantPap[i]) {
			t.Fatalf("flow %d: paper estimate %+v, EstimatePaper %+v", i, pap[i], wantPap[i])
		}
		if !same(dec[i], wantDec[i]) {
			t.Fatalf("flow %d: decoded %+v, EstimateDecode %+v", i, dec[i], wantDec[i])
		}
	}
	if weighted < 100 {
		t.Fatalf("only %d weighted flows with an estimate: the weights are not exercised", weighted)
	}
}

// lossyMultibank is 16,000 simulated flows with 0.2 % loss (1 % of the
// flows at 5 %) on a k = 5 multi-bank sketch, both ends and the
// receiver's compositions: enough for every parallel path of decode.
func lossyMultibank(t *testing.T) (snd, rcv *LDS, comp []FlowComposition) {
	t.Helper()
	p := Params{Rows: 4, Columns: 2000, VLDA: 5, Sampling: []float64{0.1, 0.5, 1, 1}}
	sndP, rcvP, flows := simulateLossy(91, 16000, 0.002, 0.01)
	snd, rcv = build(t, p, sndP, rcvP)
	keys := make([]uint64, len(flows))
	for i, f := range flows {
		keys[i] = f.hash
	}
	return snd, rcv, compositions(rcv, keys, rcvP)
}

// TestDecodeWorkersSameResult: the parallel stages split work, never
// arithmetic, so every worker count gives the same bits.
func TestDecodeWorkersSameResult(t *testing.T) {
	snd, rcv, comp := lossyMultibank(t)
	// grain 1: every parallel stage splits even these 16,000 flows.
	one, err := EstimateDecode(snd, rcv, comp, DecodeOptions{Workers: 1, grain: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []int{2, 3, 8} {
		got, err := EstimateDecode(snd, rcv, comp, DecodeOptions{Workers: w, grain: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			a, b := got[i], one[i]
			if math.Float64bits(a.Delay) != math.Float64bits(b.Delay) || math.Float64bits(a.CI95) != math.Float64bits(b.CI95) ||
				math.Float64bits(a.Stddev) != math.Float64bits(b.Stddev) || a.Loss != b.Loss || a.Identified != b.Identified {
				t.Fatalf("workers %d, flow %d: %+v, with one worker %+v", w, i, a, b)
			}
		}
	}
}
