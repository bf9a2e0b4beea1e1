package sketch

import "math/bits"

// Hash derivation. This is a wire contract: a sender and a receiver must
// derive exactly the same cells, signs and sampling decisions from the two
// 64-bit hashes that internal/capture computes per packet. Any change to it
// bumps config.HashVersion, the fingerprint's one hash version.
// docs/sketch.md spells it out; TestHashDerivationV1 re-implements it from
// the document and checks the code against it.
//
//	flow hash F:   h1 = F & 0xffffffff, h2 = (F >> 32) | 1
//	               column of row r = (h1 + r*h2) mod C   (exact integer maths)
//	packet hash P: z_r = splitmix64(P + (r+1)*gamma)      (per LDS row r)
//	               sampled in row r   iff  z_r>>32 < T_r,  T_r = floor(p_r * 2^32)
//	               vLDA offset        =  ((z_r & 0xffffffff) * k) >> 32
//	               sign sigma         =  +1 if z_r&1 == 0, else -1
//	               digest             =  P
//	LDA:           z = splitmix64(P) (the "row -1" value), bank = min(clz(z), B-1),
//	               cell = ((z & 0xffffffff) * m) >> 32, sign = +1 on even cells.

const gamma = 0x9e3779b97f4a7c15 // splitmix64's increment (golden ratio)

// splitmix64 is the output function of Vigna's SplitMix64 generator: a
// cheap (two multiplies) bijective mixer whose every output bit depends on
// every input bit. Each LDS row feeds it a different input, so rows sample,
// place and sign packets independently of each other.
func splitmix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// rowMix is z_r of the derivation.
func rowMix(pktHash uint64, row int) uint64 {
	return splitmix64(pktHash + uint64(row+1)*gamma)
}

// fastRange maps the low 32 bits of x uniformly onto [0, n) (Lemire's
// multiply-shift; no division on the hot path).
// modMagic is M = ⌈2^64/d⌉ for fastMod (0 for d = 1, which fastMod
// handles: every remainder is 0).
func modMagic(d uint64) uint64 { return ^uint64(0)/d + 1 }

// fastMod is a % d for a, d < 2^32 (d > 0), M = modMagic(d): exact
// (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019)
// with two multiplications where a 64-bit division costs tens of cycles.
// The flows' columns (double hashing, docs/sketch.md, "Hash derivation")
// take two remainders a packet, a sizeable part of a sketch update.
func fastMod(a, M, d uint64) uint64 {
	hi, _ := bits.Mul64(M*a, d)
	return hi
}

func fastRange(x uint64, n uint64) uint64 {
	return ((x & 0xffffffff) * n) >> 32
}

// samplingThreshold turns a rate in (0,1] into T = floor(p * 2^32); p = 1
// gives 2^32, which every 32-bit draw is below.
func samplingThreshold(p float64) uint64 {
	if p >= 1 {
		return 1 << 32
	}
	return uint64(p * (1 << 32))
}
