package sample

import "math/bits"

// bitWriter appends bits, most significant first.
type bitWriter struct {
	b    []byte
	acc  uint64
	nacc uint
}

func (w *bitWriter) write(v uint64, n uint) {
	for n > 0 {
		take := min(n, 56-w.nacc)
		w.acc = w.acc<<take | (v>>(n-take))&(1<<take-1)
		w.nacc += take
		n -= take
		for w.nacc >= 8 {
			w.b = append(w.b, byte(w.acc>>(w.nacc-8)))
			w.nacc -= 8
		}
	}
}

// rice writes v as v>>k in unary (ones, then a zero) and its k low bits.
func (w *bitWriter) rice(v uint64, k uint) {
	for q := v >> k; q > 0; q-- {
		w.write(1, 1)
	}
	w.write(0, 1)
	w.write(v, k)
}

// flush pads the last byte with zeros.
func (w *bitWriter) flush() []byte {
	if w.nacc > 0 {
		w.b = append(w.b, byte(w.acc<<(8-w.nacc)))
		w.nacc = 0
	}
	return w.b
}

// bitReader reads what bitWriter wrote; reading past the end sets bad.
type bitReader struct {
	b   []byte
	pos uint // bit position
	bad bool
}

func (r *bitReader) read(n uint) uint64 {
	var v uint64
	for ; n > 0; n-- {
		if r.pos >= uint(len(r.b))*8 {
			r.bad = true
			return 0
		}
		v = v<<1 | uint64(r.b[r.pos>>3]>>(7-r.pos&7)&1)
		r.pos++
	}
	return v
}

// rice reads a value written by bitWriter.rice; a quotient that would
// overflow 64 bits is an error.
func (r *bitReader) rice(k uint) uint64 {
	var q uint64
	for r.read(1) == 1 {
		if r.bad || q >= 1<<(63-k) {
			r.bad = true
			return 0
		}
		q++
	}
	return q<<k | r.read(k)
}

// riceParam is the Rice parameter for values of the given sum and count:
// about log2 of their mean.
func riceParam(sum uint64, n int) uint {
	if n == 0 || sum < uint64(n) {
		return 0
	}
	return uint(bits.Len64(sum/uint64(n))) - 1
}
