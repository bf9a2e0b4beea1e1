package sketch

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRiceRoundTrip writes random values with random widths and parameters
// (escapes included) and reads them back; every prefix of the stream must
// fail cleanly rather than read past its end.
func TestRiceRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type item struct {
		v    uint64
		k    uint
		raw  bool // plain bits of width k instead of a Rice code
		esc  bool
		bits uint
	}
	var items []item
	var w bitWriter
	for range 20000 {
		it := item{k: uint(rng.IntN(64))}
		switch rng.IntN(4) {
		case 0:
			it.raw, it.bits = true, uint(1+rng.IntN(64))
			it.v = rng.Uint64()
			if it.bits < 64 {
				it.v &= 1<<it.bits - 1
			}
			w.write(it.v, it.bits)
		default:
			it.v = rng.Uint64() >> rng.IntN(64)
			it.esc = it.v>>it.k >= riceEscape
			w.rice(it.v, it.k)
		}
		items = append(items, it)
	}
	b := w.flush()
	r := bitReader{b: b}
	for i, it := range items {
		if it.raw {
			if got := r.read(it.bits); got != it.v {
				t.Fatalf("item %d: raw %d bits: got %x want %x", i, it.bits, got, it.v)
			}
			continue
		}
		got, esc := r.rice(it.k)
		if got != it.v || esc != it.esc {
			t.Fatalf("item %d: rice k=%d: got %x (escaped %v) want %x (%v)", i, it.k, got, esc, it.v, it.esc)
		}
	}
	if r.bad || r.pos > 8*len(b) || 8*len(b)-r.pos >= 8 {
		t.Fatalf("reader state at the end: bad %v, %d of %d bits", r.bad, r.pos, 8*len(b))
	}
	for cut := 0; cut < len(b); cut += 1 + len(b)/50 {
		r := bitReader{b: b[:cut]}
		for _, it := range items {
			if it.raw {
				r.read(it.bits)
			} else {
				r.rice(it.k)
			}
		}
		if !r.bad {
			t.Fatalf("reading all items from %d of %d bytes did not fail", cut, len(b))
		}
	}
}

// TestRiceParamIsBest: the chosen parameter codes the values in no more
// bits than any other, and the smallest such.
func TestRiceParamIsBest(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 300 {
		n := 1 + rng.IntN(200)
		vals := make([]uint64, n)
		scale := rng.IntN(60)
		for i := range vals {
			vals[i] = uint64(rng.ExpFloat64() * float64(uint64(1)<<scale))
			if rng.IntN(50) == 0 {
				vals[i] = rng.Uint64() // outliers
			}
		}
		if msg := riceParamNotBest(vals); msg != "" {
			t.Fatalf("trial %d: %s", trial, msg)
		}
	}
}

// riceParamNotBest says how riceParam(vals) misses the definition (the
// smallest k of least cost), or "".
func riceParamNotBest(vals []uint64) string {
	cost := func(k uint) int {
		c := 0
		for _, v := range vals {
			c += riceBits(v, k)
		}
		return c
	}
	k := riceParam(vals)
	for j := uint(0); j < 64; j++ {
		if cost(j) < cost(k) || (cost(j) == cost(k) && j < k) {
			return fmt.Sprintf("chose k=%d (%d bits), k=%d gives %d", k, cost(k), j, cost(j))
		}
	}
	return ""
}

// FuzzRiceParamIsBest: riceParam is the smallest k of least cost for any
// values (the encoder and the decoder's canonical check both rely on it).
func FuzzRiceParamIsBest(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 0, 0, 0, 0, 0, 0, 0, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		var vals []uint64
		for len(b) >= 2 {
			// a shift byte and up to 8 value bytes: wide spreads and the
			// quotients around riceEscape at k = L-6 both come up
			sh, n := uint(b[0]%64), min(len(b)-1, 1+int(b[0]>>6)*2)
			var v uint64
			for _, x := range b[1 : 1+n] {
				v = v<<8 | uint64(x)
			}
			vals = append(vals, v<<sh|v>>(64-sh)&(1<<sh-1))
			b = b[1+n:]
		}
		if len(vals) == 0 {
			return
		}
		if msg := riceParamNotBest(vals); msg != "" {
			t.Fatalf("%s (values %x)", msg, vals)
		}
	})
}
