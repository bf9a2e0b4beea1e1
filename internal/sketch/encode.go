package sketch

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Binary formats (version 2), all integers little-endian or varint:
//
//	LDS: "LDSk" | version=2 | uvarint rows | uvarint columns | uvarint vlda |
//	     flags byte (bit 0: byte counters) | rows x float64 sampling rate |
//	     varint m | uvarint count of non-empty cells | per non-empty cell, in
//	     index order: uvarint gap (cells skipped since the previous one) |
//	     varint S−N·m | varint SPM−SN·m | varint SN | varint N | 4-byte D |
//	     [uvarint bytes]
//	LDA: "LDAk" | version=2 | uvarint banks | uvarint cells per bank |
//	     varint m | uvarint count of non-empty cells | per cell: uvarint gap |
//	     varint S−N·m | varint N | 4-byte D
//
// m is the sketch's mean timestamp (rounded ΣS/ΣN over its cells): a cell's
// sum of timestamps then travels as its deviation from N·m, a few bits a
// cell fewer than the sum itself (~1 byte at 1 s intervals). Digests are 32
// bits (the packet hash's top half): they only tell whether two cells with
// equal counts hold the same packets, and a false match needs a loss and a
// misplaced packet in the same cell and then 2^-32 luck. Version 1 sent the
// plain sums and 64-bit digests (22 B a cell at 1 Mpps against 17).
//
// Empty cells cost nothing; the encoding is canonical (one byte string per
// sketch), which the decoder enforces.

const (
	ldsMagic      = "LDSk"
	ldaMagic      = "LDAk"
	formatVersion = 2
	ldsMinCell    = 4 // smallest encoded non-empty LDS cell: its digest (the columns take bits)
	ldaMinCell    = 4
)

// MaxEncodedLDS bounds the encoding of any sketch of parameters p: the
// header, and per cell six Rice-coded values (at most 65 bits each under
// the best parameter, which the encoder always picks) and a 4-byte digest.
// The receiver refuses more bytes for an LDS before buffering them.
func MaxEncodedLDS(p Params) int {
	return 64 + 8*p.Rows + 6 + (p.Rows*p.Columns*(6*65+32)+7)/8
}

// MaxEncodedLDA bounds the encoding of any aggregator of parameters p
// (three Rice-coded columns and a digest per cell).
func MaxEncodedLDA(p LDAParams) int {
	return 48 + 3 + (p.Banks*p.Cells*(3*65+32)+7)/8
}

// DigestBits is the width of a cell's digest (Cell.D, LDACell.D): the top
// bits of the packet hash.
const DigestBits = 32

// digest is what a packet adds (XOR) to a cell's digest.
func digest(pktHash uint64) uint64 { return pktHash >> (64 - DigestBits) }

// centre is the rounded mean timestamp ΣS/ΣN of a set of cells, 0 when
// they hold nothing. Encoder and decoder compute it from the same integers
// in the same order, so they agree bit for bit.
func centre(n int, cell func(i int) (s, w int64)) int64 {
	var ss, sn float64
	for i := 0; i < n; i++ {
		s, w := cell(i)
		ss += float64(s)
		sn += float64(w)
	}
	if sn == 0 {
		return 0
	}
	return int64(math.Round(ss / sn))
}

// MarshalBinary encodes the sketch compactly.
func (l *LDS) MarshalBinary() ([]byte, error) {
	nonEmpty := 0
	for i, c := range l.cells {
		if !c.empty() || l.ByteCount(i) != 0 {
			nonEmpty++
		}
	}
	per := 5*5 + 4
	if l.bytes != nil {
		per += 5
	}
	b := make([]byte, 0, 64+8*l.rows+nonEmpty*per)
	b = append(b, ldsMagic...)
	b = append(b, formatVersion)
	b = binary.AppendUvarint(b, uint64(l.p.Rows))
	b = binary.AppendUvarint(b, uint64(l.p.Columns))
	b = binary.AppendUvarint(b, uint64(l.p.VLDA))
	var flags byte
	if l.p.Bytes {
		flags |= 1
	}
	b = append(b, flags)
	for _, r := range l.p.Sampling {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r))
	}
	m := centre(len(l.cells), func(i int) (int64, int64) { return l.cells[i].S, l.cells[i].N })
	b = binary.AppendVarint(b, m)
	b = binary.AppendUvarint(b, uint64(nonEmpty))
	nCol := 5
	if l.bytes != nil {
		nCol++
	}
	cols := make([][]uint64, nCol)
	for j := range cols {
		cols[j] = make([]uint64, 0, nonEmpty)
	}
	digests := make([]byte, 0, 4*nonEmpty)
	prev := -1
	for i, c := range l.cells {
		if c.empty() && l.ByteCount(i) == 0 {
			continue
		}
		if c.D>>DigestBits != 0 {
			return nil, fmt.Errorf("encode LDS: cell %d has a digest wider than %d bits", i, DigestBits)
		}
		cols[0] = append(cols[0], uint64(i-prev-1))
		prev = i
		cols[1] = append(cols[1], zigzag(c.S-c.N*m))
		cols[2] = append(cols[2], zigzag(c.SPM-c.SN*m))
		cols[3] = append(cols[3], zigzag(c.SN))
		cols[4] = append(cols[4], zigzag(c.N))
		if l.bytes != nil {
			cols[5] = append(cols[5], l.bytes[i])
		}
		digests = binary.LittleEndian.AppendUint32(digests, uint32(c.D))
	}
	b = appendColumns(b, cols)
	b = append(b, digests...)
	return b, nil
}

// decoder reads varints and fixed fields, remembering the first error.
type decoder struct {
	b    []byte
	off  int
	what string
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("decode %s at byte %d: %s", d.what, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("%s: truncated or overlong varint", field)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("%s: truncated or overlong varint", field)
		return 0
	}
	d.off += n
	return v
}

// fixed returns the next n bytes, or nil (and the error) if fewer remain.
func (d *decoder) fixed(field string, n int) []byte {
	if d.err != nil {
		return nil
	}
	if d.remaining() < n {
		d.fail("%s: need %d bytes, have %d", field, n, d.remaining())
		return nil
	}
	d.off += n
	return d.b[d.off-n : d.off]
}

func (d *decoder) u64(field string) uint64 {
	if b := d.fixed(field, 8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) u32(field string) uint32 {
	if b := d.fixed(field, 4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) byte1(field string) byte {
	if d.err != nil {
		return 0
	}
	if d.remaining() < 1 {
		d.fail("%s: truncated", field)
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) header(magic string) {
	if len(d.b) < len(magic)+1 {
		d.fail("%d bytes is too short for a header", len(d.b))
		return
	}
	if string(d.b[:len(magic)]) != magic {
		d.fail("bad magic %q, want %q (not a %s encoding)", d.b[:len(magic)], magic, d.what)
		return
	}
	d.off = len(magic)
	if v := d.byte1("version"); v != formatVersion {
		d.fail("format version %d, this build reads version %d: run the same lds version at both ends", v, formatVersion)
	}
}

// bounded reads a uvarint that must lie in [lo, hi].
func (d *decoder) bounded(field string, lo, hi uint64) int {
	v := d.uvarint(field)
	if d.err == nil && (v < lo || v > hi) {
		d.fail("%s = %d: out of range [%d, %d]", field, v, lo, hi)
	}
	return int(min(v, hi))
}

// UnmarshalLDS decodes a sketch that must have exactly the parameters
// want, the dimensions both ends agreed on: a header that says anything
// else is refused before anything is allocated, so what a decode allocates
// is bounded by want (one sketch of want's size) and by len(b) (the
// columns of the cells present), whatever b holds. It never panics.
func UnmarshalLDS(b []byte, want Params) (*LDS, error) {
	if err := want.Validate(); err != nil {
		return nil, fmt.Errorf("decode LDS: the agreed parameters: %w", err)
	}
	d := &decoder{b: b, what: "LDS"}
	d.header(ldsMagic)
	var p Params
	p.Rows = d.bounded("rows", 1, MaxRows)
	p.Columns = d.bounded("columns", 1, MaxColumns)
	p.VLDA = d.bounded("vlda", 1, MaxVLDA)
	flags := d.byte1("flags")
	if d.err != nil {
		return nil, d.err
	}
	if flags&^1 != 0 {
		d.fail("unknown flags %#x", flags)
		return nil, d.err
	}
	p.Bytes = flags&1 != 0
	if p.Rows != want.Rows || p.Columns != want.Columns || p.VLDA != want.VLDA || p.Bytes != want.Bytes {
		d.fail("header says %d x %d cells, vlda %d, bytes %v; the agreed sketch is %d x %d, vlda %d, bytes %v",
			p.Rows, p.Columns, p.VLDA, p.Bytes, want.Rows, want.Columns, want.VLDA, want.Bytes)
		return nil, d.err
	}
	if d.remaining() < 8*p.Rows {
		d.fail("sampling rates: need %d bytes, have %d", 8*p.Rows, d.remaining())
		return nil, d.err
	}
	for i := 0; i < p.Rows; i++ {
		r, w := math.Float64frombits(d.u64("sampling")), 1.0
		if i < len(want.Sampling) {
			w = want.Sampling[i]
		}
		if r != w {
			d.fail("row %d samples at %v, the agreed sketch.sampling is %v", i, r, w)
			return nil, d.err
		}
	}
	p.Sampling = append([]float64(nil), want.Sampling...)
	total := p.Rows * p.Columns
	minCell := ldsMinCell
	if p.Bytes {
		minCell++
	}
	m := d.varint("mean timestamp")
	n := d.uvarint("cell count")
	if d.err == nil && (n > uint64(total) || n > uint64(d.remaining()/minCell)) {
		d.fail("%d non-empty cells claimed: the sketch has %d cells and %d bytes remain", n, total, d.remaining())
	}
	if d.err != nil {
		return nil, d.err
	}
	l, err := NewLDS(p)
	if err != nil {
		return nil, fmt.Errorf("decode LDS: %w", err)
	}
	nCol := 5
	if p.Bytes {
		nCol++
	}
	cols := make([][]uint64, nCol)
	for j := range cols {
		cols[j] = make([]uint64, n)
	}
	d.columns(cols)
	if d.err == nil && d.remaining() < 4*int(n) {
		d.fail("digests: need %d bytes, have %d", 4*n, d.remaining())
	}
	idx := -1
	for j := 0; j < int(n) && d.err == nil; j++ {
		gap := cols[0][j]
		if gap >= uint64(total-idx-1) {
			d.fail("cell gap %d runs past the last cell", gap)
			break
		}
		idx += int(gap) + 1
		var c Cell
		c.SN = unzigzag(cols[3][j])
		c.N = unzigzag(cols[4][j])
		c.S = unzigzag(cols[1][j]) + c.N*m
		c.SPM = unzigzag(cols[2][j]) + c.SN*m
		c.D = uint64(d.u32("D"))
		var by uint64
		if p.Bytes {
			by = cols[5][j]
		}
		if d.err == nil && c.empty() && by == 0 {
			d.fail("cell %d is encoded but empty (non-canonical)", idx)
		}
		l.cells[idx] = c
		if p.Bytes {
			l.bytes[idx] = by
		}
	}
	if d.err == nil && d.remaining() != 0 {
		d.fail("%d trailing bytes", d.remaining())
	}
	if d.err == nil && m != centre(len(l.cells), func(i int) (int64, int64) { return l.cells[i].S, l.cells[i].N }) {
		d.fail("mean timestamp %d is not the cells' (non-canonical)", m)
	}
	if d.err != nil {
		return nil, d.err
	}
	return l, nil
}

// MarshalBinary encodes the aggregator compactly.
func (a *LDA) MarshalBinary() ([]byte, error) {
	nonEmpty := 0
	for _, c := range a.cells {
		if c != (LDACell{}) {
			nonEmpty++
		}
	}
	b := make([]byte, 0, 32+nonEmpty*(5+5+5+4))
	b = append(b, ldaMagic...)
	b = append(b, formatVersion)
	b = binary.AppendUvarint(b, uint64(a.p.Banks))
	b = binary.AppendUvarint(b, uint64(a.p.Cells))
	m := centre(len(a.cells), func(i int) (int64, int64) { return a.cells[i].S, a.cells[i].N })
	b = binary.AppendVarint(b, m)
	b = binary.AppendUvarint(b, uint64(nonEmpty))
	cols := [][]uint64{make([]uint64, 0, nonEmpty), make([]uint64, 0, nonEmpty), make([]uint64, 0, nonEmpty)}
	digests := make([]byte, 0, 4*nonEmpty)
	prev := -1
	for i, c := range a.cells {
		if c == (LDACell{}) {
			continue
		}
		if c.D>>DigestBits != 0 {
			return nil, fmt.Errorf("encode LDA: cell %d has a digest wider than %d bits", i, DigestBits)
		}
		cols[0] = append(cols[0], uint64(i-prev-1))
		prev = i
		cols[1] = append(cols[1], zigzag(c.S-c.N*m))
		cols[2] = append(cols[2], zigzag(c.N))
		digests = binary.LittleEndian.AppendUint32(digests, uint32(c.D))
	}
	b = appendColumns(b, cols)
	b = append(b, digests...)
	return b, nil
}

// UnmarshalLDA decodes an aggregator that must have exactly the agreed
// parameters want, checked before allocating (as UnmarshalLDS); it never
// panics.
func UnmarshalLDA(b []byte, want LDAParams) (*LDA, error) {
	if err := want.Validate(); err != nil {
		return nil, fmt.Errorf("decode LDA: the agreed parameters: %w", err)
	}
	d := &decoder{b: b, what: "LDA"}
	d.header(ldaMagic)
	var p LDAParams
	p.Banks = d.bounded("banks", 1, MaxLDABanks)
	p.Cells = d.bounded("cells", 2, MaxLDACells)
	if d.err != nil {
		return nil, d.err
	}
	if p != want {
		d.fail("header says %d banks x %d cells, the agreed lda.banks/lda.cells are %d x %d", p.Banks, p.Cells, want.Banks, want.Cells)
		return nil, d.err
	}
	total := p.Banks * p.Cells
	m := d.varint("mean timestamp")
	n := d.uvarint("cell count")
	if d.err == nil && (n > uint64(total) || n > uint64(d.remaining()/ldaMinCell)) {
		d.fail("%d non-empty cells claimed: the aggregator has %d cells and %d bytes remain", n, total, d.remaining())
	}
	if d.err != nil {
		return nil, d.err
	}
	a, err := NewLDA(p)
	if err != nil {
		return nil, fmt.Errorf("decode LDA: %w", err)
	}
	cols := [][]uint64{make([]uint64, n), make([]uint64, n), make([]uint64, n)}
	d.columns(cols)
	if d.err == nil && d.remaining() < 4*int(n) {
		d.fail("digests: need %d bytes, have %d", 4*n, d.remaining())
	}
	idx := -1
	for j := 0; j < int(n) && d.err == nil; j++ {
		gap := cols[0][j]
		if gap >= uint64(total-idx-1) {
			d.fail("cell gap %d runs past the last cell", gap)
			break
		}
		idx += int(gap) + 1
		var c LDACell
		c.N = unzigzag(cols[2][j])
		c.S = unzigzag(cols[1][j]) + c.N*m
		c.D = uint64(d.u32("D"))
		if d.err == nil && c == (LDACell{}) {
			d.fail("cell %d is encoded but empty (non-canonical)", idx)
		}
		a.cells[idx] = c
	}
	if d.err == nil && d.remaining() != 0 {
		d.fail("%d trailing bytes", d.remaining())
	}
	if d.err == nil && m != centre(len(a.cells), func(i int) (int64, int64) { return a.cells[i].S, a.cells[i].N }) {
		d.fail("mean timestamp %d is not the cells' (non-canonical)", m)
	}
	if d.err != nil {
		return nil, d.err
	}
	return a, nil
}
