package retrieval

import (
	"bytes"
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
		fn, err := Unmarshal(b, limit)
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
