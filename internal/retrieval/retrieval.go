// Package retrieval is a static function (a "retrieval data structure")
// from 64-bit keys to values of a fixed width of w bits (1-16): built once
// from a key set and a value per key, it answers each key's value exactly
// in about 1.13-1.25·w bits a key, without storing the keys. A key outside
// the set gets an arbitrary answer.
//
// The layout is the 3-wise binary fuse graph of Graf & Lemire ("Binary Fuse
// Filters", 2022): a key hashes to three cells in three consecutive
// segments of a table of w-bit cells, and its value is the XOR of the
// three cells.
// Construction peels the hypergraph (a cell touched by one remaining key
// fixes that key's value) and assigns the cells in reverse peeling order;
// a seed whose graph does not peel is replaced by the next one. The
// peeling order follows the cells alone, so the function depends on the
// key set and values, not on the order the keys are given in (the
// construction visits them grouped by hash, for the cache; the encoding
// of fixed sets is held by TestBuildGolden). Filters
// store a hash-derived fingerprint in the cells; here the cell holds the
// value bit instead, so no filter library fits (see docs/protocol.md).
//
// The table's dimensions are a function of the key count computed in
// integers only, so that both ends of a stream agree on them whatever
// their floating-point arithmetic: the encoding carries just the key
// count, the value width, the seed and the cells.
package retrieval

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// Version is the first byte of the encoding; a decoder refuses any other.
// Version 1 (one bit a key, no width byte) is retired.
const Version = 2

// MaxWidth bounds the value width in bits.
const MaxWidth = 16

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
	width       uint32 // bits a value (and a cell)
	seed        uint64
	segLen      uint32
	segMask     uint32
	segCountLen uint32
	arrayLen    uint32
	bits        []uint64 // arrayLen cells of width bits, cell i at bits [i·width, (i+1)·width)
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

func newFunc(n, width int, seed uint64) *Func {
	l := layoutFor(n)
	return &Func{n: n, width: uint32(width), seed: seed, segLen: l.segLen, segMask: l.segLen - 1, segCountLen: l.segCount * l.segLen,
		arrayLen: l.arrayLen, bits: make([]uint64, (uint64(l.arrayLen)*uint64(width)+63)/64)}
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

// Width is the number of bits of a value.
func (f *Func) Width() int { return int(f.width) }

// SizeBits is the size of the table in bits.
func (f *Func) SizeBits() int { return int(f.arrayLen) * int(f.width) }

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

// cell reads cell i's width bits.
func (f *Func) cell(i uint32) uint64 {
	pos := uint64(i) * uint64(f.width)
	w, off := pos>>6, pos&63
	v := f.bits[w] >> off
	if off+uint64(f.width) > 64 {
		v |= f.bits[w+1] << (64 - off)
	}
	return v & (1<<f.width - 1)
}

// setCell ORs v (width bits) into cell i.
func (f *Func) setCell(i uint32, v uint64) {
	pos := uint64(i) * uint64(f.width)
	w, off := pos>>6, pos&63
	f.bits[w] |= v << off
	if off+uint64(f.width) > 64 {
		f.bits[w+1] |= v >> (64 - off)
	}
}

// Value returns key's value; for a key outside the set, an arbitrary one
// (below 2^Width).
func (f *Func) Value(key uint64) uint64 {
	if f.arrayLen == 0 {
		return 0
	}
	c := f.cells(mix(key, f.seed))
	return f.cell(c[0]) ^ f.cell(c[1]) ^ f.cell(c[2])
}

// Get is Value for a function of one-bit values: value != 0.
func (f *Func) Get(key uint64) bool { return f.Value(key) != 0 }

// Builder keeps the construction's scratch space between builds (one a
// boundary at the sender). Not safe for concurrent use.
type Builder struct {
	cells []peelCell
	queue []uint32
	order []peeled // peeled keys, in order
	hs    []uint64 // the keys' hashes under the seed, grouped by first cell
	vs    []uint16 // vs[i] is the value of the key hashed to hs[i]
	buck  []uint32 // the grouping's bucket offsets
}

// peelCell is one cell's state while peeling, in one place so that a key
// touching the cell costs one cache line: the XOR of the hashes and of
// the values of the keys touching it (when one is left, its hash and
// value), and their count << 2 | the XOR of the cell's slot (0-2) in them.
type peelCell struct {
	h     uint64
	count uint32
	v     uint16
}

// peeled is one peeled key: its hash, value and the slot it was peeled by.
type peeled struct {
	h    uint64
	v    uint16
	slot uint8
}

// Build makes the one-bit function mapping keys[i] to values[i]. Keys must
// be distinct (ErrDuplicateKey otherwise); their order does not matter.
func Build(keys []uint64, values []bool) (*Func, error) {
	var b Builder
	return b.Build(keys, values)
}

// Build is the package-level Build reusing b's scratch space.
func (b *Builder) Build(keys []uint64, values []bool) (*Func, error) {
	if len(values) != len(keys) {
		return nil, fmt.Errorf("retrieval: %d keys but %d values", len(keys), len(values))
	}
	return b.build(keys, func(i int) uint64 {
		if values[i] {
			return 1
		}
		return 0
	}, 1)
}

// BuildValues makes the function mapping keys[i] to values[i], each below
// 2^width (1 <= width <= MaxWidth). Keys must be distinct.
func (b *Builder) BuildValues(keys, values []uint64, width int) (*Func, error) {
	if len(values) != len(keys) {
		return nil, fmt.Errorf("retrieval: %d keys but %d values", len(keys), len(values))
	}
	if width < 1 || width > MaxWidth {
		return nil, fmt.Errorf("retrieval: value width %d outside 1-%d", width, MaxWidth)
	}
	for i, v := range values {
		if v>>uint(width) != 0 {
			return nil, fmt.Errorf("retrieval: value %d of key %d does not fit in %d bits", v, i, width)
		}
	}
	return b.build(keys, func(i int) uint64 { return values[i] }, width)
}

// WidthFor is the number of bits that holds every value up to maxValue.
func WidthFor(maxValue uint64) int { return max(1, bits.Len64(maxValue)) }

func (b *Builder) build(keys []uint64, value func(int) uint64, width int) (*Func, error) {
	if len(keys) > MaxKeys {
		return nil, fmt.Errorf("retrieval: %d keys exceed the maximum %d", len(keys), MaxKeys)
	}
	n := len(keys)
	rng := uint64(0x9e3779b97f4a7c15) ^ uint64(n)
	f := newFunc(n, width, 0)
	if n == 0 {
		return f, nil
	}
	b.cells = grow(b.cells, int(f.arrayLen))
	b.order = grow(b.order, n)
	b.hs = grow(b.hs, n)
	b.vs = grow(b.vs, n)
	for attempt := range maxAttempts {
		f.seed = splitmix(&rng)
		b.group(f.seed, keys, value)
		if b.peel(f) {
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
	// zero when its turn comes, so setting it fixes the key's XOR.
	for j := n - 1; j >= 0; j-- {
		k := &b.order[j]
		c := f.cells(k.h)
		s := k.slot
		other := f.cell(c[(s+1)%3]) ^ f.cell(c[(s+2)%3])
		if v := uint64(k.v) ^ other; v != 0 {
			f.setCell(c[s], v)
		}
	}
	return f, nil
}

// group fills hs with the keys' hashes under seed, ordered by their high
// bits (a counting sort into up to 4096 buckets), and vs with their
// keys' values. A key's first cell grows with its hash's high bits and
// its other two cells lie in the next two segments, so that peeling the
// keys in this order walks the table nearly in order instead of at
// random: the same function (it depends on the key set only, not on the
// order the keys are visited in), with far fewer cache misses once the
// table outgrows the cache.
func (b *Builder) group(seed uint64, keys []uint64, value func(int) uint64) {
	hs, vs := b.hs, b.vs
	shift := uint(64 - min(12, max(0, bits.Len(uint(len(keys)))-8)))
	if shift == 64 {
		for i, k := range keys {
			hs[i], vs[i] = mix(k, seed), uint16(value(i))
		}
		return
	}
	buck := grow(b.buck, 1<<(64-shift)+1)
	clear(buck)
	for _, k := range keys {
		buck[mix(k, seed)>>shift+1]++
	}
	for i := 1; i < len(buck); i++ {
		buck[i] += buck[i-1]
	}
	for i, k := range keys {
		h := mix(k, seed)
		p := buck[h>>shift]
		buck[h>>shift]++
		hs[p], vs[p] = h, uint16(value(i))
	}
	b.buck = buck
}

// peel tries f.seed over the hashes in b.hs; it fills b.order and
// reports whether every key peeled.
func (b *Builder) peel(f *Func) bool {
	cells := b.cells
	clear(cells)
	for i, h := range b.hs {
		v := b.vs[i]
		c := f.cells(h)
		for s := range uint32(3) {
			x := &cells[c[s]]
			x.count = (x.count + 4) ^ s
			x.h ^= h
			x.v ^= v
		}
	}
	q := b.queue[:0]
	for c := range cells {
		if cells[c].count>>2 == 1 {
			q = append(q, uint32(c))
		}
	}
	n := 0
	for len(q) > 0 {
		cell := &cells[q[len(q)-1]]
		q = q[:len(q)-1]
		if cell.count>>2 != 1 {
			continue // emptied since it was queued
		}
		h, v := cell.h, cell.v
		b.order[n] = peeled{h: h, v: v, slot: uint8(cell.count & 3)}
		n++
		c := f.cells(h)
		for t := range uint32(3) {
			x := &cells[c[t]]
			x.count = (x.count - 4) ^ t
			x.h ^= h
			x.v ^= v
			if x.count>>2 == 1 {
				q = append(q, c[t])
			}
		}
	}
	b.queue = q
	return n == len(b.hs)
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

// EncodedLen is the length of the encoding of a function of n keys and
// values of width bits.
func EncodedLen(n, width int) int {
	return 1 + uvarintLen(uint64(n)) + 1 + 8 + int((uint64(layoutFor(n).arrayLen)*uint64(width)+7)/8)
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// AppendBinary appends the encoding: Version, the key count (uvarint), the
// value width (one byte), the seed (8 bytes little-endian), then the
// table's bits (cell i at bits [i·width, (i+1)·width)), bit j in byte j/8
// at bit j%8, the last byte zero-padded.
func (f *Func) AppendBinary(b []byte) ([]byte, error) {
	b = slices.Grow(b, EncodedLen(f.n, int(f.width)))
	b = append(b, Version)
	b = binary.AppendUvarint(b, uint64(f.n))
	b = append(b, byte(f.width))
	b = binary.LittleEndian.AppendUint64(b, f.seed)
	nb := (f.SizeBits() + 7) / 8
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
	if len(rest) < 1 {
		return nil, errors.New("retrieval: truncated value width")
	}
	width := int(rest[0])
	if width < 1 || width > MaxWidth {
		return nil, fmt.Errorf("retrieval: value width %d outside 1-%d", width, MaxWidth)
	}
	rest = rest[1:]
	if len(rest) < 8 {
		return nil, fmt.Errorf("retrieval: truncated seed (%d of 8 bytes)", len(rest))
	}
	seed := binary.LittleEndian.Uint64(rest)
	rest = rest[8:]
	l := layoutFor(int(n))
	tableBits := uint64(l.arrayLen) * uint64(width)
	want := (tableBits + 7) / 8
	if uint64(len(rest)) != want {
		return nil, fmt.Errorf("retrieval: table of %d bytes, %d keys of %d bits need exactly %d (truncated or trailing bytes)", len(rest), n, width, want)
	}
	if r := tableBits % 8; r != 0 && rest[len(rest)-1]>>r != 0 {
		return nil, errors.New("retrieval: non-zero padding after the table")
	}
	f := newFunc(int(n), width, seed)
	for i, v := range rest {
		f.bits[i/8] |= uint64(v) << (8 * (i % 8))
	}
	return f, nil
}
