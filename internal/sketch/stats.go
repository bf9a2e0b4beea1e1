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
