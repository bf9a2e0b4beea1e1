package sketch

import (
	"fmt"
	"unsafe"
)

// Cell is one LDS counter tuple. All fields are linear (sums or XOR), so
// sketches of the same interval merge exactly.
type Cell struct {
	S   int64  // Σ w·t, t = ns relative to the interval start (wrapping arithmetic is fine: only differences are used)
	SPM int64  // Σ σ·w·t, σ = ±1 from the packet hash (variance, LDA paper eq. 4)
	N   int64  // Σ w
	D   uint64 // XOR of packet digests (the top DigestBits bits of each packet hash)
	// SN is Σ σ·w, the signed weight. It is identical at both ends of a
	// usable cell and lets the estimator centre the sign-hash sum on the
	// flow mean: Σσ·w·(d-μ) = ΔSPM - μ·SN. Without it the variance comes
	// out as E[d²] - μ², which cancels catastrophically when the mean delay
	// is large against its spread (the usual case: propagation delay).
	SN int64
}

func (c Cell) empty() bool { return c == Cell{} }

// add counts one packet of weight wn at wt = wn·t, its sign σ from the low
// bit of z (its row's mix of the packet hash), its digest d.
func (c *Cell) add(wn, wt int64, z, d uint64) {
	m := -int64(z & 1) // 0 for σ = +1, -1 for σ = -1: (x^m)-m is σ·x
	c.S += wt
	c.SPM += (wt ^ m) - m
	c.SN += (wn ^ m) - m
	c.N += wn
	c.D ^= d
}

// LDS is a Lossy Difference Sketch (Sanjuàs-Cuxart et al., IMC 2011): R rows
// of C cells; a flow owns k adjacent cells per row (its virtual LDA) and
// each of its packets, if the row's sampling keeps it, updates one of them.
// It is not safe for concurrent use: give each capture worker its own and
// Merge them at the interval boundary.
type LDS struct {
	p     Params
	rows  int
	cols  uint64
	cmod  uint64 // modMagic(cols)
	k     uint64
	thr   [MaxRows]uint64 // sampling thresholds T_r
	cells []Cell          // row-major: index r*C + c
	bytes []uint64        // nil unless Params.Bytes
	// plain: k = 1, every row takes every packet, no byte counters (the
	// defaults): a packet's cells follow from its flow alone.
	plain bool
}

// NewLDS allocates an empty sketch.
func NewLDS(p Params) (*LDS, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sketch parameters: %w", err)
	}
	p = p.normalized()
	l := &LDS{
		p:     p,
		rows:  p.Rows,
		cols:  uint64(p.Columns),
		cmod:  modMagic(uint64(p.Columns)),
		k:     uint64(p.VLDA),
		cells: make([]Cell, p.Rows*p.Columns),
	}
	for r, rate := range p.Sampling {
		l.thr[r] = samplingThreshold(rate)
	}
	if p.Bytes {
		l.bytes = make([]uint64, p.Rows*p.Columns)
	}
	l.plain = l.k == 1 && !p.Bytes
	for r := range p.Rows {
		l.plain = l.plain && l.thr[r] >= 1<<32
	}
	return l, nil
}

// Params returns a copy of the parameters, Sampling filled to one rate per row.
func (l *LDS) Params() Params {
	p := l.p
	p.Sampling = append([]float64(nil), l.p.Sampling...)
	return p
}

// Len is the number of cells, R·C.
func (l *LDS) Len() int { return len(l.cells) }

// SamplingRate is the rate row r really applies: T_r / 2^32, which differs
// from the configured rate by less than 2^-32.
func (l *LDS) SamplingRate(row int) float64 {
	return float64(l.thr[row]) / (1 << 32)
}

// Update records one packet. flowHash and pktHash come from internal/capture;
// t is the capture time in ns relative to the interval start; w is the flow
// weight (paper section 4.1; 1 by default); size is the packet's wire length.
// It allocates nothing.
func (l *LDS) Update(flowHash, pktHash uint64, t int64, w uint32, size uint32) {
	l.update(flowHash, pktHash, t, w, size, nil)
}

// UpdateCount is Update that also counts the packet in comp, the flow's
// composition (len R·k, index r·k + vLDA offset, for each row that sampled
// it): the receiver's decode estimator needs it, and counting here spares a
// second pass over the rows' hashes. A nil comp counts nothing.
func (l *LDS) UpdateCount(flowHash, pktHash uint64, t int64, w uint32, size uint32, comp []uint32) {
	if comp != nil {
		_ = comp[l.rows*int(l.k)-1] // one bounds check, not one per row
	}
	l.update(flowHash, pktHash, t, w, size, comp)
}

func (l *LDS) update(flowHash, pktHash uint64, t int64, w uint32, size uint32, comp []uint32) {
	C := l.cols
	col, step := l.flowCols(flowHash)
	wn := int64(w)
	wt := wn * t
	k := l.k
	cells := l.cells
	d := digest(pktHash)
	for r := 0; r < l.rows; r++ {
		z := rowMix(pktHash, r)
		if z>>32 < l.thr[r] {
			c := col
			var off uint64
			if k > 1 {
				off = fastRange(z, k)
				c += off
				if c >= C {
					c -= C
				}
			}
			if comp != nil {
				comp[uint64(r)*k+off]++
			}
			i := uint64(r)*C + c
			cells[i].add(wn, wt, z, d)
			if l.bytes != nil {
				l.bytes[i] += uint64(size)
			}
		}
		col += step
		if col >= C {
			col -= C
		}
	}
}

// AppendLines appends the addresses of the memory the packet's update
// writes (its cell in every row that samples it, both ends of a cell that
// straddles two cache lines, and its byte counters), for a prefetch.
func (l *LDS) AppendLines(flowHash, pktHash uint64, dst []uintptr) []uintptr {
	var s Spot
	if l.Locate(flowHash, &s) {
		return l.AppendSpotLines(&s, dst) // one cell a row, in the column of the flow
	}
	var pos [MaxRows]int32 // Positions fills at most one a row: no allocation
	for _, i := range l.Positions(flowHash, pktHash, pos[:0]) {
		if i < 0 {
			continue // the row does not sample the packet
		}
		dst = appendSpan(dst, uintptr(unsafe.Pointer(&l.cells[i])), unsafe.Sizeof(Cell{}))
		if l.bytes != nil {
			dst = append(dst, uintptr(unsafe.Pointer(&l.bytes[i])))
		}
	}
	return dst
}

// appendSpan appends the address a of an object of n bytes, and that of
// its last byte where it lies on the next cache line.
func appendSpan(dst []uintptr, a, n uintptr) []uintptr {
	dst = append(dst, a)
	if (a^(a+n-1))&^63 != 0 {
		dst = append(dst, a+n-1)
	}
	return dst
}

// Positions appends, per row, the cell index r*C+c the packet updates, or -1
// where the row's sampling skips it. dst is reused (dst[:0]).
func (l *LDS) Positions(flowHash, pktHash uint64, dst []int32) []int32 {
	dst = dst[:0]
	C := l.cols
	col, step := l.flowCols(flowHash)
	for r := 0; r < l.rows; r++ {
		z := rowMix(pktHash, r)
		if z>>32 < l.thr[r] {
			c := col + fastRange(z, l.k)
			if c >= C {
				c -= C
			}
			dst = append(dst, int32(uint64(r)*C+c))
		} else {
			dst = append(dst, -1)
		}
		col += step
		if col >= C {
			col -= C
		}
	}
	return dst
}

// Sign is σ of the packet in a row (+1 or -1), as Update applies it.
func (l *LDS) Sign(pktHash uint64, row int) int64 {
	return 1 - 2*int64(rowMix(pktHash, row)&1)
}

// FlowCells returns the flow's vLDA in a row: columns first..first+k-1 mod C.
func (l *LDS) FlowCells(flowHash uint64, row int) (first int, k int) {
	return int(l.rowCol(flowHash, row)), int(l.k)
}

// flowCols returns the flow's column in row 0 and its step from row to
// row (double hashing: row r starts at (h1 + r·h2) mod C).
func (l *LDS) flowCols(flowHash uint64) (h1, h2 uint64) {
	return fastMod(flowHash&0xffffffff, l.cmod, l.cols), fastMod((flowHash>>32)|1, l.cmod, l.cols)
}

// rowCol is the first column of the flow's vLDA in row r.
func (l *LDS) rowCol(flowHash uint64, r int) uint64 {
	h1, h2 := l.flowCols(flowHash)
	return fastMod(h1+uint64(r)*h2, l.cmod, l.cols) // < 2^32: h1, h2 < C <= 2^24, r < MaxRows
}

// Cell returns cell i (index r*C + c).
func (l *LDS) Cell(i int) Cell { return l.cells[i] }

// ByteCount returns the byte counter of cell i (0 if Params.Bytes is off).
func (l *LDS) ByteCount(i int) uint64 {
	if l.bytes == nil {
		return 0
	}
	return l.bytes[i]
}

// Reset empties the sketch for the next interval, keeping its memory.
func (l *LDS) Reset() {
	clear(l.cells)
	clear(l.bytes)
}

// Merge adds o into l: S, SPM, SN, N and bytes add, D XORs. The result is
// exactly the sketch of both packet sets.
func (l *LDS) Merge(o *LDS) error {
	if !l.p.Equal(o.p) {
		return fmt.Errorf("merge sketches: parameters differ (%s); only sketches built with the same configuration merge", l.p.diff(o.p))
	}
	for i := range l.cells {
		a, b := &l.cells[i], &o.cells[i]
		a.S += b.S
		a.SPM += b.SPM
		a.SN += b.SN
		a.N += b.N
		a.D ^= b.D
	}
	for i := range l.bytes {
		l.bytes[i] += o.bytes[i]
	}
	return nil
}

// Equal reports whether both sketches have the same parameters and cells.
func (l *LDS) Equal(o *LDS) bool {
	if !l.p.Equal(o.p) {
		return false
	}
	for i := range l.cells {
		if l.cells[i] != o.cells[i] {
			return false
		}
	}
	for i := range l.bytes {
		if l.bytes[i] != o.bytes[i] {
			return false
		}
	}
	return true
}

// usable is the paper's test (Fig. 6 line 6) plus the signed count: the
// same packet set reached the cell at both ends.
func usable(s, r Cell) bool {
	return s.N == r.N && s.D == r.D && s.SN == r.SN
}

// UsableCellRatio is the fraction of usable cells among those non-empty at
// either end; NaN if the parameters differ or every cell is empty.
func UsableCellRatio(snd, rcv *LDS) float64 {
	if snd == nil || rcv == nil || !snd.p.Equal(rcv.p) {
		return nan
	}
	var used, good int
	for i := range snd.cells {
		s, r := snd.cells[i], rcv.cells[i]
		if s.empty() && r.empty() {
			continue
		}
		used++
		if usable(s, r) {
			good++
		}
	}
	if used == 0 {
		return nan
	}
	return float64(good) / float64(used)
}
