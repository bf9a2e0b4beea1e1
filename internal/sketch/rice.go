package sketch

import (
	"encoding/binary"
	"math/bits"
)

// Cell fields travel as columns of Rice codes (docs/sketch.md, "Encoding"):
// a value v with parameter k is ⌊v/2^k⌋ in unary (that many 1 bits, then a
// 0) followed by its k low bits. A quotient of riceEscape or more is sent
// as riceEscape 1 bits and the value's 64 raw bits instead, which bounds
// what one value can cost (and what a hostile encoding can make a decoder
// read) whatever k is.
const riceEscape = 48

// riceBits is the cost of v with parameter k.
func riceBits(v uint64, k uint) int {
	if q := v >> k; q < riceEscape {
		return int(q) + 1 + int(k)
	}
	return riceEscape + 64
}

// riceParam picks the k that codes vals in the fewest bits (the smallest
// such k): encoder and decoder both run it, so that the encoding is
// canonical. Outliers make the cost non-convex in k, so every k is costed
// exactly, in one pass: a value of bit length L costs 1+k for k >= L and
// is escaped for k < L-6 (its quotient is then at least 64); only the six
// k in between need the value itself.
func riceParam(vals []uint64) uint {
	var cnt [65]int  // values by bit length
	var quot [64]int // Σ of the quotients v>>k of the values with k in [L-6, L) not escaped
	var esc [64]int  // values escaped at k = L-6
	for _, v := range vals {
		l := bits.Len64(v)
		cnt[l]++
		if l < 6 {
			for k := 0; k < l; k++ {
				quot[k] += int(v >> k) // < 32: never escaped
			}
			continue
		}
		// k = L-1 .. L-5: quotients in [1, 32), never escaped; k = L-6:
		// [32, 64), escaped from riceEscape on.
		quot[l-1] += int(v >> (l - 1))
		quot[l-2] += int(v >> (l - 2))
		quot[l-3] += int(v >> (l - 3))
		quot[l-4] += int(v >> (l - 4))
		quot[l-5] += int(v >> (l - 5))
		if q := v >> (l - 6); q < riceEscape {
			quot[l-6] += int(q)
		} else {
			esc[l-6]++
		}
	}
	best, bestK := -1, uint(0)
	for k := 0; k < 64; k++ {
		c, near := quot[k], 0
		for l, n := range cnt {
			switch {
			case l <= k:
				c += n * (1 + k)
			case l > k+6:
				c += n * (riceEscape + 64)
			default:
				near += n
			}
		}
		c += (near-esc[k])*(1+k) + esc[k]*(riceEscape+64)
		if best < 0 || c < best {
			best, bestK = c, uint(k)
		}
	}
	return bestK
}

// bitWriter appends bits to a byte slice, least significant bit first.
type bitWriter struct {
	b    []byte
	acc  uint64
	nacc uint
}

func (w *bitWriter) write(v uint64, n uint) {
	if n < 64 {
		v &= 1<<n - 1
	}
	for n > 0 {
		// nacc < 8 here, so at least 57 bits are free; bits of v that do
		// not fit are shifted out and written on the next round.
		take := min(n, 64-w.nacc)
		w.acc |= v << w.nacc
		w.nacc += take
		if take < 64 {
			v >>= take
		}
		n -= take
		for w.nacc >= 8 {
			w.b = append(w.b, byte(w.acc))
			w.acc >>= 8
			w.nacc -= 8
		}
	}
}

func (w *bitWriter) rice(v uint64, k uint) {
	q := v >> k
	if q >= riceEscape {
		w.write(1<<riceEscape-1, riceEscape)
		w.write(v, 64)
		return
	}
	w.write(1<<q-1, uint(q)+1) // q ones, then the terminating 0
	w.write(v, k)
}

// flush pads the last byte with zeros.
func (w *bitWriter) flush() []byte {
	if w.nacc > 0 {
		w.b = append(w.b, byte(w.acc))
		w.acc, w.nacc = 0, 0
	}
	return w.b
}

// bitReader reads what bitWriter wrote from b[off:], never past the end.
type bitReader struct {
	b   []byte
	pos int // bit position from the start of b
	bad bool
}

func (r *bitReader) read(n uint) uint64 {
	if r.pos+int(n) > 8*len(r.b) {
		r.bad = true
		r.pos = 8 * len(r.b)
		return 0
	}
	if n > 56 { // more than one look holds
		lo := r.read(32)
		return lo | r.read(n-32)<<32
	}
	v := r.peek() & (1<<n - 1)
	r.pos += int(n)
	return v
}

// peek returns the next up to 64 bits (fewer valid near the end; the
// caller checks positions against len).
func (r *bitReader) peek() uint64 {
	i := r.pos >> 3
	var w uint64
	if i+8 <= len(r.b) {
		w = binary.LittleEndian.Uint64(r.b[i:])
	} else {
		for j := len(r.b) - 1; j >= i; j-- {
			w = w<<8 | uint64(r.b[j])
		}
	}
	return w >> (r.pos & 7)
}

// rice reads one value; escaped reports a value sent raw.
func (r *bitReader) rice(k uint) (v uint64, escaped bool) {
	// The unary part: count the 1 bits in one look (at least 57 valid
	// bits, more than riceEscape+1).
	q := uint64(bits.TrailingZeros64(^r.peek()))
	q = min(q, riceEscape)
	if r.pos+int(q)+1 > 8*len(r.b) && !(q == riceEscape && r.pos+int(q) <= 8*len(r.b)) {
		r.bad = true
		r.pos = 8 * len(r.b)
		return 0, false
	}
	if q == riceEscape {
		r.pos += riceEscape
		return r.read(64), true
	}
	r.pos += int(q) + 1
	return q<<k | r.read(k), false
}

// zigzag maps signed to unsigned so that small magnitudes stay small.
func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// appendColumns writes the columns (each the same length) as one byte of
// Rice parameter per column, then one bit stream holding every column in
// turn, zero-padded to a byte; empty columns, nothing.
func appendColumns(b []byte, cols [][]uint64) []byte {
	if len(cols) == 0 || len(cols[0]) == 0 {
		return b
	}
	ks := make([]uint, len(cols))
	for j, c := range cols {
		ks[j] = riceParam(c)
		b = append(b, byte(ks[j]))
	}
	w := bitWriter{b: b}
	for j, c := range cols {
		for _, v := range c {
			w.rice(v, ks[j])
		}
	}
	return w.flush()
}

// columns reads what appendColumns wrote: len(cols) columns of n values
// each into cols (allocated by the caller: the count has been checked
// against the bytes left). It refuses a non-canonical encoding: a
// parameter other than the best, an escape a plain code could carry, or
// non-zero padding.
func (d *decoder) columns(cols [][]uint64) {
	if len(cols) == 0 || len(cols[0]) == 0 {
		return
	}
	ks := make([]uint, len(cols))
	for j := range cols {
		k := d.byte1("rice parameter")
		if d.err == nil && k > 63 {
			d.fail("rice parameter %d of column %d: out of range [0, 63]", k, j)
		}
		ks[j] = uint(k)
	}
	if d.err != nil {
		return
	}
	r := bitReader{b: d.b[d.off:]}
	for j, c := range cols {
		for i := range c {
			v, esc := r.rice(ks[j])
			if r.bad {
				d.fail("column %d truncated at value %d of %d", j, i, len(c))
				return
			}
			if esc && v>>ks[j] < riceEscape {
				d.fail("column %d value %d escaped but small (non-canonical)", j, i)
				return
			}
			c[i] = v
		}
	}
	if pad := r.pos & 7; pad != 0 && r.read(uint(8-pad)) != 0 {
		d.fail("non-zero padding after the cell columns")
		return
	}
	d.off += (r.pos + 7) / 8
	for j, c := range cols {
		if k := riceParam(c); k != ks[j] {
			d.fail("rice parameter %d of column %d, the best is %d (non-canonical)", ks[j], j, k)
			return
		}
	}
}
