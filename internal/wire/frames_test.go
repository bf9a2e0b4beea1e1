package wire

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/sketch"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
	"google.golang.org/protobuf/proto"
)

// TestEncodeAssembleRoundTrip: an interval split into chunks of any size
// comes back equal, field by field, to what was encoded.
func TestEncodeAssembleRoundTrip(t *testing.T) {
	p := testParams()
	for _, chunk := range []int{1, 7, 100, 1 << 20} {
		si := makeInterval(t, p, 1763000042, 3000, uint64(chunk))
		si.Partial, si.First, si.Trailer = chunk%2 == 1, chunk == 7, chunk == 100
		keysB := slices.Clone(si.Keys)
		frames := encodeAll(t, chunk, si)

		// The expected sketch byte count, computed from the blobs themselves.
		want := 0
		ldsB, _ := si.Sk.LDS.MarshalBinary()
		want += len(ldsB)
		for _, l := range si.Sk.LDA {
			b, _ := l.MarshalBinary()
			want += len(b)
		}
		bnd, _ := si.Split.MarshalBinary()
		want += len(bnd)
		if chunk == 1 && len(frames) != want+2 {
			t.Fatalf("chunk 1: %d frames, want one per byte plus Start and End (%d)", len(frames), want+2)
		}
		for _, f := range frames {
			if c := f.GetChunk(); c != nil && len(c.Data) > chunk {
				t.Fatalf("chunk of %d bytes exceeds chunkBytes %d", len(c.Data), chunk)
			}
		}

		a := NewAssembler(p, testLimits(p))
		var got *Result
		for i, f := range frames {
			res, err := a.Frame(f)
			if err != nil {
				t.Fatalf("chunk %d, frame %d: %v", chunk, i, err)
			}
			if res != nil {
				if i != len(frames)-1 {
					t.Fatalf("chunk %d: result at frame %d of %d", chunk, i, len(frames))
				}
				got = res
			}
		}
		if got == nil || got.Kind != Complete || got.Interval == nil || got.ID != si.ID {
			t.Fatalf("chunk %d: no complete interval: %+v", chunk, got)
		}
		g := got.Interval
		wantFlags := uint32(0)
		if si.Partial {
			wantFlags |= FlagPartial
		}
		if si.First {
			wantFlags |= FlagFirst
		}
		if si.Trailer {
			wantFlags |= FlagTrailer
		}
		if g.ID != si.ID || g.Flags != wantFlags {
			t.Errorf("chunk %d: id/flags = %d/%b, want %d/%b", chunk, g.ID, g.Flags, si.ID, wantFlags)
		}
		if !g.LDS.Equal(si.Sk.LDS) {
			t.Errorf("chunk %d: LDS differs after the round trip", chunk)
		}
		for c := range si.Sk.LDA {
			if !g.LDA[c].Equal(si.Sk.LDA[c]) {
				t.Errorf("chunk %d: LDA class %d differs", chunk, c)
			}
		}
		if tot := g.End.GetTotals(); tot.GetPackets() != si.Sk.Packets || tot.GetBytes() != si.Sk.Bytes || !slices.Equal(tot.GetClassPackets(), si.Sk.ClassPackets) {
			t.Errorf("chunk %d: totals %v, want %d/%d/%v", chunk, tot, si.Sk.Packets, si.Sk.Bytes, si.Sk.ClassPackets)
		}
		// The decoded boundary function answers every key with the
		// offset of its send interval (0, 1 and 2 here: two bits).
		if len(keysB) == 0 || g.Boundary == nil || g.Boundary.Width() != 2 {
			t.Fatalf("chunk %d: %d boundary keys, decoded function %v", chunk, len(keysB), g.Boundary)
		}
		wrong := 0
		for _, k := range keysB {
			if g.Boundary.Value(k.Hash) != uint64(k.Off) {
				wrong++
			}
		}
		if wrong > 0 || g.Boundary.Len() != len(keysB) {
			t.Errorf("chunk %d: %d boundary keys answered wrongly; %d keys, want %d", chunk, wrong, g.Boundary.Len(), len(keysB))
		}
		if len(si.Heavy) == 0 || !slices.Equal(g.Heavy, si.Heavy) {
			t.Errorf("chunk %d: heavy keys %v, want %v", chunk, g.Heavy, si.Heavy)
		}
		c, d, wm := g.End.GetClock(), g.End.GetDrops(), testMeta()
		gotClock := interval.ClockStatus{State: ptp.State(c.GetState()), OffsetNS: c.GetOffsetNs(), GrandmasterPresent: c.GetGrandmasterPresent(),
			GrandmasterID: c.GetGrandmasterId(), PortState: c.GetPortState(), Err: c.GetError()}
		if gotClock != wm.Clock || d.GetKernel() != wm.KernelDrops || d.GetInterface() != wm.IfDrops || d.GetAffecting() != wm.DropsAffecting {
			t.Errorf("chunk %d: clock %+v drops %v, want %+v", chunk, gotClock, d, wm)
		}
		wantParse := maps.Clone(wm.ParseDrops)
		wantParse["late"] = si.Late
		if !maps.Equal(d.GetParse(), wantParse) {
			t.Errorf("chunk %d: parse drops %v, want %v (the late count among them)", chunk, d.GetParse(), wantParse)
		}
		if g.SketchBytes != want {
			t.Errorf("chunk %d: SketchBytes %d, want %d", chunk, g.SketchBytes, want)
		}
	}
}

// outcome is what a frame sequence produced: built and voided interval ids.
type outcome struct {
	built, voided []int64
}

func run(t *testing.T, a *Assembler, frames []*ldsv1.SenderFrame) outcome {
	t.Helper()
	var o outcome
	for _, f := range frames {
		res, err := a.Frame(f)
		if err != nil {
			t.Fatalf("frame seq %d: %v", f.Seq, err)
		}
		if res == nil {
			continue
		}
		if res.Kind == Voided {
			if len(res.Voided) == 0 || res.Interval != nil {
				t.Fatalf("inconsistent voided result %+v", res)
			}
			o.voided = append(o.voided, res.Voided...)
		} else {
			o.built = append(o.built, res.Interval.ID)
		}
	}
	return o
}

// TestAssemblerSeqGaps: a gap voids exactly the intervals it touched; the
// intervals around it are built intact.
func TestAssemblerSeqGaps(t *testing.T) {
	p := testParams()
	ivs := []*interval.SenderInterval{makeInterval(t, p, 10, 400, 1), makeInterval(t, p, 11, 400, 2), makeInterval(t, p, 12, 400, 3)}
	// Frame indexes of each interval's Start and End in the numbered stream.
	frames := encodeAll(t, 200, ivs...)
	var starts, ends []int
	for i, f := range frames {
		if f.GetStart() != nil {
			starts = append(starts, i)
		}
		if f.GetEnd() != nil {
			ends = append(ends, i)
		}
	}
	if len(starts) != 3 || ends[1]-starts[1] < 4 {
		t.Fatalf("need 3 intervals of several chunks each, got starts %v ends %v", starts, ends)
	}
	drop := func(idx ...int) func([]*ldsv1.SenderFrame) []*ldsv1.SenderFrame {
		return func(fr []*ldsv1.SenderFrame) []*ldsv1.SenderFrame {
			var out []*ldsv1.SenderFrame
			for i, f := range fr {
				if !slices.Contains(idx, i) {
					out = append(out, f)
				}
			}
			return out
		}
	}
	span := func(from, to int) []int {
		var s []int
		for i := from; i <= to; i++ {
			s = append(s, i)
		}
		return s
	}
	tests := []struct {
		name   string
		mangle func([]*ldsv1.SenderFrame) []*ldsv1.SenderFrame
		want   outcome
	}{
		{"no gap", drop(), outcome{built: []int64{10, 11, 12}}},
		{"gap inside an interval", drop(starts[1] + 2), outcome{built: []int64{10, 12}, voided: []int64{11}}},
		{"gap of several chunks", drop(starts[1]+1, starts[1]+2, starts[1]+3), outcome{built: []int64{10, 12}, voided: []int64{11}}},
		{"gap eats a Start", drop(starts[1]), outcome{built: []int64{10, 12}, voided: []int64{11}}},
		{"gap eats an End", drop(ends[1]), outcome{built: []int64{10, 12}, voided: []int64{11}}},
		{"gap eats an End and the next Start", drop(ends[1], starts[2]), outcome{built: []int64{10}, voided: []int64{11, 12}}},
		{"gap eats the first Start", drop(starts[0]), outcome{built: []int64{11, 12}, voided: []int64{10}}},
		// A whole interval lost between two good ones cannot be named: it
		// was never acknowledged, so the sender resends it after a reconnect.
		{"gap eats a whole interval", drop(span(starts[1], ends[1])...), outcome{built: []int64{10, 12}}},
		{"duplicated frame", func(fr []*ldsv1.SenderFrame) []*ldsv1.SenderFrame {
			return slices.Insert(slices.Clone(fr), starts[1]+2, fr[starts[1]+2])
		}, outcome{built: []int64{10, 12}, voided: []int64{11}}},
		{"reordered frames", func(fr []*ldsv1.SenderFrame) []*ldsv1.SenderFrame {
			out := slices.Clone(fr)
			out[starts[1]+1], out[starts[1]+2] = out[starts[1]+2], out[starts[1]+1]
			return out
		}, outcome{built: []int64{10, 12}, voided: []int64{11}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, NewAssembler(p, testLimits(p)), tc.mangle(frames))
			if !slices.Equal(got.built, tc.want.built) || !slices.Equal(got.voided, tc.want.voided) {
				t.Errorf("built %v voided %v, want built %v voided %v", got.built, got.voided, tc.want.built, tc.want.voided)
			}
		})
	}
}

// refuseCase is a stream the Assembler must refuse with an error naming want.
type refuseCase struct {
	name    string
	frames  func() []*ldsv1.SenderFrame
	want    string
	tooBig  bool // the error is ErrTooLarge
	limitFn func(*Limits)
}

// refuseFixture is one valid interval's frames, and accessors to mangle them.
type refuseFixture struct {
	p  interval.Params
	si *interval.SenderInterval
	t  *testing.T
}

func newRefuseFixture(t *testing.T) refuseFixture {
	p := testParams()
	return refuseFixture{p: p, si: makeInterval(t, p, 7, 500, 9), t: t}
}

func (x refuseFixture) good() []*ldsv1.SenderFrame      { return encodeAll(x.t, 256, x.si) }
func start(fr []*ldsv1.SenderFrame) *ldsv1.Start        { return fr[0].GetStart() }
func end(fr []*ldsv1.SenderFrame) *ldsv1.End            { return fr[len(fr)-1].GetEnd() }
func chunk(fr []*ldsv1.SenderFrame, i int) *ldsv1.Chunk { return fr[i].GetChunk() }
func (x refuseFixture) otherDims(lp interval.Params) []*ldsv1.SenderFrame {
	return encodeAll(x.t, 1<<20, makeInterval(x.t, lp, 7, 50, 9))
}

func renumber(fr []*ldsv1.SenderFrame) []*ldsv1.SenderFrame {
	for i, f := range fr {
		f.Seq = uint64(i + 1)
	}
	return fr
}

// checkRefusals feeds each case's frames to a fresh Assembler and checks
// the error it ends with.
func checkRefusals(t *testing.T, p interval.Params, tests []refuseCase) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim := testLimits(p)
			if tc.limitFn != nil {
				tc.limitFn(&lim)
			}
			a := NewAssembler(p, lim)
			var err error
			for _, f := range tc.frames() {
				if _, err = a.Frame(f); err != nil {
					break
				}
			}
			if err == nil {
				t.Fatalf("accepted; want an error naming %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
			if errors.Is(err, ErrIncompatible) != strings.Contains(tc.name, "older sender") {
				t.Errorf("errors.Is(ErrIncompatible) = %v for %q (%v)", errors.Is(err, ErrIncompatible), tc.name, err)
			}
			if errors.Is(err, ErrTooLarge) != tc.tooBig {
				t.Errorf("errors.Is(ErrTooLarge) = %v, want %v (%v)", !tc.tooBig, tc.tooBig, err)
			}
		})
	}
}

// TestAssemblerRefusesFraming: every stream whose frames are out of order,
// of unknown kinds or oversize is an error that names the problem; size
// problems are ErrTooLarge.
func TestAssemblerRefusesFraming(t *testing.T) {
	x := newRefuseFixture(t)
	p, good := x.p, x.good
	checkRefusals(t, p, []refuseCase{
		{"chunk without Start", func() []*ldsv1.SenderFrame { return renumber(good()[1:]) }, "no Start", false, nil},
		{"LDS blob larger than the agreed dimensions encode to", func() []*ldsv1.SenderFrame {
			fr := good()
			chunk(fr, 1).Data = make([]byte, sketch.MaxEncodedLDS(p.Sketch)+1)
			start(fr).TotalBytes = 1 << 20
			return fr
		}, "the most the agreed dimensions encode to", true, nil},
		{"End without Start", func() []*ldsv1.SenderFrame { return renumber(good()[len(good())-1:]) }, "without Start", false, nil},
		{"Start while open", func() []*ldsv1.SenderFrame {
			fr := good()
			dup := proto.Clone(fr[0]).(*ldsv1.SenderFrame)
			return renumber(append([]*ldsv1.SenderFrame{dup}, fr...))
		}, "still open", false, nil},
		{"End of another interval", func() []*ldsv1.SenderFrame { fr := good(); end(fr).Interval = 8; return fr }, "closes Start of interval 7", false, nil},
		{"unknown chunk kind", func() []*ldsv1.SenderFrame { fr := good(); chunk(fr, 1).Kind = 9; return fr }, "unknown chunk kind", false, nil},
		{"class out of range", func() []*ldsv1.SenderFrame {
			fr := good()
			for _, f := range fr {
				if c := f.GetChunk(); c != nil && c.Kind == ldsv1.ChunkKind_CHUNK_KIND_LDA {
					c.Class = 5
				}
			}
			return fr
		}, "class 5", false, nil},
		{"LDS chunk with a class", func() []*ldsv1.SenderFrame { fr := good(); chunk(fr, 1).Class = 1; return fr }, "class 1", false, nil},
		{"second Hello", func() []*ldsv1.SenderFrame {
			fr := good()
			fr[2] = &ldsv1.SenderFrame{Seq: fr[2].Seq, Body: &ldsv1.SenderFrame_Hello{Hello: &ldsv1.Hello{SenderId: "x"}}}
			return fr
		}, "second Hello", false, nil},
		{"empty frame", func() []*ldsv1.SenderFrame { fr := good(); fr[2] = &ldsv1.SenderFrame{Seq: fr[2].Seq}; return fr }, "empty frame", false, nil},
		{"Start announces more than max_sketch_bytes", func() []*ldsv1.SenderFrame { return good() }, "max_sketch_bytes", true,
			func(l *Limits) { l.MaxSketchBytes = 1000 }},
		{"more bytes than announced", func() []*ldsv1.SenderFrame { fr := good(); start(fr).TotalBytes -= 10; return fr }, "more than its Start announced", false, nil},
	})
}

// TestAssemblerRefusesPayload: every blob that does not decode to what the
// agreed dimensions and limits allow is an error that names the problem.
func TestAssemblerRefusesPayload(t *testing.T) {
	x := newRefuseFixture(t)
	p, good, otherDims := x.p, x.good, x.otherDims
	checkRefusals(t, p, []refuseCase{
		{"garbage LDS", func() []*ldsv1.SenderFrame {
			fr := good()
			for i := range chunk(fr, 1).Data {
				chunk(fr, 1).Data[i] ^= 0x5a
			}
			return fr
		}, "LDS", false, nil},
		{"LDS of other dimensions", func() []*ldsv1.SenderFrame {
			lp := testParams()
			lp.Sketch.Columns = 32
			return otherDims(lp)
		}, "the agreed sketch is 3 x 64", false, nil},
		{"LDA of other dimensions", func() []*ldsv1.SenderFrame {
			lp := testParams()
			lp.LDA.Cells = 8
			return otherDims(lp)
		}, "lda.banks/lda.cells", false, nil},
		{"missing LDA class", func() []*ldsv1.SenderFrame {
			lp := testParams()
			lp.Classes = 1
			return otherDims(lp)
		}, "no LDA chunk for class 1", false, nil},
		{"boundary count differs", func() []*ldsv1.SenderFrame { fr := good(); end(fr).BoundaryCount++; return fr }, "boundary function of", false, nil},
		{"boundary function truncated", func() []*ldsv1.SenderFrame {
			fr := good()
			c := boundaryChunk(fr)
			c.Data = c.Data[:len(c.Data)-1]
			start(fr).TotalBytes--
			return fr
		}, "boundary function: retrieval: table of", false, nil},
		{"boundary function with trailing bytes", func() []*ldsv1.SenderFrame {
			fr := good()
			c := boundaryChunk(fr)
			c.Data = append(slices.Clone(c.Data), 0)
			start(fr).TotalBytes++
			return fr
		}, "truncated or trailing bytes", false, nil},
		{"boundary function of another version", func() []*ldsv1.SenderFrame {
			fr := good()
			c := boundaryChunk(fr)
			c.Data = slices.Clone(c.Data)
			c.Data[0] = 9
			return fr
		}, "boundary function: retrieval: encoding version 9", false, nil},
		{"boundary function over the key limit", func() []*ldsv1.SenderFrame {
			return encodeAll(t, 1<<20, makeInterval(t, p, 7, 10000, 9))
		}, "more than the limit of 192", false,
			func(l *Limits) { l.MaxCells = p.Sketch.Rows * p.Sketch.Columns }},
		{"boundary list of an older sender", func() []*ldsv1.SenderFrame {
			fr := good()
			boundaryChunk(fr).Kind = ldsv1.ChunkKind_CHUNK_KIND_BOUNDARY
			return fr
		}, "40-bit hash list of an older sender", false, nil},
		{"boundary function missing", func() []*ldsv1.SenderFrame {
			fr := good()
			c := boundaryChunk(fr)
			start(fr).TotalBytes -= uint64(len(c.Data))
			for i, f := range fr {
				if f.GetChunk() == c {
					fr = slices.Delete(fr, i, i+1)
					break
				}
			}
			return renumber(fr)
		}, "boundary function: retrieval: empty encoding", false, nil},
		{"bad heavy key", func() []*ldsv1.SenderFrame {
			fr := good()
			end(fr).Heavy[0].Key = []byte{1, 2}
			return fr
		}, "heavy key 0", false, nil},
	})
}

// boundaryChunk is the (single, with 256-byte chunks and a small interval)
// BOUNDARY chunk of an encoded interval.
func boundaryChunk(fr []*ldsv1.SenderFrame) *ldsv1.Chunk {
	var out *ldsv1.Chunk
	for _, f := range fr {
		if c := f.GetChunk(); c != nil && c.Kind == ldsv1.ChunkKind_CHUNK_KIND_BOUNDARY_FUNC {
			if out != nil {
				panic("boundaryChunk: more than one BOUNDARY chunk")
			}
			out = c
		}
	}
	return out
}

// TestEncodeRefusesUnfinished: Encode only encodes; an interval its owner
// has not finished (no boundary function) is refused, never finished here.
func TestEncodeRefusesUnfinished(t *testing.T) {
	p := testParams()
	sk, err := interval.NewSketches(p)
	if err != nil {
		t.Fatal(err)
	}
	si := &interval.SenderInterval{ID: 7, Sk: sk}
	if _, err := Encode(si, testMeta(), 1<<20); err == nil || !strings.Contains(err.Error(), "Finish") {
		t.Fatalf("unfinished interval: got %v, want an error naming Finish", err)
	}
	if si.Split != nil {
		t.Fatal("Encode built the boundary function: it must only encode")
	}
	if err := si.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, err := Encode(si, testMeta(), 1<<20); err != nil {
		t.Fatalf("finished interval: %v", err)
	}
}
