package capture

import (
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
)

func randomKey(rng *rand.Rand, v6 bool) FlowKey {
	k := FlowKey{V6: v6, Proto: uint8(rng.Uint32()), SPort: uint16(rng.Uint32()), DPort: uint16(rng.Uint32())}
	n := 4
	if v6 {
		n = 16
	}
	for i := 0; i < n; i++ {
		k.Src[i], k.Dst[i] = byte(rng.Uint32()), byte(rng.Uint32())
	}
	return k
}

// The specialized hash must be the library's on the wire form: sender and
// receiver of different builds, and every stored hash, depend on it.
func TestFlowHasherMatchesXXH3(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, seed := range []uint64{0, 1, 1 << 63, ^uint64(0), rng.Uint64(), rng.Uint64()} {
		h := newFlowHasher(seed)
		for i := 0; i < 20000; i++ {
			k := randomKey(rng, i%2 == 1)
			want := xxh3.HashSeed(k.AppendBinary(nil), seed)
			if got := h.hash(&k); got != want {
				t.Fatalf("seed %#x key %v: got %#x, xxh3 %#x", seed, k, got, want)
			}
		}
	}
}

func FuzzFlowHasher(f *testing.F) {
	f.Add(uint64(0), []byte("0123456789abcdefghijklmnopqrstuvwxyz01"), uint16(1), uint16(2), uint8(6), false)
	f.Add(uint64(7), []byte{}, uint16(0), uint16(0), uint8(0), true)
	f.Fuzz(func(t *testing.T, seed uint64, addr []byte, sp, dp uint16, proto uint8, v6 bool) {
		k := FlowKey{V6: v6, SPort: sp, DPort: dp, Proto: proto}
		n := 4
		if v6 {
			n = 16
		}
		for i := 0; i < n && i < len(addr); i++ {
			k.Src[i] = addr[i]
			if j := i + n; j < len(addr) {
				k.Dst[i] = addr[j]
			}
		}
		h := newFlowHasher(seed)
		if got, want := h.hash(&k), xxh3.HashSeed(k.AppendBinary(nil), seed); got != want {
			t.Fatalf("got %#x, xxh3 %#x", got, want)
		}
	})
}

// BenchmarkFlowHash: the specialized flow hash against the library on the
// wire form (what Parser.finish did before).
func BenchmarkFlowHash(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, v6 := range []bool{false, true} {
		keys := make([]FlowKey, 1024)
		for i := range keys {
			keys[i] = randomKey(rng, v6)
		}
		name := map[bool]string{false: "v4", true: "v6"}[v6]
		h := newFlowHasher(42)
		var sink uint64
		b.Run(name+"/specialized", func(b *testing.B) {
			i := 0
			for b.Loop() {
				sink += h.hash(&keys[i&1023])
				i++
			}
		})
		b.Run(name+"/xxh3", func(b *testing.B) {
			var buf [FlowKeyBinaryLenV6]byte
			i := 0
			for b.Loop() {
				sink += xxh3.HashSeed(keys[i&1023].AppendBinary(buf[:0]), 42)
				i++
			}
		})
		_ = sink
	}
}

func TestPktHasherMatchesXXH3(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 300)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, seed := range []uint64{0, 1, 1 << 63, ^uint64(0), rng.Uint64()} {
		h := newPktHasher(seed)
		for l := 0; l <= len(buf); l++ {
			for off := 0; off < 3; off++ {
				b := buf[off : off+l-min(l, off)]
				if got, want := h.hash(b), xxh3.HashSeed(b, seed); got != want {
					t.Fatalf("seed %#x, %d bytes: got %#x, xxh3 %#x", seed, len(b), got, want)
				}
			}
		}
	}
}

func FuzzPktHasher(f *testing.F) {
	f.Add(uint64(0), []byte("0123456789abcdefghijklmnopqrstuvwxyz0123456789"))
	f.Fuzz(func(t *testing.T, seed uint64, b []byte) {
		h := newPktHasher(seed)
		if got, want := h.hash(b), xxh3.HashSeed(b, seed); got != want {
			t.Fatalf("%d bytes: got %#x, xxh3 %#x", len(b), got, want)
		}
	})
}
