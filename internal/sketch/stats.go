package sketch

import (
	"math"
	"slices"
)

// median of x (the upper median for even lengths), NaN when empty; x is
// not modified.
func median(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

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
