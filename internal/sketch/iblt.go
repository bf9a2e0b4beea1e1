package sketch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"unsafe"
)

// The lost-packet table is an invertible Bloom lookup table (IBLT) of
// packet hashes, as LossRadar keeps one at each end of a segment: each end
// inserts every packet it places in an interval; the receiver subtracts
// its table from the sender's and peels the difference, which lists the
// hash of every packet one end saw and the other did not, as long as there
// are not many more of them than the table's capacity (docs/sketch.md,
// "The lost-packet table"). A cell holds only a count, the XOR of its
// packets' hashes and the XOR of their checks: the flow, identifier and
// send time of a lost packet come from the sender's packet log, asked
// for by hash (docs/protocol.md, "Lost packets"), so an insert touches 16
// bytes in each of three cells.
//
// Derivation (a wire contract like the LDS's; unchanged since format 1):
//
//	packet hash P: a = splitmix64(P ^ 0x6c6f73742d746162), b = splitmix64(P ^ 0x6c6f73742d636b73)
//	cell in sub-table 0 = fastRange(a, m),        m = cells/3
//	cell in sub-table 1 = m + fastRange(a>>32, m)
//	cell in sub-table 2 = 2m + fastRange(b, m)
//	check              = b >> 32 (32 bits)
//
// A cell is pure (holds one packet, or one packet's negation) when its
// count is ±1, its check equals the check of its hash and one of its
// hash's cells is this cell.

// Salts that keep the table's cells independent of the LDS's and LDA's
// (ASCII "lost-tab" and "lost-cks").
const (
	ibltSaltA = 0x6c6f73742d746162
	ibltSaltB = 0x6c6f73742d636b73
)

// IBLTHashes is the number of cells an item touches (one per sub-table).
const IBLTHashes = 3

// MaxIBLTCells bounds a table (4 Mi cells, 256 MiB): beyond any sensible
// capacity, far below what a hostile configuration could otherwise ask.
const MaxIBLTCells = 1 << 22

// IBLTCellsPerItem is the table's size per packet of capacity. Peeling a
// table with three hashes succeeds with high probability below 1/1.222
// items a cell; at 1.3 cells an item a table filled to its capacity of
// 1000 fails to peel ~1 % of the time, mostly because two packets share
// all three cells (probability ≈ n²/(2·(cells/3)³)); below capacity that
// falls fast (TestIBLTDecodeFailureRate, docs/sketch.md). Small tables
// take more cells an item (IBLTCells).
const IBLTCellsPerItem = 1.3

// ibltSmall is the size below which a table takes up to 2 cells an item:
// small tables sit closer to the peeling threshold.
const ibltSmall = 1300

// IBLTCells is the number of cells for a capacity (a multiple of 3):
// 1.3 a packet, but at least min(2·capacity, 1300).
func IBLTCells(capacity int) int {
	if capacity <= 0 {
		return 0
	}
	want := max(math.Ceil(float64(capacity)*IBLTCellsPerItem), float64(min(2*capacity, ibltSmall)))
	per := int(math.Ceil(want / IBLTHashes))
	return IBLTHashes * max(per, 1)
}

// ibltCell is one cell: the count, the XOR of its packets' checks and
// the XOR of their hashes (16 bytes).
type ibltCell struct {
	n   int32
	chk uint32
	h   uint64
}

// IBLT is one end's table of one interval. Not safe for concurrent use.
type IBLT struct {
	cells []ibltCell
	per   uint64 // cells per sub-table
	// wrapped: decoded from the wire, whose counts are the sender's modulo
	// 256; Subtract then yields the difference as an 8-bit signed count,
	// exact while no cell holds 128 or more differences (far beyond any
	// table that can peel).
	wrapped bool
}

// NewIBLT makes an empty table of cells cells (a positive multiple of 3,
// at most MaxIBLTCells; IBLTCells gives it for a capacity).
func NewIBLT(cells int) (*IBLT, error) {
	if cells <= 0 || cells%IBLTHashes != 0 || cells > MaxIBLTCells {
		return nil, fmt.Errorf("lost-packet table: %d cells: want a positive multiple of %d, at most %d", cells, IBLTHashes, MaxIBLTCells)
	}
	return &IBLT{cells: make([]ibltCell, cells), per: uint64(cells / IBLTHashes)}, nil
}

// IBLTBytes is the memory of a table of cells cells (ldsctl memory).
func IBLTBytes(cells int) int64 {
	if cells <= 0 {
		return 0
	}
	return int64(unsafe.Sizeof(IBLT{})) + int64(cells)*int64(unsafe.Sizeof(ibltCell{}))
}

// Cells is the table's size.
func (t *IBLT) Cells() int { return len(t.cells) }

// Reset empties the table.
func (t *IBLT) Reset() { clear(t.cells) }

func (t *IBLT) positions(h uint64) (p [IBLTHashes]uint64, chk uint32) {
	a := splitmix64(h ^ ibltSaltA)
	b := splitmix64(h ^ ibltSaltB)
	p[0] = fastRange(a, t.per)
	p[1] = t.per + fastRange(a>>32, t.per)
	p[2] = 2*t.per + fastRange(b, t.per)
	return p, uint32(b >> 32)
}

// Insert adds one packet by its hash (zero allocations).
func (t *IBLT) Insert(h uint64) { t.apply(h, 1) }

// apply adds sign times packet h. It is positions written out: the
// array and loop of positions cost four times as much a packet
// (BenchmarkIBLTInsert, 26 against 7 ns), and the sender inserts every
// packet it captures.
func (t *IBLT) apply(h uint64, sign int32) {
	a := splitmix64(h ^ ibltSaltA)
	b := splitmix64(h ^ ibltSaltB)
	per, chk := t.per, uint32(b>>32)
	cells := t.cells[: 3*per : 3*per]
	c0 := &cells[fastRange(a, per)]
	c1 := &cells[per+fastRange(a>>32, per)]
	c2 := &cells[2*per+fastRange(b, per)]
	c0.n, c0.chk, c0.h = c0.n+sign, c0.chk^chk, c0.h^h
	c1.n, c1.chk, c1.h = c1.n+sign, c1.chk^chk, c1.h^h
	c2.n, c2.chk, c2.h = c2.n+sign, c2.chk^chk, c2.h^h
}

// Merge adds o into t (the capture workers of one end).
func (t *IBLT) Merge(o *IBLT) error { return t.combine(o, 1) }

// Subtract removes o from t: the sender's table minus the receiver's
// leaves the packets only the sender saw (count +1) and those only the
// receiver saw (count −1).
func (t *IBLT) Subtract(o *IBLT) error { return t.combine(o, -1) }

func (t *IBLT) combine(o *IBLT, sign int32) error {
	if len(o.cells) != len(t.cells) {
		return fmt.Errorf("lost-packet table: combining %d cells with %d: both ends must use the same lost.capacity", len(o.cells), len(t.cells))
	}
	for i := range t.cells {
		c, d := &t.cells[i], &o.cells[i]
		if t.wrapped {
			c.n = int32(int8(uint8(c.n) + uint8(sign*d.n)))
		} else {
			c.n += sign * d.n
		}
		c.chk ^= d.chk
		c.h ^= d.h
	}
	return nil
}

// Copy returns an independent copy of t.
func (t *IBLT) Copy() *IBLT {
	return &IBLT{cells: append([]ibltCell(nil), t.cells...), per: t.per, wrapped: t.wrapped}
}

// pure reports whether cell i holds exactly one packet (or its negation).
func (t *IBLT) pure(i uint64) bool {
	c := &t.cells[i]
	if c.n != 1 && c.n != -1 {
		return false
	}
	p, chk := t.positions(c.h)
	return chk == c.chk && (p[0] == i || p[1] == i || p[2] == i)
}

// Peeled is one packet the difference lists: Sign +1 for a packet only the
// minuend (the sender) saw, −1 for one only the subtrahend (the receiver)
// saw.
type Peeled struct {
	Hash uint64
	Sign int8
}

// Peel lists the packets of a difference table, destroying it. Complete
// is true when the table emptied: every packet is listed. Otherwise the
// list holds what could be peeled and the rest is unknown. At most
// maxItems are listed (a table that would list more is incomplete), so
// that a hostile table costs at most that much memory and 2·cells peel
// steps.
func (t *IBLT) Peel(maxItems int) (items []Peeled, complete bool) {
	queue := make([]uint64, 0, 64)
	for i := range t.cells {
		if t.pure(uint64(i)) {
			queue = append(queue, uint64(i))
		}
	}
	steps := 0
	for len(queue) > 0 {
		i := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if !t.pure(i) {
			continue
		}
		if len(items) >= maxItems || steps >= 2*len(t.cells) {
			return items, false
		}
		steps++
		c := &t.cells[i]
		sign, h := c.n, c.h
		items = append(items, Peeled{Hash: h, Sign: int8(sign)})
		p, _ := t.positions(h)
		t.apply(h, -sign)
		for _, j := range p {
			if j != i && t.pure(j) {
				queue = append(queue, j)
			}
		}
	}
	for i := range t.cells {
		if t.cells[i] != (ibltCell{}) {
			return items, false
		}
	}
	return items, true
}

// Binary format of a table (version 2), little-endian:
//
//	"LI" 2                      magic, format version
//	uvarint cells
//	cells bytes                 counts modulo 256 (the receiver needs only
//	                            the difference of the two ends' counts,
//	                            which is small where the table can peel)
//	2 columns, each: 1 byte w (bytes per value, 0..8 for h, 0..4 for chk),
//	then cells values of w bytes: h, chk
//
// 13 bytes a cell; an empty column (no packet) takes one byte. Version 1
// (cells with every field of a packet's identity) is refused with a
// clear error.
const ibltMagic = "LI"

const ibltColumns = 2

// MaxEncodedIBLT bounds the encoding of a table of cells cells.
func MaxEncodedIBLT(cells int) int {
	return len(ibltMagic) + 1 + binary.MaxVarintLen64 + cells*(1+8+4) + ibltColumns
}

func (t *IBLT) column(j int, i int) uint64 {
	if j == 0 {
		return t.cells[i].h
	}
	return uint64(t.cells[i].chk)
}

func (t *IBLT) setColumn(j int, i int, v uint64) {
	if j == 0 {
		t.cells[i].h = v
		return
	}
	t.cells[i].chk = uint32(v)
}

// AppendBinary appends the table's encoding to b.
func (t *IBLT) AppendBinary(b []byte) []byte {
	b = append(b, ibltMagic...)
	b = append(b, formatVersionIBLT)
	b = binary.AppendUvarint(b, uint64(len(t.cells)))
	for i := range t.cells {
		b = append(b, uint8(t.cells[i].n))
	}
	var w [8]byte
	for j := range ibltColumns {
		var or uint64
		for i := range t.cells {
			or |= t.column(j, i)
		}
		width := (64 - bits.LeadingZeros64(or) + 7) / 8
		b = append(b, byte(width))
		for i := range t.cells {
			binary.LittleEndian.PutUint64(w[:], t.column(j, i))
			b = append(b, w[:width]...)
		}
	}
	return b
}

const formatVersionIBLT = 2

// IBLTFormat is the table's format version (in the configuration
// fingerprint: both ends must write and read the same).
const IBLTFormat = formatVersionIBLT

// UnmarshalIBLT decodes a table that must have exactly cells cells (the
// agreed capacity's); it allocates nothing beyond that table.
func UnmarshalIBLT(b []byte, cells int) (*IBLT, error) {
	t, err := NewIBLT(cells)
	if err != nil {
		return nil, err
	}
	d := &decoder{b: b, what: "lost-packet table"}
	if len(b) < len(ibltMagic)+1 || string(b[:len(ibltMagic)]) != ibltMagic {
		return nil, errors.New("decode lost-packet table: bad magic (not a lost-packet table encoding)")
	}
	d.off = len(ibltMagic)
	if v := d.byte1("version"); d.err == nil && v != formatVersionIBLT {
		d.fail("format version %d, this build reads version %d: run the same lds version at both ends", v, formatVersionIBLT)
	}
	if n := d.uvarint("cells"); d.err == nil && n != uint64(cells) {
		d.fail("%d cells, the agreed lost.capacity makes %d: configure the same lost.capacity at both ends", n, cells)
	}
	if counts := d.fixed("counts", cells); counts != nil {
		for i, v := range counts {
			t.cells[i].n = int32(v)
		}
	}
	t.wrapped = true
	for j := 0; j < ibltColumns && d.err == nil; j++ {
		width := int(d.byte1("column width"))
		limit := 8
		if j == 1 {
			limit = 4
		}
		if width > limit {
			d.fail("column %d: width %d bytes, at most %d", j, width, limit)
			break
		}
		raw := d.fixed("column", width*cells)
		if raw == nil {
			break
		}
		var w [8]byte
		for i := range cells {
			copy(w[:], raw[i*width:(i+1)*width])
			t.setColumn(j, i, binary.LittleEndian.Uint64(w[:]))
		}
	}
	if d.err == nil && d.remaining() != 0 {
		d.fail("%d trailing bytes", d.remaining())
	}
	if d.err != nil {
		return nil, d.err
	}
	return t, nil
}
