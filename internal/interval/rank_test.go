package interval

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"testing"

	"github.com/lds-net/lds/internal/capture"
)

// TestCompareKeysOrder: the ranking's key order is the order of the keys'
// bytes (source, destination), then ports and protocol, as a byte-wise
// comparison gives it.
func TestCompareKeysOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	key := func() capture.FlowKey {
		var k capture.FlowKey
		for i := range k.Src {
			// Few distinct bytes, so that many keys share long prefixes.
			k.Src[i], k.Dst[i] = byte(rng.IntN(3)), byte(rng.IntN(3))
		}
		k.SPort, k.DPort, k.Proto = uint16(rng.IntN(3)), uint16(rng.IntN(3)), uint8(rng.IntN(3))
		return k
	}
	naive := func(a, b capture.FlowKey) int {
		return cmp.Or(bytes.Compare(a.Src[:], b.Src[:]), bytes.Compare(a.Dst[:], b.Dst[:]),
			cmp.Compare(a.SPort, b.SPort), cmp.Compare(a.DPort, b.DPort), cmp.Compare(a.Proto, b.Proto))
	}
	for range 100000 {
		a, b := key(), key()
		if rng.IntN(4) == 0 {
			b = a
			b.Dst[15-rng.IntN(16)] ^= 1
		}
		if got, want := compareKeys(&a, &b), naive(a, b); got != want {
			t.Fatalf("compareKeys(%v, %v) = %d, byte order gives %d", a, b, got, want)
		}
	}
}

// BenchmarkTop: the heavy-flow ranking of an interval, every flow with
// the same count (a paced test's flows), the worst case for the key order.
func BenchmarkTop(b *testing.B) {
	all := make([]kv, 4096)
	for i := range all {
		all[i].k.Src[15], all[i].k.Dst[15] = 10, 20
		all[i].k.SPort, all[i].v = uint16(i*7919), 100
	}
	work := make([]kv, len(all))
	b.ReportAllocs()
	for b.Loop() {
		copy(work, all)
		top(work, 1000)
	}
}
