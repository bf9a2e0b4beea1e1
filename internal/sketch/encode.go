package sketch

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Binary formats (version 1), all integers little-endian or varint:
//
//	LDS: "LDSk" | version=1 | uvarint rows | uvarint columns | uvarint vlda |
//	     flags byte (bit 0: byte counters) | rows x float64 sampling rate |
//	     uvarint count of non-empty cells | per non-empty cell, in index order:
//	     uvarint gap (cells skipped since the previous one) | varint S |
//	     varint SPM | varint SN | varint N | 8-byte D | [uvarint bytes]
//	LDA: "LDAk" | version=1 | uvarint banks | uvarint cells per bank |
//	     uvarint count of non-empty cells | per cell: uvarint gap |
//	     varint S | varint N | 8-byte D
//
// Empty cells cost nothing; the encoding is canonical (one byte string per
// sketch), which the decoder enforces.

const (
	ldsMagic      = "LDSk"
	ldaMagic      = "LDAk"
	formatVersion = 1
	ldsMinCell    = 1 + 1 + 1 + 1 + 1 + 8 // smallest encoded non-empty LDS cell
	ldaMinCell    = 1 + 1 + 1 + 8
)

// MarshalBinary encodes the sketch compactly.
func (l *LDS) MarshalBinary() ([]byte, error) {
	nonEmpty := 0
	for i, c := range l.cells {
		if !c.empty() || l.ByteCount(i) != 0 {
			nonEmpty++
		}
	}
	per := 5*5 + 8
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
	b = binary.AppendUvarint(b, uint64(nonEmpty))
	prev := -1
	for i, c := range l.cells {
		if c.empty() && l.ByteCount(i) == 0 {
			continue
		}
		b = binary.AppendUvarint(b, uint64(i-prev-1))
		prev = i
		b = binary.AppendVarint(b, c.S)
		b = binary.AppendVarint(b, c.SPM)
		b = binary.AppendVarint(b, c.SN)
		b = binary.AppendVarint(b, c.N)
		b = binary.LittleEndian.AppendUint64(b, c.D)
		if l.bytes != nil {
			b = binary.AppendUvarint(b, l.bytes[i])
		}
	}
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

func (d *decoder) u64(field string) uint64 {
	if d.err != nil {
		return 0
	}
	if d.remaining() < 8 {
		d.fail("%s: need 8 bytes, have %d", field, d.remaining())
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
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
		d.fail("format version %d, this build reads version %d", v, formatVersion)
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

// UnmarshalLDS decodes a sketch, refusing one of more than maxCells cells
// (maxCells <= 0 means MaxCells). Every dimension and count is checked
// before memory is allocated for it; it never panics.
func UnmarshalLDS(b []byte, maxCells int) (*LDS, error) {
	if maxCells <= 0 || maxCells > MaxCells {
		maxCells = MaxCells
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
	if p.Rows*p.Columns > maxCells {
		d.fail("%d x %d = %d cells exceeds the limit of %d", p.Rows, p.Columns, p.Rows*p.Columns, maxCells)
		return nil, d.err
	}
	if d.remaining() < 8*p.Rows {
		d.fail("sampling rates: need %d bytes, have %d", 8*p.Rows, d.remaining())
		return nil, d.err
	}
	p.Sampling = make([]float64, p.Rows)
	for i := range p.Sampling {
		p.Sampling[i] = math.Float64frombits(d.u64("sampling"))
	}
	if err := p.Validate(); err != nil {
		d.fail("invalid parameters: %v", err)
		return nil, d.err
	}
	total := p.Rows * p.Columns
	minCell := ldsMinCell
	if p.Bytes {
		minCell++
	}
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
	idx := -1
	for j := uint64(0); j < n && d.err == nil; j++ {
		gap := d.uvarint("cell gap")
		if d.err != nil {
			break // truncated: idx must not advance past a failed read
		}
		if gap >= uint64(total-idx-1) {
			d.fail("cell gap %d runs past the last cell", gap)
			break
		}
		idx += int(gap) + 1
		var c Cell
		c.S = d.varint("S")
		c.SPM = d.varint("SPM")
		c.SN = d.varint("SN")
		c.N = d.varint("N")
		c.D = d.u64("D")
		var by uint64
		if p.Bytes {
			by = d.uvarint("bytes")
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
	b := make([]byte, 0, 32+nonEmpty*(5+5+5+8))
	b = append(b, ldaMagic...)
	b = append(b, formatVersion)
	b = binary.AppendUvarint(b, uint64(a.p.Banks))
	b = binary.AppendUvarint(b, uint64(a.p.Cells))
	b = binary.AppendUvarint(b, uint64(nonEmpty))
	prev := -1
	for i, c := range a.cells {
		if c == (LDACell{}) {
			continue
		}
		b = binary.AppendUvarint(b, uint64(i-prev-1))
		prev = i
		b = binary.AppendVarint(b, c.S)
		b = binary.AppendVarint(b, c.N)
		b = binary.LittleEndian.AppendUint64(b, c.D)
	}
	return b, nil
}

// UnmarshalLDA decodes an aggregator of at most maxCells cells (<= 0 means
// MaxLDABanks*MaxLDACells), checking before allocating; it never panics.
func UnmarshalLDA(b []byte, maxCells int) (*LDA, error) {
	if maxCells <= 0 || maxCells > MaxLDABanks*MaxLDACells {
		maxCells = MaxLDABanks * MaxLDACells
	}
	d := &decoder{b: b, what: "LDA"}
	d.header(ldaMagic)
	var p LDAParams
	p.Banks = d.bounded("banks", 1, MaxLDABanks)
	p.Cells = d.bounded("cells", 2, MaxLDACells)
	if d.err != nil {
		return nil, d.err
	}
	if err := p.Validate(); err != nil {
		d.fail("invalid parameters: %v", err)
		return nil, d.err
	}
	total := p.Banks * p.Cells
	if total > maxCells {
		d.fail("%d x %d = %d cells exceeds the limit of %d", p.Banks, p.Cells, total, maxCells)
		return nil, d.err
	}
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
	idx := -1
	for j := uint64(0); j < n && d.err == nil; j++ {
		gap := d.uvarint("cell gap")
		if d.err != nil {
			break // truncated: idx must not advance past a failed read
		}
		if gap >= uint64(total-idx-1) {
			d.fail("cell gap %d runs past the last cell", gap)
			break
		}
		idx += int(gap) + 1
		var c LDACell
		c.S = d.varint("S")
		c.N = d.varint("N")
		c.D = d.u64("D")
		if d.err == nil && c == (LDACell{}) {
			d.fail("cell %d is encoded but empty (non-canonical)", idx)
		}
		a.cells[idx] = c
	}
	if d.err == nil && d.remaining() != 0 {
		d.fail("%d trailing bytes", d.remaining())
	}
	if d.err != nil {
		return nil, d.err
	}
	return a, nil
}
