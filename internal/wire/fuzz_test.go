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
			if !slices.IsSorted(si.Boundary) {
				t.Fatalf("boundary list not sorted")
			}
		}
	})
}

// FuzzDecodeHashes: never panics, never returns more than limit hashes (a
// negative limit allows none),
// and what it accepts is strictly increasing and survives a re-encoding.
func FuzzDecodeHashes(f *testing.F) {
	f.Add(EncodeHashes([]uint64{1, 5, 1 << 50}), 8)
	f.Add(EncodeHashes(nil), 0)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 1<<30)
	f.Add([]byte{3, 1, 0, 1}, 10)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		h, err := DecodeHashes(b, limit)
		if err != nil {
			return
		}
		if len(h) > max(limit, 0) {
			t.Fatalf("%d hashes over the limit %d", len(h), limit)
		}
		for i := 1; i < len(h); i++ {
			if h[i] <= h[i-1] {
				t.Fatalf("accepted a list that is not strictly increasing at %d: %d after %d", i, h[i], h[i-1])
			}
		}
		again, err := DecodeHashes(EncodeHashes(h), limit)
		if err != nil || !slices.Equal(again, h) {
			t.Fatalf("re-encoding %v: got %v, %v", h, again, err)
		}
	})
}
