package interval

import (
	"unsafe"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/prefetch"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/internal/sketch"
)

// PrefetchAhead is how many packets ahead of the one it adds AddBatch
// prefetches: live, a packet's cells are rarely in the cache (the flows
// are many and the ring's packets push them out), and the time to add
// that many packets covers a miss to memory. Fetching a whole batch at
// once asks for more lines than the processor keeps in flight and costs
// more than it saves (docs/PERFORMANCE.md, "Capture workers").
const PrefetchAhead = 4

// spotRing holds the spots of the packets between the one being added
// and the one being prefetched (a power of two > PrefetchAhead).
const spotRing = 8

// spot is where a packet's update lands, found once for its prefetch and
// its update: its LDS cells (when the sketch is plain) and its LDA cell.
type spot struct {
	lds   sketch.Spot
	lda   uint32
	ok    bool // lda is set (an interval was open)
	plain bool // lds is set
}

// AddBatch adds pkts in capture order as Add does, each after smp.Add
// (so that an interval it emits has all its candidates; nil smp: none).
// It finds each packet's cells PrefetchAhead packets before adding it,
// asks the processor for them, and updates them without deriving them
// from the hashes again.
func (b *SenderBuilder) AddBatch(pkts []capture.Packet, smp *sample.Sampler, emit func(*SenderInterval)) {
	for j := range min(PrefetchAhead, len(pkts)) {
		b.locate(&pkts[j], &b.spots[j%spotRing])
	}
	for i := range pkts {
		if j := i + PrefetchAhead; j < len(pkts) {
			b.locate(&pkts[j], &b.spots[j%spotRing])
		}
		if smp != nil {
			smp.Add(&pkts[i])
		}
		b.add(&pkts[i], &b.spots[i%spotRing], emit)
	}
}

// locate finds p's cells in the open interval's sketches and prefetches
// them with its heavy-flow slot. It changes no counter: a packet that
// lands in the next interval finds the same cells there (same
// parameters), only its prefetch was wasted.
func (b *SenderBuilder) locate(p *capture.Packet, sp *spot) {
	if b.cur == nil {
		sp.ok, sp.plain = false, false
		return
	}
	sp.ok = true
	sk, dst := b.cur.Sk, b.lines[:0]
	sp.plain = sk.LDS.Locate(p.FlowHash, &sp.lds)
	if sp.plain {
		dst = sk.LDS.AppendSpotLines(&sp.lds, dst)
	} else {
		dst = sk.LDS.AppendLines(p.FlowHash, p.PktHash, dst)
	}
	lda := sk.LDA[sk.class(p)]
	sp.lda = lda.Locate(p.PktHash)
	dst = lda.AppendCellLines(sp.lda, dst)
	h := p.FlowHash
	dst = append(dst, uintptr(unsafe.Pointer(&b.heavy.slots[(h^h>>32)&b.heavy.mask])))
	prefetch.Lines(dst)
	b.lines = dst
}
