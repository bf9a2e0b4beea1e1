package sketch

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSplitmixKnownAnswers checks the mixer against the reference SplitMix64
// generator's first outputs from seed 0 (state advances by gamma before
// mixing), so the documented derivation is the published function.
func TestSplitmixKnownAnswers(t *testing.T) {
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	for r, w := range want {
		if got := rowMix(0, r); got != w {
			t.Errorf("rowMix(0, %d) = %#x, want %#x (SplitMix64 output %d from seed 0)", r, got, w, r+1)
		}
	}
}

// docDerivation re-implements docs/sketch.md "Hash derivation"
// literally, with no shared code, to pin the wire contract.
func docDerivation(F, P uint64, rows, C, k int, rates []float64) []int32 {
	mix := func(z uint64) uint64 {
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	h1 := F & 0xffffffff
	h2 := (F >> 32) | 1
	out := make([]int32, rows)
	for r := 0; r < rows; r++ {
		col := (h1 + uint64(r)*h2) % uint64(C) // no overflow: h1, h2 < 2^32, r < 64
		z := mix(P + uint64(r+1)*0x9e3779b97f4a7c15)
		T := uint64(rates[r] * 4294967296)
		if rates[r] == 1 {
			T = 1 << 32
		}
		if z>>32 >= T {
			out[r] = -1
			continue
		}
		off := ((z & 0xffffffff) * uint64(k)) >> 32
		out[r] = int32(r*C + int((col+off)%uint64(C)))
	}
	return out
}

func TestHashDerivationV1(t *testing.T) {
	cases := []Params{
		{Rows: 4, Columns: 4096, VLDA: 1},
		{Rows: 4, Columns: 17500, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}},
		{Rows: 7, Columns: 1, VLDA: 1},
		{Rows: 3, Columns: 13, VLDA: 13, Sampling: []float64{0.3, 1, 0.7}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range cases {
		l, err := NewLDS(p)
		if err != nil {
			t.Fatal(err)
		}
		np := l.Params()
		var dst []int32
		for i := 0; i < 5000; i++ {
			F, P := rng.Uint64(), rng.Uint64()
			want := docDerivation(F, P, p.Rows, p.Columns, p.VLDA, np.Sampling)
			dst = l.Positions(F, P, dst)
			for r := range want {
				if dst[r] != want[r] {
					t.Fatalf("%+v: Positions(%#x,%#x)[%d] = %d, documented derivation gives %d", p, F, P, r, dst[r], want[r])
				}
				first, k := l.FlowCells(F, r)
				if want[r] >= 0 {
					c := int(want[r]) - r*p.Columns
					if (c-first+p.Columns)%p.Columns >= k {
						t.Fatalf("cell %d of row %d is outside FlowCells (%d, %d)", c, r, first, k)
					}
				}
			}
			// Update must touch exactly the documented cells.
			if i < 200 {
				l.Reset()
				l.Update(F, P, 7, 1, 60)
				touched := 0
				for j := 0; j < l.Len(); j++ {
					if !l.Cell(j).empty() {
						touched++
					}
				}
				expect := 0
				for _, x := range want {
					if x >= 0 {
						expect++
						if l.Cell(int(x)).N != 1 || l.Cell(int(x)).D != P>>32 {
							t.Fatalf("Update did not write the documented cell %d", x)
						}
					}
				}
				if touched != expect {
					t.Fatalf("Update touched %d cells, documented %d", touched, expect)
				}
			}
		}
	}
}

// TestSamplingRates checks each row keeps about p of the packets,
// independently of the other rows.
func TestSamplingRates(t *testing.T) {
	p := Params{Rows: 4, Columns: 64, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}}
	l, _ := NewLDS(p)
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 200000
	kept := make([]int, 4)
	both := 0 // kept by row 1 and row 2
	var dst []int32
	for i := 0; i < n; i++ {
		dst = l.Positions(rng.Uint64(), rng.Uint64(), dst)
		for r, x := range dst {
			if x >= 0 {
				kept[r]++
			}
		}
		if dst[1] >= 0 && dst[2] >= 0 {
			both++
		}
	}
	for r, rate := range p.Sampling {
		got := float64(kept[r]) / n
		sd := 4 * sqrt(rate*(1-rate)/n)
		if d := got - rate; d > sd+1e-12 || -d > sd+1e-12 {
			t.Errorf("row %d kept %.5f of packets, want %.3f ± %.5f", r, got, rate, sd)
		}
	}
	if got, want := float64(both)/n, 0.05; got < want-0.003 || got > want+0.003 {
		t.Errorf("rows 1 and 2 both kept %.4f, want %.3f if independent", got, want)
	}
}

func sqrt(x float64) float64 { return math.Sqrt(x) }

// fastMod must be the remainder exactly: the cells a flow maps to are
// shared with every peer and with decode's composition.
func TestFastModExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	ds := []uint64{1, 2, 3, 7, 4095, 4096, 4097, 17500, 87500, 1<<24 - 1, MaxColumns}
	for range 200 {
		ds = append(ds, 1+rng.Uint64N(MaxColumns))
	}
	as := []uint64{0, 1, 1<<31 - 1, 1 << 31, 1<<32 - 1, 1<<32 - 2}
	for _, d := range ds {
		m := modMagic(d)
		for _, a := range as {
			if got := fastMod(a, m, d); got != a%d {
				t.Fatalf("%d mod %d: got %d, want %d", a, d, got, a%d)
			}
		}
		for range 5000 {
			a := rng.Uint64() & 0xffffffff
			if got := fastMod(a, m, d); got != a%d {
				t.Fatalf("%d mod %d: got %d, want %d", a, d, got, a%d)
			}
		}
	}
}

func FuzzFastMod(f *testing.F) {
	f.Add(uint32(12345), uint32(4096))
	f.Fuzz(func(t *testing.T, a, d uint32) {
		if d == 0 {
			return
		}
		if got := fastMod(uint64(a), modMagic(uint64(d)), uint64(d)); got != uint64(a%d) {
			t.Fatalf("%d mod %d: got %d", a, d, got)
		}
	})
}
