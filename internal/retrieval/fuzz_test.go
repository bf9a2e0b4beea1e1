package retrieval

import (
	"bytes"
	"runtime"
	"testing"
)

// FuzzUnmarshal: the decoder never panics, never accepts more keys than
// the limit or a table longer than its input, and whatever it accepts
// re-encodes to the same bytes (one encoding per function).
func FuzzUnmarshal(f *testing.F) {
	for _, n := range []int{0, 1, 5, 300} {
		keys, vals := randomSet(n, uint64(n))
		fn, err := Build(keys, vals)
		if err != nil {
			f.Fatal(err)
		}
		enc, _ := fn.MarshalBinary()
		f.Add(enc, 1000)
	}
	var b Builder
	for _, w := range []int{2, 5, 16} {
		keys, _ := randomSet(40, uint64(w))
		vals := make([]uint64, len(keys))
		for i := range vals {
			vals[i] = uint64(i) % (1 << w)
		}
		fn, err := b.BuildValues(keys, vals, w)
		if err != nil {
			f.Fatal(err)
		}
		enc, _ := fn.MarshalBinary()
		f.Add(enc, 1000)
	}
	f.Add([]byte{Version, 0xff, 0xff, 0xff, 0x7f}, 1<<30)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		var fn *Func
		var err error
		// The table is as long as the bytes received: the key count in
		// the header never makes the decoder allocate more. TotalAlloc
		// counts the whole process, where another goroutine can allocate
		// meanwhile: the least growth over three decodes is the decoder's.
		got := ^uint64(0)
		for range 3 {
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			fn, err = Unmarshal(b, limit)
			runtime.ReadMemStats(&m1)
			got = min(got, m1.TotalAlloc-m0.TotalAlloc)
		}
		if got > 2*uint64(len(b))+4096 {
			t.Fatalf("decoding %d bytes allocated %d bytes", len(b), got)
		}
		if err != nil {
			return
		}
		if fn.Len() > limit || fn.SizeBits() > 8*len(b) {
			t.Fatalf("accepted %d keys, %d bits from %d bytes with limit %d", fn.Len(), fn.SizeBits(), len(b), limit)
		}
		again, err := fn.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs: %v", err)
		}
		fn.Get(0x1234) // must not panic
		if v := fn.Value(0x5678); v>>uint(fn.Width()) != 0 {
			t.Fatalf("value %d wider than %d bits", v, fn.Width())
		}
	})
}

// TestMaxEncodedLen: the encoding of every size is within MaxEncodedLen.
func TestMaxEncodedLen(t *testing.T) {
	sizes := []int{0, 1, 2, 3, 7, 100, 1000, 5000, 1 << 16, 1<<20 + 3, 1<<22 + 1<<14, 1 << 26}
	for n := range 300 {
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		l := layoutFor(n)
		enc := 1 + uvarintLen(uint64(n)) + 8 + int((uint64(l.arrayLen)+7)/8)
		if enc > MaxEncodedLen(n) {
			t.Errorf("%d keys encode to %d bytes, bound %d", n, enc, MaxEncodedLen(n))
		}
	}
}
