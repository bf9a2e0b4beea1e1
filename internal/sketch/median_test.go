package sketch

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// sameAsSort checks selectNth against slices.Sort for every n of x.
func sameAsSort(t *testing.T, x []float64) {
	t.Helper()
	want := slices.Clone(x)
	slices.Sort(want)
	for n := range x {
		y := slices.Clone(x)
		got := selectNth(y, n)
		if !(got == want[n] || (math.IsNaN(got) && math.IsNaN(want[n]))) {
			t.Fatalf("selectNth(%v, %d) = %v, sorted has %v", x, n, got, want[n])
		}
		slices.Sort(y)
		for i := range y {
			if !(y[i] == want[i] || (math.IsNaN(y[i]) && math.IsNaN(want[i]))) {
				t.Fatalf("selectNth(%v, %d) lost or changed values: %v", x, n, y)
			}
		}
	}
}

func TestSelectNth(t *testing.T) {
	nan := math.NaN()
	rng := rand.New(rand.NewPCG(3, 4))
	random := make([]float64, 301)
	for i := range random {
		random[i] = rng.NormFloat64()
	}
	few := make([]float64, 200)
	for i := range few {
		few[i] = float64(rng.IntN(3))
	}
	sorted, reversed := make([]float64, 100), make([]float64, 100)
	for i := range sorted {
		sorted[i], reversed[i] = float64(i), float64(99-i)
	}
	for _, c := range []struct {
		name string
		x    []float64
	}{
		{"one", []float64{7}},
		{"two", []float64{2, 1}},
		{"equal", []float64{5, 5, 5, 5, 5, 5}},
		{"nan first", []float64{3, nan, 1, nan, 2}},
		{"all nan", []float64{nan, nan, nan}},
		{"infinities", []float64{math.Inf(1), 0, math.Inf(-1), -1, 1}},
		{"random", random},
		{"three values", few},
		{"sorted", sorted},
		{"reversed", reversed},
	} {
		t.Run(c.name, func(t *testing.T) { sameAsSort(t, c.x) })
	}
	if got := medianInPlace([]float64{4, 1, 3, 2}); got != 3 {
		t.Fatalf("median of 1..4 = %v, want the upper one, 3", got)
	}
	if got := medianInPlace(nil); !math.IsNaN(got) {
		t.Fatalf("median of nothing = %v, want NaN", got)
	}
}

func FuzzSelectNth(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		x := make([]float64, 0, len(b)/8)
		for len(b) >= 8 {
			x = append(x, math.Float64frombits(binary.LittleEndian.Uint64(b)))
			b = b[8:]
		}
		if len(x) > 64 {
			x = x[:64]
		}
		sameAsSort(t, x)
	})
}
