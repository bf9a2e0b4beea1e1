package linkem

import (
	"math"
	"math/rand/v2"
)

// sampler draws delays of one class; no allocation per draw.
type sampler struct {
	d Delay
}

// draw returns a delay in ns.
func (s *sampler) draw(rng *rand.Rand) int64 {
	d := &s.d
	switch d.Kind {
	case "uniform":
		if d.Max == d.Min {
			return int64(d.Min)
		}
		return int64(d.Min) + rng.Int64N(int64(d.Max-d.Min)+1)
	case "bimodal":
		v := int64(d.B)
		if rng.Float64() < d.P {
			v = int64(d.A)
		}
		if d.Spread > 0 {
			v += rng.Int64N(int64(d.Spread))
		}
		return v
	case "pareto":
		// Lomax (Pareto II) by inversion: Scale * (U^(-1/Shape) - 1), U in (0, 1].
		u := 1 - rng.Float64()
		j := float64(d.Scale) * (math.Pow(u, -1/d.Shape) - 1)
		if c := float64(d.cap()); j > c {
			j = c
		}
		return int64(d.Base) + int64(j)
	}
	return int64(d.Value)
}

// lossState is one class's loss model with its Gilbert–Elliott state.
type lossState struct {
	l   Loss
	bad bool
}

// lost draws whether the next frame is lost.
func (s *lossState) lost(rng *rand.Rand) bool {
	l := &s.l
	switch l.Kind {
	case "uniform":
		return l.P > 0 && rng.Float64() < l.P
	case "gilbert":
		// Transition first, then lose with the new state's probability.
		if s.bad {
			if rng.Float64() < l.PBG {
				s.bad = false
			}
		} else if rng.Float64() < l.PGB {
			s.bad = true
		}
		p := l.LossGood
		if s.bad {
			p = l.LossBad
		}
		return p > 0 && rng.Float64() < p
	}
	return false
}
