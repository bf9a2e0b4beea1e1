package wire

import (
	"encoding/binary"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/interval"

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
// must never panic, stop at the first error (as the server does), every
// Result must be either a voided id list or an interval of the agreed
// dimensions, and what it allocates (runtime.MemStats.TotalAlloc) stays
// within one interval of the agreed dimensions plus a bound proportional
// to the bytes received, whatever the headers inside say.
func FuzzAssembler(f *testing.F) {
	p := testParams()
	p.Sketch.Columns = 8
	p.LDA.Cells = 4
	p.LostCells = 30 // the lost-packet table travels too
	a1 := makeInterval(f, p, 5, 40, 1)
	a2 := makeInterval(f, p, 6, 40, 2)
	good := encodeAll(f, 32, a1, a2)
	f.Add(streamBytes(f, 0, good))
	f.Add(streamBytes(f, 1, good))
	f.Add(streamBytes(f, 0, slices.Delete(slices.Clone(good), 3, 4)))
	f.Add(streamBytes(f, 1, good[1:]))
	f.Add([]byte{0, 2, 0x08, 0x01})
	f.Add(streamBytes(f, 1, hostileStream(f, a1)))
	base := allocBytes(func() { _, _ = interval.NewSketches(p) })
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		mode, in := in[0], in[1:]
		lim := Limits{MaxSketchBytes: 64 << 10, MaxCells: 4096, MaxClasses: p.Classes}
		a := NewAssembler(p, lim)
		// Each End may build one interval of the agreed dimensions; the
		// rest is bounded by the bytes received.
		ends := uint64(0)
		var m0 runtime.MemStats
		runtime.ReadMemStats(&m0)
		defer func() {
			var m1 runtime.MemStats
			runtime.ReadMemStats(&m1)
			if got, allowed := m1.TotalAlloc-m0.TotalAlloc, (ends+1)*2*base+64*uint64(len(in))+64<<10; got > allowed {
				t.Fatalf("%d bytes of frames (%d Ends) made the assembler allocate %d bytes (allowed %d)", len(in), ends, got, allowed)
			}
		}()
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
			if fr.GetEnd() != nil {
				ends++
			}
			res, err := a.Frame(&fr)
			if err != nil {
				return
			}
			if res == nil {
				continue
			}
			switch res.Kind {
			case OutOfWindow:
				t.Fatalf("out of window without a window: %+v", res)
			case Voided:
				if len(res.Voided) == 0 || res.Interval != nil {
					t.Fatalf("inconsistent voided result %+v", res)
				}
				continue
			}
			si := res.Interval
			if res.Kind != Complete || si == nil || si.ID != res.ID || si.LDS == nil || !si.LDS.Params().Equal(p.Sketch) || len(si.LDA) != p.Classes {
				t.Fatalf("built an interval that does not fit the agreed parameters: %+v", res)
			}
			for _, l := range si.LDA {
				if l.Params() != p.LDA {
					t.Fatalf("LDA of %+v, agreed %+v", l.Params(), p.LDA)
				}
			}
			if si.Boundary == nil || si.Boundary.Len() > lim.MaxCells || si.Boundary.SizeBits() > 8*lim.MaxSketchBytes {
				t.Fatalf("boundary function beyond the limits: %+v", si.Boundary)
			}
		}
	})
}

// allocBytes is what f allocates on the heap (runtime.MemStats.TotalAlloc).
func allocBytes(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// hostileStream is one interval whose LDS chunk is a 22-byte header
// announcing 1 x 4 Mi cells (the agreed sketch is far smaller).
func hostileStream(tb testing.TB, si *interval.SenderInterval) []*ldsv1.SenderFrame {
	tb.Helper()
	fr := encodeAll(tb, 1<<20, si)
	h := []byte("LDSk\x02")
	h = binary.AppendUvarint(h, 1)
	h = binary.AppendUvarint(h, 4<<20)
	h = binary.AppendUvarint(h, 1)
	h = append(h, 0)
	h = binary.LittleEndian.AppendUint64(h, math.Float64bits(1))
	h = append(h, 0, 0)
	for _, f := range fr {
		if c := f.GetChunk(); c != nil && c.Kind == ldsv1.ChunkKind_CHUNK_KIND_LDS {
			c.Data = h
		}
	}
	return fr
}

// TestHostileLDSHeaderOverTheWire: the assembler refuses the hostile
// interval and allocates next to nothing for it.
func TestHostileLDSHeaderOverTheWire(t *testing.T) {
	p := testParams()
	a := NewAssembler(p, testLimits(p))
	var err error
	var got uint64
	for _, f := range hostileStream(t, makeInterval(t, p, 5, 40, 1)) {
		got += allocBytes(func() { _, err = a.Frame(f) })
		if err != nil {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "agreed") {
		t.Fatalf("hostile header: %v, want a refusal naming the agreed dimensions", err)
	}
	t.Logf("refused: %v; %d bytes allocated", err, got)
	if got > 1<<20 {
		t.Errorf("the assembler allocated %d bytes for a 22-byte LDS", got)
	}
}
