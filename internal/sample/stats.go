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
	// P99Low is a one-sided 95 % lower confidence bound of the p99: the
	// order statistic P99LowRank (NaN below MinP99).
	P99Low float64
	Stddev float64 // NaN below MinStddev
	Lost   int
}

// Summarize applies the minimums to a flow's joined samples.
func (d *FlowDist) Summarize() Summary {
	s := Summary{N: len(d.Delays), Lost: d.Lost, P50: math.NaN(), P90: math.NaN(), P99: math.NaN(), P99Low: math.NaN(), Stddev: math.NaN()}
	if s.N >= MinP50 {
		s.P50 = Quantile(d.Delays, 0.5)
	}
	if s.N >= MinP90 {
		s.P90 = Quantile(d.Delays, 0.9)
	}
	if s.N >= MinP99 {
		s.P99 = Quantile(d.Delays, 0.99)
		s.P99Low = d.Delays[P99LowRank(s.N)-1]
	}
	if s.N >= MinStddev {
		s.Stddev = Stddev(d.Delays)
	}
	return s
}

// P99LowRank is the 1-based rank, among n ascending samples, of a
// one-sided 95 % lower confidence bound of the 99th percentile: the
// largest k with P(Binomial(n, 0.99) >= k) >= 0.95, by the normal
// approximation, k = floor(0.99·n − 1.645·√(0.0099·n)), at least 1. At 50
// samples it is the 48th (the third largest), at 160 the 156th: a p99
// whose bound passes a threshold rests on several packets, never on one.
func P99LowRank(n int) int {
	k := int(math.Floor(0.99*float64(n) - 1.6448536269514722*math.Sqrt(0.0099*float64(n))))
	return min(max(k, 1), n)
}

// MinMean is the fewest joined samples behind a flow's mean delay from
// samples (docs/sampling.md, "Delay under loss"): below it the Student t
// factor of the 95 % half-width (2.78 at 5) makes the estimate too wide
// to be of use, and its variance too unsure to weigh it against the
// sketch's.
const MinMean = 5

// Mean is the mean of a flow's joined delays with its 95 % half-width
// (Student t on n−1 degrees of freedom times the standard error) and the
// variance of the mean (s²/n) that weighs it against another estimate.
// NaN below MinMean samples.
type Mean struct {
	N               int
	Mean, CI95, Var float64
}

// MeanDelay summarizes d's delays as a mean (NaN fields below MinMean).
func (d *FlowDist) MeanDelay() Mean {
	n := len(d.Delays)
	m := Mean{N: n, Mean: math.NaN(), CI95: math.NaN(), Var: math.NaN()}
	if n < MinMean {
		return m
	}
	var sum float64
	for _, x := range d.Delays {
		sum += x
	}
	m.Mean = sum / float64(n)
	sd := Stddev(d.Delays)
	m.Var = sd * sd / float64(n)
	m.CI95 = T975(n-1) * math.Sqrt(m.Var)
	return m
}

// T975 is the 0.975 quantile of Student's t distribution with df degrees
// of freedom (df >= 1): exact to three decimals up to 30, then the
// Cornish–Fisher expansion around the normal quantile (error below 1e-4).
func T975(df int) float64 {
	table := [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df < 1 {
		return math.NaN()
	}
	if df <= len(table) {
		return table[df-1]
	}
	const z = 1.959963984540054
	v := float64(df)
	z3, z5 := z*z*z, z*z*z*z*z
	return z + (z3+z)/(4*v) + (5*z5+16*z3+3*z)/(96*v*v)
}
