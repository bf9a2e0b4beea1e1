package sketch

import (
	"math/bits"
	"unsafe"
)

// SpotRows is the most rows a Spot holds. A sketch with more rows, or one
// that is not plain (LDS.Locate), takes Update's path.
const SpotRows = 8

// Spot is where the packets of one flow land in a plain LDS: the index
// r·C + c of their cell in each row. The sender's capture loop finds it
// once a packet (Locate), a few packets ahead, and both the prefetch of
// those cells (AppendSpotLines) and the update (UpdateSpot) read it,
// rather than each deriving the cells from the hashes again.
type Spot [SpotRows]uint32

// Locate fills s with the cells of the flow's packets and reports true
// when the sketch is plain (k = 1, every row takes every packet, no byte
// counters: a packet's cells follow from its flow alone) and has at most
// SpotRows rows. Otherwise it leaves s alone and reports false: use
// Update.
func (l *LDS) Locate(flowHash uint64, s *Spot) bool {
	if !l.plain || l.rows > SpotRows {
		return false
	}
	C := l.cols
	col, step := l.flowCols(flowHash)
	for r := range s[:l.rows] {
		s[r] = uint32(uint64(r)*C + col) // < 2^32: rows ≤ 8, C ≤ 2^24
		if col += step; col >= C {
			col -= C
		}
	}
	return true
}

// UpdateSpot is Update for a packet of a plain sketch whose cells Locate
// put in s (a sketch of the same parameters: the cells of another
// interval's sketch are the same). Each row's sign still comes from the
// packet hash, as in Update.
func (l *LDS) UpdateSpot(s *Spot, pktHash uint64, t int64, w uint32) {
	wn := int64(w)
	wt := wn * t
	d := digest(pktHash)
	cells := l.cells
	for r, i := range s[:l.rows] {
		cells[i].add(wn, wt, rowMix(pktHash, r), d)
	}
}

// AppendSpotLines appends, for a prefetch, the first and last byte of
// every cell in s (a cell may straddle two cache lines).
func (l *LDS) AppendSpotLines(s *Spot, dst []uintptr) []uintptr {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(l.cells)))
	const size = unsafe.Sizeof(Cell{})
	for _, i := range s[:l.rows] {
		a := base + uintptr(i)*size
		dst = append(dst, a, a+size-1)
	}
	return dst
}

// Locate is the index of the cell Update writes for the packet; UpdateAt
// and AppendCellLines take it, so that the hash is mixed once for both
// the prefetch and the update.
func (a *LDA) Locate(pktHash uint64) uint32 {
	z := splitmix64(pktHash)
	b := min(uint64(bits.LeadingZeros64(z)), uint64(a.p.Banks-1))
	return uint32(b*a.m + fastRange(z, a.m))
}

// UpdateAt is Update for the cell Locate found (an LDA of the same
// parameters).
func (a *LDA) UpdateAt(i uint32, pktHash uint64, t int64) {
	c := &a.cells[i]
	c.S += t
	c.N++
	c.D ^= digest(pktHash)
}

// AppendCellLines appends the first and last byte of cell i, for a
// prefetch.
func (a *LDA) AppendCellLines(i uint32, dst []uintptr) []uintptr {
	const size = unsafe.Sizeof(LDACell{})
	p := uintptr(unsafe.Pointer(unsafe.SliceData(a.cells))) + uintptr(i)*size
	return append(dst, p, p+size-1)
}
