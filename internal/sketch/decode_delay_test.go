package sketch

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDecodePriorSpreadMultimodal: flow means in two modes, as flows on two
// paths (the LDS paper's Fig. 8). The prior's spread τ² must be the spread
// of the flows' expected delays, which a robust scale (the MAD, one mode's
// width here) misses by two orders of magnitude in variance; and decode
// must still beat the paper estimator on the small flows' true means.
func TestDecodePriorSpreadMultimodal(t *testing.T) {
	const nFlows = 8000
	mb := []float64{0.01, 0.1, 0.5, 1}
	for _, c := range []struct {
		name string
		p    Params
		loss float64
	}{
		{"paper load k=1", Params{Rows: 4, Columns: nFlows / 8, VLDA: 1}, 0},
		{"0.2% loss, multi-bank k=5", Params{Rows: 4, Columns: 5 * nFlows / 8, VLDA: 5, Sampling: mb}, 0.002},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(41, 42))
			var sndP, rcvP []pk
			type truth struct{ m, sum, n float64 } // m: the flow's expected delay
			tr := make([]truth, nFlows)
			keys := make([]uint64, nFlows)
			for i := range keys {
				keys[i] = rng.Uint64()
				n := int(min(math.Pow(1-rng.Float64(), -1/0.9), 5000))
				m := 1.1e6 + 3e4*rng.NormFloat64() // the slow path
				if rng.Float64() < 0.55 {
					m = 4e5 + 3e4*rng.NormFloat64()
				}
				for range n {
					x := pk{flow: keys[i], hash: rng.Uint64(), ts: rng.Int64N(1e9), delay: int64(m * (0.5 + rng.Float64())), w: 1, size: 500}
					sndP = append(sndP, x)
					if rng.Float64() < c.loss {
						continue
					}
					rcvP = append(rcvP, x)
					tr[i].sum += float64(x.delay)
					tr[i].n++
				}
				tr[i].m = m
			}
			snd, rcv := build(t, c.p, sndP, rcvP)
			comp := compositions(rcv, keys, rcvP)
			d, dec, err := estimateDecode(snd, rcv, comp, DecodeOptions{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			pap, err := EstimatePaper(snd, rcv, keys, EstimateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var means, de, pe []float64
			for i, x := range tr {
				if x.n == 0 {
					continue
				}
				m := x.sum / x.n
				means = append(means, x.m)
				if x.n >= 10 && x.n < 100 && !math.IsNaN(dec[i].Delay) && !math.IsNaN(pap[i].Delay) {
					de = append(de, math.Abs(dec[i].Delay-m)/m)
					pe = append(pe, math.Abs(pap[i].Delay-m)/m)
				}
			}
			want := variance(means)
			ratio := d.tau2 / want
			t.Logf("τ %.0f ns against the flows' expected delays' spread %.0f (MAD scale %.0f); 10-99 packets: %d flows, median error decode %.4f paper %.4f",
				math.Sqrt(d.tau2), math.Sqrt(want), math.Sqrt(madVar(slices.Clone(means))), len(de), median(de), median(pe))
			if ratio < 0.6 || ratio > 1.5 {
				t.Errorf("τ² = %.3g is %.2f× the variance of the flows' expected delays (%.3g): want 0.6-1.5×", d.tau2, ratio, want)
			}
			if median(de) > median(pe) {
				t.Errorf("10-99 packets: decode's median error %.4f is above the paper estimator's %.4f", median(de), median(pe))
			}
		})
	}
}
