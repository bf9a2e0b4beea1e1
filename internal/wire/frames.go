// Package wire carries finished intervals from lds-sender to lds-receiver
// over one gRPC bidirectional stream per sender (docs/protocol.md): framing
// (Start, chunks, End with a seq rising by one per frame), the receiver's
// checks on every frame, and the client with its resend buffer.
package wire

import (
	"errors"
	"fmt"
	"slices"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/retrieval"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/internal/sketch"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// FlagPartial marks an interval the sender's capture did not fully cover.
const (
	FlagPartial = 1 << 0
	FlagFirst   = 1 << 1 // first interval since the sender started
	FlagTrailer = 1 << 2 // empty, emitted after the end of the sender's input for the boundaries its last packets can reach
)

// Encode turns a finished interval into frames (seq left at 0: the stream
// numbers them). Each blob is split into chunks of at most chunkBytes. It
// only encodes: the sender's ship stage finishes the interval
// (SenderInterval.Finish: heavy ranking, lost-packet table, boundary
// function) once before, and an interval without its boundary function
// is refused.
func Encode(si *interval.SenderInterval, meta interval.SenderMeta, chunkBytes int) ([]*ldsv1.SenderFrame, error) {
	if si.Split == nil {
		return nil, fmt.Errorf("wire: interval %d has no boundary function: finish it (SenderInterval.Finish) before encoding", si.ID)
	}
	lds, err := si.Sk.LDS.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("wire: encoding LDS of interval %d: %w", si.ID, err)
	}
	var flags uint32
	if si.Partial {
		flags |= FlagPartial
	}
	if si.First {
		flags |= FlagFirst
	}
	if si.Trailer {
		flags |= FlagTrailer
	}
	var frames []*ldsv1.SenderFrame
	total := 0
	add := func(kind ldsv1.ChunkKind, class uint32, blob []byte) {
		for off := 0; ; off += chunkBytes {
			end := min(off+chunkBytes, len(blob))
			frames = append(frames, &ldsv1.SenderFrame{Body: &ldsv1.SenderFrame_Chunk{Chunk: &ldsv1.Chunk{
				Kind: kind, Class: class, Data: blob[off:end], Last: end == len(blob)}}})
			total += end - off
			if end == len(blob) {
				return
			}
		}
	}
	add(ldsv1.ChunkKind_CHUNK_KIND_LDS, 0, lds)
	for c, a := range si.Sk.LDA {
		b, err := a.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("wire: encoding LDA %d of interval %d: %w", c, si.ID, err)
		}
		add(ldsv1.ChunkKind_CHUNK_KIND_LDA, uint32(c), b)
	}
	bnd, err := si.Split.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("wire: encoding the boundary function of interval %d: %w", si.ID, err)
	}
	add(ldsv1.ChunkKind_CHUNK_KIND_BOUNDARY_FUNC, 0, bnd)
	if si.Samples != nil {
		smp, err := si.Samples.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("wire: encoding the samples of interval %d: %w", si.ID, err)
		}
		add(ldsv1.ChunkKind_CHUNK_KIND_SAMPLES, 0, smp)
	}
	if si.Sk.Lost != nil {
		add(ldsv1.ChunkKind_CHUNK_KIND_LOST, 0, si.Sk.Lost.AppendBinary(nil))
	}
	start := &ldsv1.SenderFrame{Body: &ldsv1.SenderFrame_Start{Start: &ldsv1.Start{
		Interval: si.ID, Flags: flags, TotalBytes: uint64(total)}}}
	heavy := make([]*ldsv1.FlowKey, len(si.Heavy))
	for i, k := range si.Heavy {
		heavy[i] = &ldsv1.FlowKey{Key: k.AppendBinary(nil)}
	}
	parse := map[string]uint64{"late": si.Late}
	for k, v := range meta.ParseDrops {
		parse[k] = v
	}
	end := &ldsv1.SenderFrame{Body: &ldsv1.SenderFrame_End{End: &ldsv1.End{
		Interval: si.ID,
		Totals:   &ldsv1.Totals{Packets: si.Sk.Packets, Bytes: si.Sk.Bytes, ClassPackets: slices.Clone(si.Sk.ClassPackets)},
		Clock: &ldsv1.ClockStatus{State: string(meta.Clock.State), OffsetNs: meta.Clock.OffsetNS,
			GrandmasterPresent: meta.Clock.GrandmasterPresent, GrandmasterId: meta.Clock.GrandmasterID,
			PortState: meta.Clock.PortState, Error: meta.Clock.Err},
		Drops:         &ldsv1.Drops{Kernel: meta.KernelDrops, Interface: meta.IfDrops, Parse: parse, Affecting: meta.DropsAffecting},
		Heavy:         heavy,
		BoundaryCount: uint64(si.Split.Len()),
	}}}
	return append(append([]*ldsv1.SenderFrame{start}, frames...), end), nil
}

// BoundaryFormat names this build's boundary encoding: a static function
// (internal/retrieval encoding version 2, 3-wise binary fuse) from the
// 64-bit packet hash to the number of intervals between its send interval
// and the boundary, in values of a few bits, over the key window of the
// receiver's hold window (Window frames), in CHUNK_KIND_BOUNDARY_FUNC
// chunks. The receiver names it in HelloAck and the sender refuses a
// receiver that names another or none (fuse3-1bit/v1: the 1-bit function
// over a fixed max_delay); older senders' CHUNK_KIND_BOUNDARY (a 40-bit
// hash list) is refused with ErrIncompatible. Neither end misreads the other.
const BoundaryFormat = "fuse3-offset/v2"

// Limits bound what one stream may make the receiver allocate.
type Limits struct {
	MaxSketchBytes int // per interval, all chunks together
	MaxCells       int // per decoded sketch
	MaxClasses     int
	// InWindow, when set, says whether an interval id is near enough to
	// the receiver's clock; an interval it refuses is skipped: its chunks
	// are neither checked nor held, and its End yields OutOfWindow.
	InWindow func(id int64) bool
}

// Assembler checks the frames of one stream after Hello and rebuilds
// intervals. A seq gap voids the interval it falls in; anything malformed
// is an error that ends the stream.
type Assembler struct {
	lim     Limits
	p       interval.Params
	nextSeq uint64
	cur     *ldsv1.Start
	voided  bool
	skip    bool // the open interval is outside the window
	blobs   map[blobKey][]byte
	total   int
}

type blobKey struct {
	kind  ldsv1.ChunkKind
	class uint32
}

// NewAssembler expects the sketch dimensions p (already agreed by Hello).
func NewAssembler(p interval.Params, lim Limits) *Assembler {
	return &Assembler{lim: lim, p: p, nextSeq: 1, blobs: map[blobKey][]byte{}}
}

// ErrTooLarge marks a frame refused because it would make the receiver
// hold more than its limits allow (the server answers ResourceExhausted);
// every other Assembler error is a malformed stream (InvalidArgument).
var ErrTooLarge = errors.New("over the receiver's limit")

// ErrIncompatible marks a stream of another protocol version (the server
// answers FailedPrecondition, which a sender treats as a refusal).
var ErrIncompatible = errors.New("incompatible lds versions: run the same lds version at both ends")

// Kind says what a Result reports.
type Kind uint8

const (
	// Complete means Interval holds a complete interval, decoded (on its End).
	Complete Kind = iota + 1
	// Voided means a seq gap voided the intervals in Voided; the sender
	// resends them after a reconnect, so they are not acknowledged.
	Voided
	// OutOfWindow means interval ID was outside Limits.InWindow and was
	// dropped unread (on its End).
	OutOfWindow
	// Aside is a frame between intervals that is not part of one (a
	// LostAnswer or Finished), in Frame.
	Aside
)

// Result is what one frame completed.
type Result struct {
	Kind Kind
	// ID is the interval a Complete or OutOfWindow result concerns.
	ID int64
	// Voided lists every interval a gap voided, in stream order. A gap
	// that ate the End of one interval and the Start of the next voids
	// both.
	Voided   []int64
	Interval *Interval          // Complete only
	Frame    *ldsv1.SenderFrame // Aside only
}

// Interval is one interval's frames decoded: the Start's flags, the blobs
// decoded with the agreed dimensions, the heavy keys, and the End as sent
// (totals, clock, drops). The receiver turns it into its own interval.
type Interval struct {
	ID       int64
	Flags    uint32 // FlagPartial, FlagFirst, FlagTrailer
	LDS      *sketch.LDS
	LDA      []*sketch.LDA     // one per class
	Boundary *retrieval.Func   // the boundary function, End.boundary_count keys
	Samples  *sample.Set       // nil: the sender sent none
	Lost     *sketch.IBLT      // the lost-packet table (nil: lost.capacity is 0)
	Heavy    []capture.FlowKey // the sender's heaviest flows, heaviest first
	End      *ldsv1.End
	// SketchBytes is what the interval's chunks carried, all together.
	SketchBytes int
}

func voided(ids ...int64) *Result { return &Result{Kind: Voided, Voided: ids} }

// Frame takes the next frame; it returns a non-nil Result on End (or when a
// gap is found to have voided an interval).
func (a *Assembler) Frame(f *ldsv1.SenderFrame) (*Result, error) {
	if f.Seq != a.nextSeq {
		// Frames were lost or duplicated: the interval in progress cannot be trusted.
		a.voided = true
	}
	a.nextSeq = f.Seq + 1
	switch b := f.Body.(type) {
	case *ldsv1.SenderFrame_Start:
		var res *Result
		if a.cur != nil {
			if !a.voided {
				return nil, fmt.Errorf("frame seq %d: Start of interval %d while interval %d is still open", f.Seq, b.Start.Interval, a.cur.Interval)
			}
			// The End of the open interval was lost in a gap: void it.
			res = voided(a.cur.Interval)
		}
		if b.Start.TotalBytes > uint64(a.lim.MaxSketchBytes) {
			return nil, fmt.Errorf("frame seq %d: interval %d announces %d sketch bytes, more than receiver.max_sketch_bytes (%d): %w",
				f.Seq, b.Start.Interval, b.Start.TotalBytes, a.lim.MaxSketchBytes, ErrTooLarge)
		}
		// A gap just before a Start cost only frames of earlier intervals.
		a.cur, a.total, a.voided = b.Start, 0, false
		a.skip = a.lim.InWindow != nil && !a.lim.InWindow(b.Start.Interval)
		clear(a.blobs)
		return res, nil
	case *ldsv1.SenderFrame_Chunk:
		if a.voided || (a.skip && a.cur != nil) {
			// The interval in progress (if any) is lost or refused: its
			// chunks are neither checked nor held, so a gap never turns
			// into an error or into memory spent on data that will be
			// thrown away.
			return nil, nil
		}
		if a.cur == nil {
			return nil, fmt.Errorf("frame seq %d: chunk outside an interval (no Start)", f.Seq)
		}
		c := b.Chunk
		if c.Kind == ldsv1.ChunkKind_CHUNK_KIND_UNSPECIFIED || c.Kind > ldsv1.ChunkKind_CHUNK_KIND_LOST {
			return nil, fmt.Errorf("frame seq %d: unknown chunk kind %d", f.Seq, c.Kind)
		}
		if c.Kind == ldsv1.ChunkKind_CHUNK_KIND_BOUNDARY {
			return nil, fmt.Errorf("frame seq %d: a CHUNK_KIND_BOUNDARY chunk is the 40-bit hash list of an older sender, this receiver reads boundary format %s: %w",
				f.Seq, BoundaryFormat, ErrIncompatible)
		}
		if int(c.Class) >= a.lim.MaxClasses || (c.Kind != ldsv1.ChunkKind_CHUNK_KIND_LDA && c.Class != 0) {
			return nil, fmt.Errorf("frame seq %d: %v chunk for class %d, receiver has %d classes (and only LDA chunks have one)", f.Seq, c.Kind, c.Class, a.lim.MaxClasses)
		}
		// Start's announcement was checked against max_sketch_bytes, so
		// holding the sender to it bounds what the interval may allocate.
		a.total += len(c.Data)
		if uint64(a.total) > a.cur.TotalBytes {
			return nil, fmt.Errorf("frame seq %d: interval %d sent %d sketch bytes, more than its Start announced (%d)", f.Seq, a.cur.Interval, a.total, a.cur.TotalBytes)
		}
		k := blobKey{c.Kind, c.Class}
		// No blob grows beyond the encoding of the largest one the agreed
		// dimensions allow.
		if limit := a.blobLimit(c.Kind); len(a.blobs[k])+len(c.Data) > limit {
			return nil, fmt.Errorf("frame seq %d: interval %d: %v blob of class %d exceeds %d bytes, the most the agreed dimensions encode to: %w",
				f.Seq, a.cur.Interval, c.Kind, c.Class, limit, ErrTooLarge)
		}
		a.blobs[k] = append(a.blobs[k], c.Data...)
		return nil, nil
	case *ldsv1.SenderFrame_End:
		e := b.End
		if a.voided {
			a.voided = false
			if a.cur == nil || a.cur.Interval == e.Interval {
				a.cur = nil
				return voided(e.Interval), nil
			}
			// The gap ate the End of the open interval and the Start of this one.
			open := a.cur.Interval
			a.cur = nil
			return voided(open, e.Interval), nil
		}
		if a.cur == nil {
			return nil, fmt.Errorf("frame seq %d: End of interval %d without Start", f.Seq, e.Interval)
		}
		if e.Interval != a.cur.Interval {
			return nil, fmt.Errorf("frame seq %d: End of interval %d closes Start of interval %d", f.Seq, e.Interval, a.cur.Interval)
		}
		start := a.cur
		a.cur = nil
		if a.skip {
			a.skip = false
			return &Result{Kind: OutOfWindow, ID: start.Interval}, nil
		}
		return a.build(start, e)
	case *ldsv1.SenderFrame_LostAnswer, *ldsv1.SenderFrame_Finished:
		if a.cur != nil && !a.voided {
			return nil, fmt.Errorf("frame seq %d: %T inside interval %d (it goes between intervals)", f.Seq, f.Body, a.cur.Interval)
		}
		return &Result{Kind: Aside, Frame: f}, nil
	case *ldsv1.SenderFrame_Hello:
		return nil, fmt.Errorf("frame seq %d: a second Hello on one stream", f.Seq)
	default:
		return nil, fmt.Errorf("frame seq %d: empty frame", f.Seq)
	}
}

// blobLimit is the largest encoding of one blob of kind that the agreed
// dimensions (and the cell limit, for the boundary function) allow.
func (a *Assembler) blobLimit(kind ldsv1.ChunkKind) int {
	switch kind {
	case ldsv1.ChunkKind_CHUNK_KIND_LDS:
		return sketch.MaxEncodedLDS(a.p.Sketch)
	case ldsv1.ChunkKind_CHUNK_KIND_LDA:
		return sketch.MaxEncodedLDA(a.p.LDA)
	case ldsv1.ChunkKind_CHUNK_KIND_LOST:
		return sketch.MaxEncodedIBLT(a.p.LostCells)
	default:
		return retrieval.MaxEncodedLen(a.lim.MaxCells)
	}
}

// build decodes the blobs of a complete interval. The decoders get the
// agreed dimensions and refuse any other header before allocating: a few
// header bytes cannot make the receiver allocate more than one sketch of
// the agreed size.
func (a *Assembler) build(st *ldsv1.Start, e *ldsv1.End) (*Result, error) {
	id := st.Interval
	ldsB, ok := a.blobs[blobKey{ldsv1.ChunkKind_CHUNK_KIND_LDS, 0}]
	if !ok {
		return nil, fmt.Errorf("interval %d: no LDS chunk", id)
	}
	iv := &Interval{ID: id, Flags: st.Flags, End: e, SketchBytes: a.total, LDA: make([]*sketch.LDA, a.p.Classes)}
	var err error
	if iv.LDS, err = sketch.UnmarshalLDS(ldsB, a.p.Sketch); err != nil {
		return nil, fmt.Errorf("interval %d: LDS: %w", id, err)
	}
	for c := range iv.LDA {
		b, ok := a.blobs[blobKey{ldsv1.ChunkKind_CHUNK_KIND_LDA, uint32(c)}]
		if !ok {
			return nil, fmt.Errorf("interval %d: no LDA chunk for class %d", id, c)
		}
		// The estimator pairs the two ends' aggregators cell by cell.
		if iv.LDA[c], err = sketch.UnmarshalLDA(b, a.p.LDA); err != nil {
			return nil, fmt.Errorf("interval %d: LDA class %d: %w", id, c, err)
		}
	}
	// The key count is bounded by End.boundary_count (itself within the
	// cell limit) and the table must be exactly as long as the count
	// implies: checked before allocating.
	if e.BoundaryCount > uint64(a.lim.MaxCells) {
		return nil, fmt.Errorf("interval %d: End announces %d boundary keys, more than the limit of %d", id, e.BoundaryCount, a.lim.MaxCells)
	}
	if iv.Boundary, err = retrieval.Unmarshal(a.blobs[blobKey{ldsv1.ChunkKind_CHUNK_KIND_BOUNDARY_FUNC, 0}], int(e.BoundaryCount)); err != nil {
		return nil, fmt.Errorf("interval %d: boundary function: %w", id, err)
	}
	if uint64(iv.Boundary.Len()) != e.BoundaryCount {
		return nil, fmt.Errorf("interval %d: boundary function of %d keys, End says %d", id, iv.Boundary.Len(), e.BoundaryCount)
	}
	if b, ok := a.blobs[blobKey{ldsv1.ChunkKind_CHUNK_KIND_SAMPLES, 0}]; ok {
		if iv.Samples, err = sample.Unmarshal(b, a.p.T); err != nil {
			return nil, fmt.Errorf("interval %d: samples: %w", id, err)
		}
	}
	// The lost-packet table is there exactly when both ends keep one (its
	// size is in the fingerprint).
	b, ok := a.blobs[blobKey{ldsv1.ChunkKind_CHUNK_KIND_LOST, 0}]
	switch {
	case ok && a.p.LostCells == 0:
		return nil, fmt.Errorf("interval %d: a lost-packet table, but lost.capacity is 0 here", id)
	case !ok && a.p.LostCells > 0:
		return nil, fmt.Errorf("interval %d: no lost-packet table, but lost.capacity is set", id)
	case ok:
		if iv.Lost, err = sketch.UnmarshalIBLT(b, a.p.LostCells); err != nil {
			return nil, fmt.Errorf("interval %d: lost-packet table: %w", id, err)
		}
	}
	for i, hk := range e.Heavy {
		k, err := capture.FlowKeyFromBinary(hk.GetKey())
		if err != nil {
			return nil, fmt.Errorf("interval %d: heavy key %d: %w", id, i, err)
		}
		iv.Heavy = append(iv.Heavy, k)
	}
	return &Result{Kind: Complete, ID: id, Interval: iv}, nil
}
