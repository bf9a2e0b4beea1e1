package sketch

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestParamsValidate(t *testing.T) {
	if err := DefaultParams().Validate(); err != nil {
		t.Fatalf("default params invalid: %v", err)
	}
	cases := []struct {
		name string
		p    Params
		key  string // "" means valid
	}{
		{"default", DefaultParams(), ""},
		{"nil sampling", Params{Rows: 2, Columns: 10, VLDA: 1}, ""},
		{"multi-bank", Params{Rows: 4, Columns: 100, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}}, ""},
		{"zero rows", Params{Rows: 0, Columns: 10, VLDA: 1}, "sketch.rows"},
		{"too many rows", Params{Rows: 65, Columns: 10, VLDA: 1}, "sketch.rows"},
		{"zero columns", Params{Rows: 1, Columns: 0, VLDA: 1}, "sketch.columns"},
		{"too many cells", Params{Rows: 64, Columns: MaxColumns, VLDA: 1}, "sketch.rows * sketch.columns"},
		{"zero vlda", Params{Rows: 1, Columns: 10, VLDA: 0}, "sketch.vlda"},
		{"vlda > columns", Params{Rows: 1, Columns: 4, VLDA: 5}, "sketch.vlda"},
		{"sampling length", Params{Rows: 2, Columns: 4, VLDA: 1, Sampling: []float64{1}}, "sketch.sampling"},
		{"sampling zero", Params{Rows: 1, Columns: 4, VLDA: 1, Sampling: []float64{0}}, "sketch.sampling[0]"},
		{"sampling > 1", Params{Rows: 1, Columns: 4, VLDA: 1, Sampling: []float64{1.5}}, "sketch.sampling[0]"},
		{"sampling NaN", Params{Rows: 1, Columns: 4, VLDA: 1, Sampling: []float64{math.NaN()}}, "sketch.sampling[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Validate()
			if c.key == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.key) {
				t.Fatalf("error %v does not name %q", err, c.key)
			}
			if _, err := NewLDS(c.p); err == nil {
				t.Fatal("NewLDS accepted invalid params")
			}
		})
	}
}

// pk is one simulated packet: send time ts, delay (receive time ts+delay).
type pk struct {
	flow, hash uint64
	ts, delay  int64
	w, size    uint32
}

func build(t testing.TB, p Params, snd, rcv []pk) (*LDS, *LDS) {
	t.Helper()
	a, err := NewLDS(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewLDS(p)
	for _, x := range snd {
		a.Update(x.flow, x.hash, x.ts, x.w, x.size)
	}
	for _, x := range rcv {
		b.Update(x.flow, x.hash, x.ts+x.delay, x.w, x.size)
	}
	return a, b
}

// TestCollisionFreeExact: with no collisions every flow's estimate is its
// exact mean, count and zero loss; the variance estimator is unbiased on
// average over flows.
func TestCollisionFreeExact(t *testing.T) {
	p := Params{Rows: 4, Columns: 1 << 16, VLDA: 1}
	rng := rand.New(rand.NewPCG(10, 11))
	l, _ := NewLDS(p)
	// Draw flows until none shares a cell with another in any row.
	var flows []uint64
	used := map[[2]int]bool{}
	for len(flows) < 60 {
		f := rng.Uint64()
		ok := true
		for r := 0; r < p.Rows; r++ {
			c, _ := l.FlowCells(f, r)
			if used[[2]int{r, c}] {
				ok = false
			}
		}
		if !ok {
			continue
		}
		for r := 0; r < p.Rows; r++ {
			c, _ := l.FlowCells(f, r)
			used[[2]int{r, c}] = true
		}
		flows = append(flows, f)
	}
	var pkts []pk
	type truth struct{ n, sum, sum2 float64 }
	tr := map[uint64]*truth{}
	for i, f := range flows {
		n := 50 + 20*i
		mean := 1e5 + 1e4*float64(i)
		x := &truth{}
		tr[f] = x
		for j := 0; j < n; j++ {
			d := int64(mean + 3e4*rng.NormFloat64())
			pkts = append(pkts, pk{flow: f, hash: rng.Uint64(), ts: rng.Int64N(1e9), delay: d, w: 1, size: 100})
			x.n++
			x.sum += float64(d)
			x.sum2 += float64(d) * float64(d)
		}
	}
	snd, rcv := build(t, p, pkts, pkts)
	est, err := EstimatePaper(snd, rcv, flows, EstimateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ratio float64
	for _, e := range est {
		x := tr[e.Flow]
		want := x.sum / x.n
		if math.Abs(e.Delay-want) > 1e-9*want {
			t.Errorf("flow %x: delay %.6f, exact mean %.6f", e.Flow, e.Delay, want)
		}
		if e.Samples != x.n || e.Packets != x.n || e.Loss != 0 || e.Usable != 4 {
			t.Errorf("flow %x: samples %v packets %v loss %v usable %d, want %v %v 0 4", e.Flow, e.Samples, e.Packets, e.Loss, e.Usable, x.n, x.n)
		}
		v := x.sum2/x.n - want*want
		ratio += e.Stddev * e.Stddev / v
		// With no collision the rows agree, so the CI is the sampling term.
		if wantCI := z95 * e.Stddev / math.Sqrt(x.n); math.Abs(e.CI95-wantCI) > 1e-9*wantCI {
			t.Errorf("flow %x: CI95 %v, want 1.96·sd/√n = %v", e.Flow, e.CI95, wantCI)
		}
	}
	ratio /= float64(len(est))
	t.Logf("mean of estimated/true variance over %d flows: %.3f", len(est), ratio)
	if ratio < 0.7 || ratio > 1.3 {
		t.Errorf("variance estimator looks biased: mean ratio %.3f, want 1 ± 0.3", ratio)
	}
	if r := UsableCellRatio(snd, rcv); r != 1 {
		t.Errorf("usable cell ratio %v, want 1", r)
	}
}

// flowHash builds a flow hash with chosen double-hashing halves, so that
// the test knows its cells: column of row r = (h1 + r*(h2|1)) mod C.
func flowHash(h1, h2 uint32) uint64 { return uint64(h2)<<32 | uint64(h1) }

// TestFig6ByHand works the paper's Fig. 6 on a small colliding sketch.
func TestFig6ByHand(t *testing.T) {
	p := Params{Rows: 2, Columns: 8, VLDA: 1}
	A := flowHash(2, 3) // row 0: column 2, row 1: column 5
	B := flowHash(2, 5) // row 0: column 2 (with A), row 1: column 7
	C := flowHash(4, 1) // row 0: column 4, row 1: column 5 (with A)
	pkts := []pk{
		{flow: A, hash: 101, ts: 100, delay: 10, w: 1},
		{flow: A, hash: 102, ts: 200, delay: 20, w: 1},
		{flow: A, hash: 103, ts: 300, delay: 30, w: 1},
		{flow: B, hash: 201, ts: 150, delay: 100, w: 1},
		{flow: C, hash: 301, ts: 120, delay: 50, w: 1},
		{flow: C, hash: 302, ts: 220, delay: 50, w: 1},
	}
	// By hand: row 0 column 2 holds A+B: n = 4, ΔS = 60+100 = 160.
	// Row 1 column 5 holds A+C: n = 5, ΔS = 60+100 = 160.
	// A, alpha 0.1: N_min = 4, keep N < 4.4: only row 0 -> 160/4 = 40.
	// A, alpha 0.3: keep N <= 5.2: both -> 320/9.
	// B: row 1 column 7 is B alone, n = 1 -> 100.  C: row 0 column 4 alone -> 50.
	snd, rcv := build(t, p, pkts, pkts)
	check := func(name string, alpha float64, rcvPkts []pk, want map[uint64]FlowEstimate) {
		t.Helper()
		snd, rcv = build(t, p, pkts, rcvPkts)
		got, err := EstimatePaper(snd, rcv, []uint64{A, B, C}, EstimateOptions{Alpha: alpha})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			w := want[g.Flow]
			same := func(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-9 }
			if !same(g.Delay, w.Delay) || g.Usable != w.Usable || !same(g.Packets, w.Packets) || !same(g.Loss, w.Loss) {
				t.Errorf("%s: flow %x: delay %v usable %d packets %v loss %v; want %v %d %v %v",
					name, g.Flow, g.Delay, g.Usable, g.Packets, g.Loss, w.Delay, w.Usable, w.Packets, w.Loss)
			}
		}
	}
	check("no loss, alpha 0.1", 0.1, pkts, map[uint64]FlowEstimate{
		A: {Delay: 40, Usable: 2, Packets: 4},
		B: {Delay: 100, Usable: 2, Packets: 1},
		C: {Delay: 50, Usable: 2, Packets: 2},
	})
	check("no loss, alpha 0.3", 0.3, pkts, map[uint64]FlowEstimate{
		A: {Delay: 320.0 / 9, Usable: 2, Packets: 4},
		B: {Delay: 100, Usable: 2, Packets: 1},
		C: {Delay: 50, Usable: 2, Packets: 2},
	})
	// C's second packet is lost: row 0 column 4 (2 vs 1) and row 1 column 5
	// (5 vs 4) become unusable. C has no usable cell; its loss is
	// min(1, 1) = 1. A keeps row 0 only: 40 even at alpha 0.3; A's loss is
	// min(row 0: 0, row 1: 1) = 0.
	check("C loses one, alpha 0.3", 0.3, pkts[:5], map[uint64]FlowEstimate{
		A: {Delay: 40, Usable: 1, Packets: 4},
		B: {Delay: 100, Usable: 2, Packets: 1},
		C: {Delay: math.NaN(), Usable: 0, Packets: 2, Loss: 1},
	})
}

// TestLossUnusableCells: one lost packet makes exactly the cells it touched
// unusable, in every configuration.
func TestLossUnusableCells(t *testing.T) {
	for _, p := range []Params{
		{Rows: 4, Columns: 512, VLDA: 1},
		{Rows: 4, Columns: 512, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}},
	} {
		rng := rand.New(rand.NewPCG(5, 6))
		var pkts []pk
		for i := 0; i < 3000; i++ {
			pkts = append(pkts, pk{flow: uint64(rng.IntN(300)) * 0x9e3779b97f4a7c15, hash: rng.Uint64(), ts: rng.Int64N(1e9), delay: 1000 + rng.Int64N(1000), w: 1})
		}
		for trial := 0; trial < 20; trial++ {
			lost := rng.IntN(len(pkts))
			rcvPkts := append(append([]pk(nil), pkts[:lost]...), pkts[lost+1:]...)
			snd, rcv := build(t, p, pkts, rcvPkts)
			touched := map[int]bool{}
			for _, x := range snd.Positions(pkts[lost].flow, pkts[lost].hash, nil) {
				if x >= 0 {
					touched[int(x)] = true
				}
			}
			for i := 0; i < snd.Len(); i++ {
				if u := usable(snd.Cell(i), rcv.Cell(i)); u == touched[i] {
					t.Fatalf("%+v: cell %d usable=%v, touched by the lost packet=%v", p, i, u, touched[i])
				}
			}
		}
	}
}

// TestDigestCatchesSwap: the receiver misses packet X of a flow but has Y of
// the same flow (from another interval) instead: counts match, the digest
// does not, and the estimate refuses those cells.
func TestDigestCatchesSwap(t *testing.T) {
	p := Params{Rows: 4, Columns: 1024, VLDA: 1}
	F, G := flowHash(10, 21), flowHash(500, 33)
	var pkts []pk
	// Packet hashes are uniform 64-bit values (the digest keeps their top
	// bits): spread the small ids over the whole range.
	spread := uint64(0x9e3779b97f4a7c15)
	for i := 0; i < 10; i++ {
		pkts = append(pkts, pk{flow: F, hash: uint64(1000+i) * spread, ts: int64(i) * 1e6, delay: 5000, w: 1})
		pkts = append(pkts, pk{flow: G, hash: uint64(2000+i) * spread, ts: int64(i) * 1e6, delay: 7000, w: 1})
	}
	rcvPkts := append([]pk(nil), pkts...)
	rcvPkts[0] = pk{flow: F, hash: uint64(9999) * spread, ts: -3e6, delay: 5000, w: 1} // Y replaces X
	snd, rcv := build(t, p, pkts, rcvPkts)
	for r := 0; r < p.Rows; r++ {
		c, _ := snd.FlowCells(F, r)
		i := r*p.Columns + c
		s, v := snd.Cell(i), rcv.Cell(i)
		if s.N != v.N {
			t.Fatalf("row %d: counts differ (%d vs %d); the test needs equal counts", r, s.N, v.N)
		}
		if s.D == v.D {
			t.Fatalf("row %d: digest did not change", r)
		}
	}
	est, _ := EstimatePaper(snd, rcv, []uint64{F, G}, EstimateOptions{})
	if est[0].Usable != 0 || !math.IsNaN(est[0].Delay) {
		t.Errorf("swapped flow: usable %d delay %v, want 0 and NaN", est[0].Usable, est[0].Delay)
	}
	if est[1].Delay != 7000 || est[1].Usable != 4 {
		t.Errorf("other flow: delay %v usable %d, want 7000 and 4", est[1].Delay, est[1].Usable)
	}
}

// TestWeights: a weighted flow's mean is unchanged; counts and variance are
// divided by its weight.
func TestWeights(t *testing.T) {
	p := Params{Rows: 2, Columns: 64, VLDA: 1}
	F := flowHash(3, 7)
	rng := rand.New(rand.NewPCG(7, 8))
	var pkts []pk
	var sum float64
	for i := 0; i < 400; i++ {
		d := int64(1000 + rng.IntN(2001))
		sum += float64(d)
		pkts = append(pkts, pk{flow: F, hash: rng.Uint64(), ts: rng.Int64N(1e9), delay: d, w: 25})
	}
	snd, rcv := build(t, p, pkts, pkts[:399])
	pkts1 := append([]pk(nil), pkts...)
	for i := range pkts1 {
		pkts1[i].w = 1
	}
	snd1, rcv1 := build(t, p, pkts1, pkts1[:399])
	e25, _ := EstimatePaper(snd, rcv, []uint64{F}, EstimateOptions{Weight: func(uint64) float64 { return 25 }})
	e1, _ := EstimatePaper(snd1, rcv1, []uint64{F}, EstimateOptions{})
	a, b := e25[0], e1[0]
	if a.Packets != 400 || a.Loss != 1 || b.Packets != 400 || b.Loss != 1 {
		t.Errorf("packets/loss: weighted %v/%v, unweighted %v/%v, want 400/1", a.Packets, a.Loss, b.Packets, b.Loss)
	}
	if math.Abs(a.Delay-b.Delay) > 1e-9 || math.Abs(a.Stddev-b.Stddev) > 1e-6*b.Stddev || a.Samples != b.Samples {
		t.Errorf("weighted %+v differs from unweighted %+v", a, b)
	}
}

func TestMergeEqualsSingle(t *testing.T) {
	p := Params{Rows: 4, Columns: 300, VLDA: 3, Sampling: []float64{0.2, 0.5, 1, 1}, Bytes: true}
	rng := rand.New(rand.NewPCG(12, 13))
	one, _ := NewLDS(p)
	workers := make([]*LDS, 3)
	for i := range workers {
		workers[i], _ = NewLDS(p)
	}
	for i := 0; i < 20000; i++ {
		f, h, ts := rng.Uint64()%500, rng.Uint64(), rng.Int64N(1e9)
		w := uint32(1 + rng.IntN(3))
		sz := uint32(40 + rng.IntN(1460))
		one.Update(f, h, ts, w, sz)
		workers[rng.IntN(3)].Update(f, h, ts, w, sz)
	}
	merged, _ := NewLDS(p)
	for _, w := range workers {
		if err := merged.Merge(w); err != nil {
			t.Fatal(err)
		}
	}
	if !merged.Equal(one) {
		t.Fatal("merged per-worker sketches differ from one sketch over all packets")
	}
	if workers[0].Equal(one) {
		t.Fatal("Equal does not see a difference")
	}
	other, _ := NewLDS(Params{Rows: 4, Columns: 300, VLDA: 3, Bytes: true})
	if err := merged.Merge(other); err == nil {
		t.Fatal("Merge accepted sketches with different sampling")
	}
	merged.Reset()
	empty, _ := NewLDS(p)
	if !merged.Equal(empty) {
		t.Fatal("Reset left data behind")
	}
}

func TestUpdateAllocs(t *testing.T) {
	l, _ := NewLDS(Params{Rows: 4, Columns: 4096, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}, Bytes: true})
	a, _ := NewLDA(DefaultLDAParams())
	var h uint64
	if n := testing.AllocsPerRun(1000, func() {
		h += 0x9e3779b97f4a7c15
		l.Update(h*3, h, 12345, 1, 100)
		a.Update(h, 12345)
	}); n != 0 {
		t.Fatalf("Update allocates %v times per packet", n)
	}
}

func TestHeavyHitters(t *testing.T) {
	p := Params{Rows: 4, Columns: 2048, VLDA: 2}
	l, _ := NewLDS(p)
	rng := rand.New(rand.NewPCG(14, 15))
	var flows []uint64
	for i := 0; i < 200; i++ {
		f := rng.Uint64()
		flows = append(flows, f)
		n := 1 + rng.IntN(10)
		if i < 5 {
			n = 1000 * (5 - i) // the five heaviest, in order
		}
		for j := 0; j < n; j++ {
			l.Update(f, rng.Uint64(), 0, 1, 0)
		}
	}
	got := HeavyHitters(l, append(flows, flows[0]), 5)
	if len(got) != 5 {
		t.Fatalf("got %d flows, want 5", len(got))
	}
	for i := range got {
		if got[i] != flows[i] {
			t.Fatalf("heavy hitter %d = %x, want %x", i, got[i], flows[i])
		}
	}
}

// TestUpdateCountComposition checks the composition UpdateCount keeps
// against where each packet actually landed: a fresh sketch per packet
// shows the one cell per sampling row that the packet changed, and its
// column's distance from the flow's first vLDA column is the offset.
func TestUpdateCountComposition(t *testing.T) {
	for _, p := range []Params{
		{Rows: 4, Columns: 97, VLDA: 1},
		{Rows: 4, Columns: 97, VLDA: 5, Sampling: []float64{0.1, 0.5, 1, 1}},
		{Rows: 3, Columns: 7, VLDA: 7, Sampling: []float64{0.3, 1, 0.8}},
	} {
		rng := rand.New(rand.NewPCG(5, uint64(p.VLDA)))
		shared, err := NewLDS(p)
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := NewLDS(p)
		for range 20 {
			flow := rng.Uint64()
			comp := make([]uint32, p.Rows*p.VLDA)
			want := make([]uint32, len(comp))
			for range 50 {
				h, ts := rng.Uint64(), rng.Int64N(1e9)
				shared.UpdateCount(flow, h, ts, 1, 100, comp)
				plain.Update(flow, h, ts, 1, 100)
				one, _ := NewLDS(p)
				one.Update(flow, h, ts, 1, 100)
				for i := 0; i < one.Len(); i++ {
					if one.Cell(i).N == 0 {
						continue
					}
					r, c := i/p.Columns, i%p.Columns
					first, _ := one.FlowCells(flow, r)
					want[r*p.VLDA+(c-first+p.Columns)%p.Columns]++
				}
			}
			if !slices.Equal(comp, want) {
				t.Fatalf("%+v flow %x: composition %v, packets landed %v", p, flow, comp, want)
			}
		}
		if !shared.Equal(plain) {
			t.Fatalf("%+v: UpdateCount changed the sketch itself", p)
		}
	}
	l, _ := NewLDS(Params{Rows: 4, Columns: 64, VLDA: 5})
	comp := make([]uint32, 20)
	if a := testing.AllocsPerRun(100, func() { l.UpdateCount(1, 2, 3, 1, 100, comp) }); a != 0 {
		t.Fatalf("UpdateCount allocates %v per packet", a)
	}
}
