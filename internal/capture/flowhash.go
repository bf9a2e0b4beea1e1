package capture

import (
	"encoding/binary"
	"math/bits"

	"github.com/zeebo/xxh3"
)

// flowHasher computes xxh3.HashSeed(k.AppendBinary(nil), seed) for a flow
// key without building the byte string: the key has two fixed lengths (14
// bytes IPv4, 38 IPv6), each of which takes one branch of XXH3-64 (9–16
// and 17–128 bytes), and the seeded secret words of that branch are
// precomputed. Per packet that spares the append and the length dispatch,
// about a third of the flow hash's cost (BenchmarkFlowHash). The output is
// the library's bit for bit (TestFlowHasherMatchesXXH3, FuzzFlowHasher):
// the hash version does not change.
type flowHasher struct {
	v4lo, v4hi uint64    // 9–16 bytes: (secret[24:32] ^ secret[32:40]) + seed, (secret[40:48] ^ secret[48:56]) - seed
	v6         [8]uint64 // 17–128 bytes, l > 32: secret[0:64] words, +seed for even, -seed for odd
}

// pktHasher is xxh3.HashSeed(b, seed) with the 17–128-byte branch (every
// packet identity at the default payload_bytes: 31–99 bytes) inlined and
// its seeded secret words precomputed; other lengths go to the library.
// Bit for bit the library's (TestPktHasherMatchesXXH3, FuzzPktHasher).
type pktHasher struct {
	seed uint64
	s    [16]uint64 // secret[0:128] words, +seed for even, -seed for odd
}

// XXH3's default secret, bytes 0..63 as little-endian words (the XXH3
// specification's kSecret), and its avalanche and length constants.
const (
	xxhSecret00 = 0xbe4ba423396cfeb8
	xxhSecret08 = 0x1cad21f72c81017c
	xxhSecret16 = 0xdb979083e96dd4de
	xxhSecret24 = 0x1f67b3b7a4a44072
	xxhSecret32 = 0x78e5c0cc4ee679cb
	xxhSecret40 = 0x2172ffcc7dd05a82
	xxhSecret48 = 0x8e2443f7744608b8
	xxhSecret56 = 0x4c263a81e69035e0
	xxhSecret64 = 0xcb00c391bb52283c
	xxhSecret72 = 0xa32e531b8b65d088
	xxhSecret80 = 0x4ef90da297486471
	xxhSecret88 = 0xd8acdea946ef1938
	xxhSecret96 = 0x3f349ce33f76faa8
	xxhSecretA8 = 0x1d4f0bc7c7bbdcf9 // bytes 104..111
	xxhSecretB0 = 0x3159b4cd4be0518a // bytes 112..119
	xxhSecretB8 = 0x647378d9c97e9fc8 // bytes 120..127
	xxhPrime1   = 0x9e3779b185ebca87
	xxhAvalMul  = 0x165667919e3779f9
)

func newFlowHasher(seed uint64) flowHasher {
	return flowHasher{
		v4lo: (xxhSecret24 ^ xxhSecret32) + seed,
		v4hi: (xxhSecret40 ^ xxhSecret48) - seed,
		v6: [8]uint64{xxhSecret00 + seed, xxhSecret08 - seed, xxhSecret16 + seed, xxhSecret24 - seed,
			xxhSecret32 + seed, xxhSecret40 - seed, xxhSecret48 + seed, xxhSecret56 - seed},
	}
}

func newPktHasher(seed uint64) pktHasher {
	h := pktHasher{seed: seed}
	for i, w := range [16]uint64{xxhSecret00, xxhSecret08, xxhSecret16, xxhSecret24, xxhSecret32, xxhSecret40,
		xxhSecret48, xxhSecret56, xxhSecret64, xxhSecret72, xxhSecret80, xxhSecret88, xxhSecret96, xxhSecretA8,
		xxhSecretB0, xxhSecretB8} {
		if i%2 == 0 {
			h.s[i] = w + seed
		} else {
			h.s[i] = w - seed
		}
	}
	return h
}

// hash is the packet hash of the identity bytes b.
func (h *pktHasher) hash(b []byte) uint64 {
	l := len(b)
	if l <= 16 || l > 128 {
		return xxh3.HashSeed(b, h.seed)
	}
	r := func(i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }
	s := &h.s
	acc := uint64(l) * uint64(xxhPrime1)
	if l > 32 {
		if l > 64 {
			if l > 96 {
				acc += mulFold(r(48)^s[12], r(56)^s[13])
				acc += mulFold(r(l-64)^s[14], r(l-56)^s[15])
			}
			acc += mulFold(r(32)^s[8], r(40)^s[9])
			acc += mulFold(r(l-48)^s[10], r(l-40)^s[11])
		}
		acc += mulFold(r(16)^s[4], r(24)^s[5])
		acc += mulFold(r(l-32)^s[6], r(l-24)^s[7])
	}
	acc += mulFold(r(0)^s[0], r(8)^s[1])
	acc += mulFold(r(l-16)^s[2], r(l-8)^s[3])
	return xxhAvalanche(acc)
}

func xxhAvalanche(x uint64) uint64 {
	x ^= x >> 37
	x *= xxhAvalMul
	return x ^ x>>32
}

func mulFold(x, y uint64) uint64 {
	hi, lo := bits.Mul64(x, y)
	return hi ^ lo
}

// hash is the flow hash of k (unchanged since hash version 1).
func (h *flowHasher) hash(k *FlowKey) uint64 {
	// bytes 0..5 of the wire form: family, protocol, ports big endian
	fam := uint64(4)
	if k.V6 {
		fam = 6
	}
	head := fam | uint64(k.Proto)<<8 | uint64(bits.ReverseBytes16(k.SPort))<<16 | uint64(bits.ReverseBytes16(k.DPort))<<32
	if !k.V6 {
		// 14 bytes: words at 0 and 6.
		src := uint64(binary.LittleEndian.Uint32(k.Src[:4]))
		lo := (head | src<<48) ^ h.v4lo
		hi := (src | uint64(binary.LittleEndian.Uint32(k.Dst[:4]))<<32) ^ h.v4hi
		return xxhAvalanche(14 + bits.ReverseBytes64(lo) + hi + mulFold(lo, hi))
	}
	// 38 bytes: head (6), Src (16), Dst (16); words at 0, 8, 16, 24 and
	// at l-32 = 6, l-24 = 14, l-16 = 22, l-8 = 30.
	var b [40]byte
	binary.LittleEndian.PutUint64(b[0:], head)
	copy(b[6:22], k.Src[:])
	copy(b[22:38], k.Dst[:])
	w := func(i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }
	l, prime := uint64(38), uint64(xxhPrime1)
	acc := l * prime
	acc += mulFold(w(16)^h.v6[4], w(24)^h.v6[5])
	acc += mulFold(w(6)^h.v6[6], w(14)^h.v6[7])
	acc += mulFold(w(0)^h.v6[0], w(8)^h.v6[1])
	acc += mulFold(w(22)^h.v6[2], w(30)^h.v6[3])
	return xxhAvalanche(acc)
}
