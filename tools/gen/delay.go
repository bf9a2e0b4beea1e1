package gen

import (
	"math"
	"math/rand/v2"
)

// delaySampler is a compiled DelayModel. Per-flow choices (bimodal per_flow,
// priority queue, ECMP path) come from the flow's own random word mixed with
// the node's salt, so they need no per-flow state beyond one uint64 and stay
// fixed for the flow's life.
type delaySampler struct {
	m      *DelayModel
	salt   uint64
	a, b   *delaySampler // bimodal A/B, priority High/Low
	jitter *delaySampler
	cum    []float64 // ecmp: cumulative path weights, normalized
	phase  float64   // priority: phase of the queue swing
}

func compileDelay(m *DelayModel, salt *uint64, rng *rand.Rand) *delaySampler {
	*salt++
	s := &delaySampler{m: m, salt: *salt * 0x9e3779b97f4a7c15}
	switch m.Kind {
	case DelayBimodal:
		s.a = compileDelay(m.A, salt, rng)
		s.b = compileDelay(m.B, salt, rng)
	case DelayPriority:
		s.a = compileDelay(m.High, salt, rng)
		s.b = compileDelay(m.Low, salt, rng)
		s.phase = rng.Float64() * 2 * math.Pi
	case DelayECMP:
		var w float64
		for _, p := range m.Paths {
			w += p.Weight
		}
		acc := 0.0
		for _, p := range m.Paths {
			acc += p.Weight / w
			s.cum = append(s.cum, acc)
		}
		if m.Jitter != nil {
			s.jitter = compileDelay(m.Jitter, salt, rng)
		}
	}
	return s
}

// flowUniform turns the flow's random word and a node salt into a uniform
// [0, 1) value, fixed per (flow, node).
func flowUniform(flowWord, salt uint64) float64 {
	return float64(splitmix(flowWord^salt)>>11) / (1 << 53)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// sample draws one delay in ns (unbounded; the caller keeps it in range).
// tNS is the send time relative to the trace start, for time-varying queues.
func (s *delaySampler) sample(rng *rand.Rand, flowWord uint64, tNS int64) float64 {
	m := s.m
	switch m.Kind {
	case DelayConstant:
		return float64(m.Value)
	case DelayUniform:
		return float64(m.Min) + rng.Float64()*float64(m.Max-m.Min)
	case DelayWeibull:
		u := 1 - rng.Float64() // (0, 1]
		return float64(m.Offset) + float64(m.Scale)*math.Pow(-math.Log(u), 1/m.Shape)
	case DelayPareto:
		u := 1 - rng.Float64()
		return float64(m.Offset) + float64(m.Scale)*math.Pow(u, -1/m.Shape)
	case DelayBimodal:
		var u float64
		if m.PerFlow {
			u = flowUniform(flowWord, s.salt)
		} else {
			u = rng.Float64()
		}
		if u < m.P {
			return s.a.sample(rng, flowWord, tNS)
		}
		return s.b.sample(rng, flowWord, tNS)
	case DelayPriority:
		if flowUniform(flowWord, s.salt) < m.HighFraction {
			return s.a.sample(rng, flowWord, tNS)
		}
		q := float64(m.Queue) * (1 + math.Sin(2*math.Pi*float64(tNS)/float64(m.Period)+s.phase))
		return s.b.sample(rng, flowWord, tNS) + q
	case DelayECMP:
		u := flowUniform(flowWord, s.salt)
		i := 0
		for i < len(s.cum)-1 && u >= s.cum[i] {
			i++
		}
		d := float64(m.Paths[i].Base)
		if s.jitter != nil {
			d += s.jitter.sample(rng, flowWord, tNS)
		}
		return d
	}
	return math.NaN() // unreachable after Validate
}

// boundedDelay draws a delay in [1, maxNS-1] ns: a draw outside is redrawn
// (truncating the distribution); after 16 failures it is clamped, so a model
// that mostly exceeds the maximum still terminates.
func (s *delaySampler) boundedDelay(rng *rand.Rand, flowWord uint64, tNS, maxNS int64) int64 {
	for range 16 {
		d := math.Round(s.sample(rng, flowWord, tNS))
		if d >= 1 && d < float64(maxNS) {
			return int64(d)
		}
	}
	d := math.Round(s.sample(rng, flowWord, tNS))
	return int64(min(max(d, 1), float64(maxNS-1)))
}

// lossState is the compiled loss model of one class (the Gilbert–Elliott
// chain's state is shared by the class).
type lossState struct {
	m   LossModel
	bad bool
}

// lost steps the model by one packet and says whether it is dropped.
func (l *lossState) lost(rng *rand.Rand) bool {
	switch l.m.Kind {
	case LossUniform:
		return l.m.P > 0 && rng.Float64() < l.m.P
	case LossGilbert:
		if l.bad {
			if rng.Float64() < l.m.PBG {
				l.bad = false
			}
		} else if rng.Float64() < l.m.PGB {
			l.bad = true
		}
		p := l.m.LossGood
		if l.bad {
			p = l.m.LossBad
		}
		return p > 0 && rng.Float64() < p
	}
	return false
}
