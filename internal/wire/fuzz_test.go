package wire

import (
	"encoding/binary"
	"slices"
	"testing"

	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
	"google.golang.org/protobuf/proto"
)

// streamBytes writes frames as the fuzz input format: a mode byte, then
// each frame as a uvarint length and its protobuf encoding.
func streamBytes(tb testing.TB, mode byte, frames []*ldsv1.SenderFrame) []byte {
	tb.Helper()
	b := []byte{mode}
	for _, f := range frames {
		m, err := proto.Marshal(f)
		if err != nil {
			tb.Fatal(err)
		}
		b = binary.AppendUvarint(b, uint64(len(m)))
		b = append(b, m...)
	}
	return b
}

// FuzzAssembler feeds random frame sequences to one stream's Assembler: it
// must never panic, stop at the first error (as the server does), and
// every Result must be either a voided id list or an interval of the
// agreed dimensions.
func FuzzAssembler(f *testing.F) {
	p := testParams()
	p.Sketch.Columns = 8
	p.LDA.Cells = 4
	a1 := makeInterval(f, p, 5, 40, 1)
	a2 := makeInterval(f, p, 6, 40, 2)
	good := encodeAll(f, 32, a1, a2)
	f.Add(streamBytes(f, 0, good))
	f.Add(streamBytes(f, 1, good))
	f.Add(streamBytes(f, 0, slices.Delete(slices.Clone(good), 3, 4)))
	f.Add(streamBytes(f, 1, good[1:]))
	f.Add([]byte{0, 2, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		mode, in := in[0], in[1:]
		lim := Limits{MaxSketchBytes: 64 << 10, MaxCells: 4096, MaxClasses: p.Classes}
		a := NewAssembler(p, lim)
		seq := uint64(0)
		for len(in) > 0 {
			n, k := binary.Uvarint(in)
			if k <= 0 || n > uint64(len(in)-k) {
				return
			}
			var fr ldsv1.SenderFrame
			if err := proto.Unmarshal(in[k:k+int(n)], &fr); err != nil {
				return
			}
			in = in[k+int(n):]
			if mode&1 == 1 {
				// Keep seq in order so that mutations reach the decoders
				// instead of voiding the interval.
				seq++
				fr.Seq = seq
			}
			res, err := a.Frame(&fr)
			if err != nil {
				return
			}
			if res == nil {
				continue
			}
			if res.VoidedOK {
				if len(res.VoidedIDs) == 0 || res.VoidedIDs[0] != res.Voided || res.Interval != nil {
					t.Fatalf("inconsistent voided result %+v", res)
				}
				continue
			}
			si := res.Interval
			if si == nil || si.Sk == nil || !si.Sk.LDS.Params().Equal(p.Sketch) || len(si.Sk.LDA) != p.Classes {
				t.Fatalf("built an interval that does not fit the agreed parameters: %+v", res)
			}
			for _, l := range si.Sk.LDA {
				if l.Params() != p.LDA {
					t.Fatalf("LDA of %+v, agreed %+v", l.Params(), p.LDA)
				}
			}
			if si.Split == nil || si.Split.Len() > lim.MaxCells || si.Split.SizeBits() > 8*lim.MaxSketchBytes {
				t.Fatalf("boundary function beyond the limits: %+v", si.Split)
			}
		}
	})
}
