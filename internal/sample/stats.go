package sample

import "math"

// Minimum joined samples behind each published figure (docs/sampling.md):
// below them the figure is null (quantiles) or left to the sketch (stddev).
const (
	MinP50    = 10
	MinP90    = 20
	MinP99    = 50
	MinStddev = 20
)

// Quantile is the q-quantile of ascending values by linear interpolation
// between order statistics (Hyndman–Fan type 7); NaN when empty.
func Quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	h := q * float64(n-1)
	i := int(math.Floor(h))
	if i >= n-1 {
		return sorted[n-1]
	}
	return sorted[i] + (h-float64(i))*(sorted[i+1]-sorted[i])
}

// Stddev is the sample standard deviation (n−1); NaN below two values.
func Stddev(v []float64) float64 {
	if len(v) < 2 {
		return math.NaN()
	}
	var mean, m2 float64
	for i, x := range v {
		d := x - mean
		mean += d / float64(i+1)
		m2 += d * (x - mean)
	}
	return math.Sqrt(m2 / float64(len(v)-1))
}

// Summary is what one flow's joined samples support.
type Summary struct {
	N             int
	P50, P90, P99 float64 // NaN where N is below the minimum
	Stddev        float64 // NaN below MinStddev
	Lost          int
}

// Summarize applies the minimums to a flow's joined samples.
func (d *FlowDist) Summarize() Summary {
	s := Summary{N: len(d.Delays), Lost: d.Lost, P50: math.NaN(), P90: math.NaN(), P99: math.NaN(), Stddev: math.NaN()}
	if s.N >= MinP50 {
		s.P50 = Quantile(d.Delays, 0.5)
	}
	if s.N >= MinP90 {
		s.P90 = Quantile(d.Delays, 0.9)
	}
	if s.N >= MinP99 {
		s.P99 = Quantile(d.Delays, 0.99)
	}
	if s.N >= MinStddev {
		s.Stddev = Stddev(d.Delays)
	}
	return s
}
