// Package retrieval is a static function (a "retrieval data structure")
// from 64-bit keys to one bit: built once from a key set and a value per
// key, it answers each key's value exactly in about 1.13-1.25 bits a key,
// without storing the keys. A key outside the set gets an arbitrary answer.
//
// The layout is the 3-wise binary fuse graph of Graf & Lemire ("Binary Fuse
// Filters", 2022): a key hashes to three cells in three consecutive
// segments of a bit table, and its value is the XOR of the three bits.
// Construction peels the hypergraph (a cell touched by one remaining key
// fixes that key's value) and assigns the cells in reverse peeling order;
// a seed whose graph does not peel is replaced by the next one. Filters
// store a hash-derived fingerprint in the cells; here the cell holds the
// value bit instead, so no filter library fits (see docs/protocol.md).
//
// The table's dimensions are a function of the key count computed in
// integers only, so that both ends of a stream agree on them whatever
// their floating-point arithmetic: the encoding carries just the key
// count, the seed and the bits.
package retrieval

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// Version is the first byte of the encoding; a decoder refuses any other.
const Version = 1

// MaxKeys bounds one function: cell indices are 32-bit.
const MaxKeys = 1 << 30

// maxAttempts bounds the seeds tried. A random 3-wise fuse graph at these
// sizes fails to peel with a probability of a few per cent at most, so
// reaching this many means duplicate keys, which no seed can separate.
const maxAttempts = 100

// ErrDuplicateKey reports a key given twice: its two values could differ,
// and no table can hold both.
var ErrDuplicateKey = errors.New("retrieval: duplicate key")

// Func is an immutable static function; safe for concurrent Get.
type Func struct {
	n           int
	seed        uint64
	segLen      uint32
	segMask     uint32
	segCountLen uint32
	arrayLen    uint32
	bits        []uint64 // arrayLen bits, bit i at word i/64, bit i%64
}

type layout struct{ segLen, segCount, arrayLen uint32 }

// layoutFor sizes the table for n keys, following the binary fuse
// parameters (segment length 2^floor(log_3.33(n) + 2.25), at most 2^18;
// size factor max(1.125, 0.875 + 0.25·ln(10^6)/ln n)) with log2 n rounded
// down: a slightly larger table, never a smaller one.
func layoutFor(n int) layout {
	if n <= 0 {
		return layout{}
	}
	k := bits.Len64(uint64(n)) - 1 // floor(log2 n)
	e := min((k*100000/1735+225)/100, 18)
	segLen := uint64(1) << e
	capacity := uint64(0)
	if k > 0 {
		milli := max(1125, 875+4983/uint64(k)) // 0.25·log2(10^6) = 4.983
		capacity = (uint64(n)*milli + 999) / 1000
	}
	segCount := uint64(1)
	if c := (capacity + segLen - 1) / segLen; c > 2 {
		segCount = c - 2
	}
	return layout{segLen: uint32(segLen), segCount: uint32(segCount), arrayLen: uint32((segCount + 2) * segLen)}
}

func newFunc(n int, seed uint64) *Func {
	l := layoutFor(n)
	return &Func{n: n, seed: seed, segLen: l.segLen, segMask: l.segLen - 1, segCountLen: l.segCount * l.segLen,
		arrayLen: l.arrayLen, bits: make([]uint64, (uint64(l.arrayLen)+63)/64)}
}

// MaxEncodedLen bounds the encoding of a function of at most n keys:
// version, key count, seed, and a table of at most 5.9 bits a key (the
// size factor at the smallest sizes) plus three segments of up to 2^18
// bits.
func MaxEncodedLen(n int) int {
	return 1 + binary.MaxVarintLen64 + 8 + (59*max(n, 0)/10+3<<18)/8 + 1
}

// Len is the number of keys the function was built from.
func (f *Func) Len() int { return f.n }

// SizeBits is the size of the bit table.
func (f *Func) SizeBits() int { return int(f.arrayLen) }

// mix is MurmurHash3's 64-bit finalizer of key+seed: a bijection, so
// distinct keys never share a hash under one seed.
func mix(key, seed uint64) uint64 {
	h := key + seed
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// cells returns a hash's three cells, one in each of three consecutive
// segments starting at a segment chosen by the high bits.
func (f *Func) cells(h uint64) [3]uint32 {
	hi, _ := bits.Mul64(h, uint64(f.segCountLen))
	h0 := uint32(hi)
	h1 := h0 + f.segLen
	h2 := h1 + f.segLen
	h1 ^= uint32(h>>18) & f.segMask
	h2 ^= uint32(h) & f.segMask
	return [3]uint32{h0, h1, h2}
}

func (f *Func) bit(i uint32) uint64 { return f.bits[i>>6] >> (i & 63) & 1 }

// Get returns key's value; for a key outside the set, an arbitrary bit.
func (f *Func) Get(key uint64) bool {
	if f.arrayLen == 0 {
		return false
	}
	c := f.cells(mix(key, f.seed))
	return f.bit(c[0])^f.bit(c[1])^f.bit(c[2]) == 1
}

// Builder keeps the construction's scratch space between builds (one a
// boundary at the sender). Not safe for concurrent use.
type Builder struct {
	count []uint32 // per cell: keys touching it << 2 | XOR of the cell's slot (0-2) in those keys
	idx   []uint32 // per cell: XOR of the indices of the keys touching it
	queue []uint32
	order []uint32 // peeled keys, in order
	slot  []uint8  // the slot each peeled key was peeled by
}

// Build makes the function mapping keys[i] to values[i]. Keys must be
// distinct (ErrDuplicateKey otherwise); their order does not matter.
func Build(keys []uint64, values []bool) (*Func, error) {
	var b Builder
	return b.Build(keys, values)
}

// Build is the package-level Build reusing b's scratch space.
func (b *Builder) Build(keys []uint64, values []bool) (*Func, error) {
	if len(values) != len(keys) {
		return nil, fmt.Errorf("retrieval: %d keys but %d values", len(keys), len(values))
	}
	if len(keys) > MaxKeys {
		return nil, fmt.Errorf("retrieval: %d keys exceed the maximum %d", len(keys), MaxKeys)
	}
	n := len(keys)
	rng := uint64(0x9e3779b97f4a7c15) ^ uint64(n)
	f := newFunc(n, 0)
	if n == 0 {
		return f, nil
	}
	cells := int(f.arrayLen)
	b.count = grow(b.count, cells)
	b.idx = grow(b.idx, cells)
	b.order = grow(b.order, n)
	b.slot = grow(b.slot, n)
	for attempt := range maxAttempts {
		f.seed = splitmix(&rng)
		if b.peel(f, keys) {
			break
		}
		if attempt == 0 && hasDuplicate(keys) {
			return nil, ErrDuplicateKey
		}
		if attempt == maxAttempts-1 {
			return nil, fmt.Errorf("retrieval: %d keys did not peel with %d seeds", n, maxAttempts)
		}
	}
	// Assign in reverse peeling order: each key's peeling cell is still
	// free when its turn comes, so setting it fixes the key's XOR.
	for j := n - 1; j >= 0; j-- {
		i := b.order[j]
		c := f.cells(mix(keys[i], f.seed))
		s := b.slot[j]
		other := f.bit(c[(s+1)%3]) ^ f.bit(c[(s+2)%3])
		var v uint64
		if values[i] {
			v = 1
		}
		if v^other == 1 {
			f.bits[c[s]>>6] |= 1 << (c[s] & 63)
		}
	}
	return f, nil
}

// peel tries f.seed; it fills b.order/b.slot and reports whether every key peeled.
func (b *Builder) peel(f *Func, keys []uint64) bool {
	count, idx := b.count, b.idx
	clear(count)
	clear(idx)
	for i, k := range keys {
		c := f.cells(mix(k, f.seed))
		for s := range uint32(3) {
			count[c[s]] = (count[c[s]] + 4) ^ s
			idx[c[s]] ^= uint32(i)
		}
	}
	q := b.queue[:0]
	for c, v := range count {
		if v>>2 == 1 {
			q = append(q, uint32(c))
		}
	}
	peeled := 0
	for len(q) > 0 {
		cell := q[len(q)-1]
		q = q[:len(q)-1]
		if count[cell]>>2 != 1 {
			continue // emptied since it was queued
		}
		i := idx[cell]
		s := count[cell] & 3
		b.order[peeled], b.slot[peeled] = i, uint8(s)
		peeled++
		c := f.cells(mix(keys[i], f.seed))
		for t := range uint32(3) {
			x := c[t]
			count[x] = (count[x] - 4) ^ t
			idx[x] ^= i
			if count[x]>>2 == 1 {
				q = append(q, x)
			}
		}
	}
	b.queue = q
	return peeled == len(keys)
}

func hasDuplicate(keys []uint64) bool {
	s := slices.Clone(keys)
	slices.Sort(s)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			return true
		}
	}
	return false
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func splitmix(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// EncodedLen is the length of the encoding of a function of n keys.
func EncodedLen(n int) int {
	return 1 + uvarintLen(uint64(n)) + 8 + int((uint64(layoutFor(n).arrayLen)+7)/8)
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// AppendBinary appends the encoding: Version, the key count (uvarint), the
// seed (8 bytes little-endian), then the table, bit i in byte i/8 at bit
// i%8, the last byte zero-padded.
func (f *Func) AppendBinary(b []byte) ([]byte, error) {
	b = slices.Grow(b, EncodedLen(f.n))
	b = append(b, Version)
	b = binary.AppendUvarint(b, uint64(f.n))
	b = binary.LittleEndian.AppendUint64(b, f.seed)
	nb := (int(f.arrayLen) + 7) / 8
	for i := range nb {
		b = append(b, byte(f.bits[i/8]>>(8*(i%8))))
	}
	return b, nil
}

// MarshalBinary encodes f (see AppendBinary).
func (f *Func) MarshalBinary() ([]byte, error) { return f.AppendBinary(nil) }

// Unmarshal decodes AppendBinary's output, refusing more than maxKeys keys
// (and more than MaxKeys), before allocating anything; the table must be
// exactly the length the key count implies, with zero padding.
func Unmarshal(b []byte, maxKeys int) (*Func, error) {
	if len(b) == 0 {
		return nil, errors.New("retrieval: empty encoding")
	}
	if b[0] != Version {
		return nil, fmt.Errorf("retrieval: encoding version %d, this build reads version %d (upgrade both ends together)", b[0], Version)
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || k != uvarintLen(n) {
		return nil, errors.New("retrieval: bad key count (truncated or not minimally encoded)")
	}
	if n > uint64(max(maxKeys, 0)) || n > MaxKeys {
		return nil, fmt.Errorf("retrieval: %d keys exceed the limit %d", n, min(max(maxKeys, 0), MaxKeys))
	}
	rest := b[1+k:]
	if len(rest) < 8 {
		return nil, fmt.Errorf("retrieval: truncated seed (%d of 8 bytes)", len(rest))
	}
	seed := binary.LittleEndian.Uint64(rest)
	rest = rest[8:]
	l := layoutFor(int(n))
	want := (uint64(l.arrayLen) + 7) / 8
	if uint64(len(rest)) != want {
		return nil, fmt.Errorf("retrieval: table of %d bytes, %d keys need exactly %d (truncated or trailing bytes)", len(rest), n, want)
	}
	if r := l.arrayLen % 8; r != 0 && rest[len(rest)-1]>>r != 0 {
		return nil, errors.New("retrieval: non-zero padding after the table")
	}
	f := newFunc(int(n), seed)
	for i, v := range rest {
		f.bits[i/8] |= uint64(v) << (8 * (i % 8))
	}
	return f, nil
}
