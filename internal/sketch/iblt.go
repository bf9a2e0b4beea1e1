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
// packet identities, as LossRadar keeps one at each end of a segment: each
// end inserts every packet it places in an interval; the receiver subtracts
// its table from the sender's and peels the difference, which lists every
// packet one end saw and the other did not, as long as there are not many
// more of them than the table's capacity (docs/sketch.md, "The lost-packet
// table").
//
// Derivation (version 1, a wire contract like the LDS's):
//
//	packet hash P: a = splitmix64(P ^ 0x6c6f73742d746162), b = splitmix64(P ^ 0x6c6f73742d636b73)
//	cell in sub-table 0 = fastRange(a, m),        m = cells/3
//	cell in sub-table 1 = m + fastRange(a>>32, m)
//	cell in sub-table 2 = 2m + fastRange(b, m)
//	check              = b >> 48 (16 bits)
//
// Every cell holds a signed count and the XOR of each field of the items
// in it. A cell is pure (holds one item, or one item's negation) when its
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

// Item flags: the address family and what the packet's ID is.
const (
	ItemV6        = 1 << 0
	ItemIDIPv4    = 1 << 1 // ID is the IPv4 identification
	ItemIDTCPSeq  = 1 << 2 // ID is the TCP sequence number
	itemFlagsMask = ItemV6 | ItemIDIPv4 | ItemIDTCPSeq
)

// IBLTItem is one packet's identity in the table: its packet hash, its
// flow's fields (capture.FlowKey's) and its own identifier.
type IBLTItem struct {
	Hash         uint64
	Src, Dst     [16]byte
	SPort, DPort uint16
	Proto        uint8
	Flags        uint8 // ItemV6 | ItemIDIPv4 | ItemIDTCPSeq
	ID           uint32
}

// ibltCell is one cell: the count and the XOR of every field of its
// items, packed in 64-bit words so that an insert is 7 XORs and an add.
type ibltCell struct {
	h                      uint64
	src0, src1, dst0, dst1 uint64
	pid                    uint64 // ports<<32 | id
	cm                     uint64 // chk | meta<<32, meta = proto | flags<<8
	n                      int32
}

func (c *ibltCell) chk() uint32   { return uint32(c.cm) }
func (c *ibltCell) meta() uint32  { return uint32(c.cm >> 32) }
func (c *ibltCell) ports() uint32 { return uint32(c.pid >> 32) }
func (c *ibltCell) id() uint32    { return uint32(c.pid) }

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
	return p, uint32(b >> 48)
}

// Insert adds one packet (zero allocations).
func (t *IBLT) Insert(it *IBLTItem) { t.apply(it, 1) }

func (t *IBLT) apply(it *IBLTItem, sign int32) {
	p, chk := t.positions(it.Hash)
	t.applyAt(it, sign, &p, chk)
}

func (t *IBLT) applyAt(it *IBLTItem, sign int32, p *[IBLTHashes]uint64, chk uint32) {
	s0 := binary.LittleEndian.Uint64(it.Src[0:8])
	s1 := binary.LittleEndian.Uint64(it.Src[8:16])
	d0 := binary.LittleEndian.Uint64(it.Dst[0:8])
	d1 := binary.LittleEndian.Uint64(it.Dst[8:16])
	pid := uint64(it.SPort)<<48 | uint64(it.DPort)<<32 | uint64(it.ID)
	cm := uint64(chk) | (uint64(it.Proto)|uint64(it.Flags)<<8)<<32
	cells := t.cells
	for _, i := range p {
		c := &cells[i]
		c.n += sign
		c.h ^= it.Hash
		c.src0 ^= s0
		c.src1 ^= s1
		c.dst0 ^= d0
		c.dst1 ^= d1
		c.pid ^= pid
		c.cm ^= cm
	}
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
		c.h ^= d.h
		c.src0 ^= d.src0
		c.src1 ^= d.src1
		c.dst0 ^= d.dst0
		c.dst1 ^= d.dst1
		c.pid ^= d.pid
		c.cm ^= d.cm
	}
	return nil
}

// Copy returns an independent copy of t.
func (t *IBLT) Copy() *IBLT {
	return &IBLT{cells: append([]ibltCell(nil), t.cells...), per: t.per, wrapped: t.wrapped}
}

// pure reports whether cell i holds exactly one item (or its negation).
func (t *IBLT) pure(i uint64) bool {
	c := &t.cells[i]
	if c.n != 1 && c.n != -1 {
		return false
	}
	p, chk := t.positions(c.h)
	return chk == c.chk() && (p[0] == i || p[1] == i || p[2] == i)
}

func (c *ibltCell) item() IBLTItem {
	it := IBLTItem{Hash: c.h, SPort: uint16(c.ports() >> 16), DPort: uint16(c.ports()), ID: c.id(),
		Proto: uint8(c.meta()), Flags: uint8(c.meta() >> 8)}
	binary.LittleEndian.PutUint64(it.Src[0:8], c.src0)
	binary.LittleEndian.PutUint64(it.Src[8:16], c.src1)
	binary.LittleEndian.PutUint64(it.Dst[0:8], c.dst0)
	binary.LittleEndian.PutUint64(it.Dst[8:16], c.dst1)
	return it
}

// Peeled is one item the difference lists: Sign +1 for a packet only the
// minuend (the sender) saw, −1 for one only the subtrahend (the receiver)
// saw.
type Peeled struct {
	IBLTItem
	Sign int8
}

// Peel lists the items of a difference table, destroying it. Complete is
// true when the table emptied: every item is listed. Otherwise the list
// holds what could be peeled and the rest is unknown. At most maxItems
// items are listed (a table that would list more is incomplete), so that
// a hostile table costs at most that much memory and 2·cells peel steps.
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
		sign := c.n
		it := c.item()
		items = append(items, Peeled{IBLTItem: it, Sign: int8(sign)})
		p, _ := t.positions(it.Hash)
		t.apply(&it, -sign)
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

// Binary format of a table (version 1), little-endian:
//
//	"LI" 1                      magic, format version
//	uvarint cells
//	cells bytes                 counts modulo 256 (the receiver needs only
//	                            the difference of the two ends' counts,
//	                            which is small where the table can peel)
//	9 columns, each: 1 byte w (bytes per value, 0..8; 0..4 for the
//	32-bit ones, 0..2 for chk), then cells values of w bytes: h, src0,
//	src1, dst0, dst1, chk, ports, id, meta
//
// A column whose values all fit in fewer bytes takes fewer (an IPv4-only
// link's address words take 4 of 8 bytes, its upper words none).
const ibltMagic = "LI"

const ibltColumns = 9

// MaxEncodedIBLT bounds the encoding of a table of cells cells.
func MaxEncodedIBLT(cells int) int {
	return len(ibltMagic) + 1 + binary.MaxVarintLen64 + cells*(1+5*8+2+3*4) + ibltColumns
}

func (t *IBLT) column(j int, i int) uint64 {
	c := &t.cells[i]
	switch j {
	case 0:
		return c.h
	case 1:
		return c.src0
	case 2:
		return c.src1
	case 3:
		return c.dst0
	case 4:
		return c.dst1
	case 5:
		return uint64(c.chk())
	case 6:
		return uint64(c.ports())
	case 7:
		return uint64(c.id())
	default:
		return uint64(c.meta())
	}
}

func (t *IBLT) setColumn(j int, i int, v uint64) {
	c := &t.cells[i]
	switch j {
	case 0:
		c.h = v
	case 1:
		c.src0 = v
	case 2:
		c.src1 = v
	case 3:
		c.dst0 = v
	case 4:
		c.dst1 = v
	case 5:
		c.cm = c.cm&^0xffffffff | uint64(uint32(v))
	case 6:
		c.pid = c.pid&0xffffffff | uint64(uint32(v))<<32
	case 7:
		c.pid = c.pid&^0xffffffff | uint64(uint32(v))
	default:
		c.cm = c.cm&0xffffffff | uint64(uint32(v))<<32
	}
}

// AppendBinary appends the table's encoding to b.
func (t *IBLT) AppendBinary(b []byte) []byte {
	b = append(b, ibltMagic...)
	b = append(b, formatVersion1IBLT)
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

const formatVersion1IBLT = 1

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
	if v := d.byte1("version"); d.err == nil && v != formatVersion1IBLT {
		d.fail("format version %d, this build reads version %d: run the same lds version at both ends", v, formatVersion1IBLT)
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
		switch {
		case j == 5:
			limit = 2
		case j > 5:
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

// ValidItem reports whether a peeled item's fields are consistent (flags
// known, an IPv4 item's address bytes beyond the fourth zero): a check
// that a decoded list holds plausible packets.
func (it *IBLTItem) ValidItem() bool {
	if it.Flags&^itemFlagsMask != 0 || it.Flags&(ItemIDIPv4|ItemIDTCPSeq) == ItemIDIPv4|ItemIDTCPSeq {
		return false
	}
	if it.Flags&ItemV6 == 0 {
		for i := 4; i < 16; i++ {
			if it.Src[i] != 0 || it.Dst[i] != 0 {
				return false
			}
		}
	}
	return true
}
