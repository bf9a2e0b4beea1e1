package wire

import (
	"testing"

	"github.com/lds-net/lds/internal/sketch"
)

// BenchmarkEncode: one default-size interval (20k packets) into 256 KiB chunks.
func BenchmarkEncode(b *testing.B) {
	p := testParams()
	p.Sketch = sketch.DefaultParams()
	p.LDA = sketch.DefaultLDAParams()
	si := makeInterval(b, p, 1, 20000, 1)
	meta := testMeta()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(si, meta, 256<<10); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAssemble: the receiver's side of the same interval.
func BenchmarkAssemble(b *testing.B) {
	p := testParams()
	p.Sketch = sketch.DefaultParams()
	p.LDA = sketch.DefaultLDAParams()
	si := makeInterval(b, p, 1, 20000, 1)
	frames := encodeAll(b, 256<<10, si)
	var bytes int64
	for _, f := range frames {
		if c := f.GetChunk(); c != nil {
			bytes += int64(len(c.Data))
		}
	}
	lim := Limits{MaxSketchBytes: 256 << 20, MaxCells: p.Sketch.Rows*p.Sketch.Columns + 1<<22, MaxClasses: p.Classes}
	b.SetBytes(bytes)
	b.ReportAllocs()
	for b.Loop() {
		a := NewAssembler(p, lim)
		for _, f := range frames {
			if _, err := a.Frame(f); err != nil {
				b.Fatal(err)
			}
		}
	}
}
