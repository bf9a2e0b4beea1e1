package retrieval

import (
	"fmt"
	"testing"
)

// BenchmarkBuild: one boundary's construction at the sender (off the
// packet path, once an interval), reusing the Builder as the sender does.
// ns/key = ns/op / keys.
func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 300_000, 2_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			keys, vals := randomSet(n, 1)
			var bl Builder
			if _, err := bl.Build(keys, vals); err != nil { // warm the scratch space
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := bl.Build(keys, vals); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/key")
		})
	}
}

// BenchmarkGet: one held packet's lookup at the receiver.
func BenchmarkGet(b *testing.B) {
	keys, vals := randomSet(100_000, 2)
	f, err := Build(keys, vals)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var ones int
	for i := range b.N {
		if f.Get(keys[i%len(keys)]) {
			ones++
		}
	}
	if ones < 0 {
		b.Fatal(ones)
	}
}

// BenchmarkUnmarshal: decoding one function of 100k keys at the receiver.
func BenchmarkUnmarshal(b *testing.B) {
	keys, vals := randomSet(100_000, 3)
	f, _ := Build(keys, vals)
	enc, _ := f.MarshalBinary()
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	for range b.N {
		if _, err := Unmarshal(enc, len(keys)); err != nil {
			b.Fatal(err)
		}
	}
}
