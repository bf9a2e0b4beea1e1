package sketch

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// benchDecodeInput builds the paper's scale for the decoder: nFlows flows
// of Pareto(0.9) sizes capped at 2000 packets, 0.1 % loss, sketched on both
// ends, with the receiver's compositions built as internal/interval does.
func benchDecodeInput(b *testing.B, p Params, nFlows int) (*LDS, *LDS, []FlowComposition) {
	rng := rand.New(rand.NewPCG(17, 18))
	snd, err := NewLDS(p)
	if err != nil {
		b.Fatal(err)
	}
	rcv, _ := NewLDS(p)
	comp := make([]FlowComposition, nFlows)
	k := p.VLDA
	var buf []int32
	for i := range comp {
		f := rng.Uint64()
		comp[i] = FlowComposition{Flow: f, Cells: make([]uint32, p.Rows*k)}
		n := int(min(math.Pow(1-rng.Float64(), -1/0.9), 2000))
		mean := 5e4 + 2e6*rng.Float64()
		for j := 0; j < n; j++ {
			h, ts := rng.Uint64(), rng.Int64N(1e9)
			snd.Update(f, h, ts, 1, 500)
			if rng.IntN(1000) == 0 {
				continue
			}
			rcv.Update(f, h, ts+int64(mean*rng.ExpFloat64()), 1, 500)
			buf = rcv.Positions(f, h, buf)
			for r, pos := range buf {
				if pos < 0 {
					continue
				}
				first, _ := rcv.FlowCells(f, r)
				comp[i].Cells[r*k+(int(pos)-r*p.Columns-first+p.Columns)%p.Columns]++
			}
		}
	}
	return snd, rcv, comp
}

func BenchmarkEstimateDecode(b *testing.B) {
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"150k_4x17500_k1", Params{Rows: 4, Columns: 17500, VLDA: 1}},
		{"150k_4x17500_k5_multibank", Params{Rows: 4, Columns: 17500, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}}},
	} {
		snd, rcv, comp := benchDecodeInput(b, c.p, 150000)
		for _, w := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s_workers%d", c.name, w), func(b *testing.B) {
				b.ReportAllocs()
				b.ResetTimer()
				var d *lsDecoder
				var stages [7]time.Duration
				for b.Loop() {
					var err error
					if d, _, err = estimateDecode(snd, rcv, comp, DecodeOptions{Workers: w}, nil); err != nil {
						b.Fatal(err)
					}
					for i, t := range d.stages {
						stages[i] += t
					}
				}
				for i, name := range []string{"build", "warm", "solve1", "variance", "solve2", "identify", "loss"} {
					b.ReportMetric(float64(stages[i].Nanoseconds())/float64(b.N)/1e6, "ms_"+name)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/interval")
				b.ReportMetric(float64(d.iters[0]), "cg_iter_1")
				b.ReportMetric(float64(d.iters[2]), "cg_iter_2")
				b.ReportMetric(float64(len(d.eCell))/float64(len(comp)), "entries/flow")
			})
		}
	}
}

// BenchmarkDecodeStages times the two dominant stages alone on the k=5
// multi-bank system (the decoder is built once): the final delay solve
// (50 CG iterations) and the identification step.
func BenchmarkDecodeStages(b *testing.B) {
	p := Params{Rows: 4, Columns: 17500, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}}
	snd, rcv, comp := benchDecodeInput(b, p, 150000)
	d, _, err := estimateDecode(snd, rcv, comp, DecodeOptions{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	// d.y holds identify's scratch by now and d.wgt the last solve's
	// weights: the values do not matter for the timing.
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprintf("pcg50_workers%d", w), func(b *testing.B) {
			d.workers = w
			x := make([]float64, d.nA)
			for b.Loop() {
				clear(x)
				d.opt.Tol = 1e-300 // all 50 iterations
				d.pcg(d.eA, d.wgt, d.y, d.lam[:d.nA], x, 50, 0)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/50/float64(len(d.eCell)), "ns/entry/iter")
		})
	}
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprintf("identify_workers%d", w), func(b *testing.B) {
			d.workers = w
			for b.Loop() {
				d.identify(w)
			}
		})
	}
}
