package interval

import (
	"math/bits"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/sketch"
)

// FlowStat is what the receiver knows exactly about one flow in one
// interval: it captured every packet it counts.
type FlowStat struct {
	Key      capture.FlowKey
	FlowHash uint64
	Packets  uint64
	Bytes    uint64
	// Cells counts, per (row, vLDA offset), the packets of this flow that
	// row sampled: the receiver-side composition of its own sketch (R*k
	// entries). Filled only when FlowTable was made with composition.
	Cells []uint32
}

// FlowTable is the receiver's per-interval table of candidate flows,
// capped; packets of flows beyond the cap are counted, not tracked.
type FlowTable struct {
	// slots index Flows by flow hash with open addressing (linear
	// probing, load at most 1/2): one probe and one key comparison per
	// packet. Two flows with the same 64-bit hash (never on real traffic)
	// take neighbouring slots and the key tells them apart.
	slots     []ftSlot
	mask      uint64
	Flows     []FlowStat
	Untracked uint64
	cap       int
	cellsPer  int // R·k composition counters per flow (0: none kept)
	slab      []uint32
}

type ftSlot struct {
	hash uint64
	i    int32 // index into Flows + 1; 0: empty
}

// NewFlowTable makes a table for at most limit flows; with composition it
// keeps each flow's packets per (row, vLDA offset) of a sketch of p.
func NewFlowTable(limit int, p sketch.Params, composition bool) *FlowTable {
	return newFlowTable(limit, p, composition, 0)
}

// newFlowTable also takes the flows expected (the previous interval's),
// so that the table rarely grows on the packet path.
func newFlowTable(limit int, p sketch.Params, composition bool, expect int) *FlowTable {
	n := min(limit, max(expect+expect/4, 1<<10))
	size := 1 << bits.Len(uint(2*n-1))
	ft := &FlowTable{slots: make([]ftSlot, size), mask: uint64(size - 1), cap: limit, Flows: make([]FlowStat, 0, n)}
	if composition {
		ft.cellsPer = p.Rows * p.VLDA
	}
	return ft
}

// Len is the number of tracked flows.
func (ft *FlowTable) Len() int {
	if ft == nil {
		return 0 // an interval without the receiver's sketch has no table
	}
	return len(ft.Flows)
}

// Lookup returns the stat of flow k with flow hash h, or nil.
func (ft *FlowTable) Lookup(k capture.FlowKey, h uint64) *FlowStat {
	if i, ok := ft.find(k, h); ok {
		return &ft.Flows[i]
	}
	return nil
}

func (ft *FlowTable) find(k capture.FlowKey, h uint64) (int32, bool) {
	for s := h & ft.mask; ; s = (s + 1) & ft.mask {
		sl := &ft.slots[s]
		if sl.i == 0 {
			return 0, false
		}
		if sl.hash == h && ft.Flows[sl.i-1].Key == k {
			return sl.i - 1, true
		}
	}
}

// insert indexes flow i (the next one appended to Flows) under its hash.
func (ft *FlowTable) insert(h uint64, i int32) {
	if 2*(int(i)+1) > len(ft.slots) {
		ft.grow()
	}
	ft.place(h, i)
}

func (ft *FlowTable) place(h uint64, i int32) {
	s := h & ft.mask
	for ft.slots[s].i != 0 {
		s = (s + 1) & ft.mask
	}
	ft.slots[s] = ftSlot{hash: h, i: i + 1}
}

// grow doubles the slots and places every flow again.
func (ft *FlowTable) grow() {
	old := ft.slots
	ft.slots = make([]ftSlot, 2*len(old))
	ft.mask = uint64(len(ft.slots) - 1)
	for _, sl := range old {
		if sl.i != 0 {
			ft.place(sl.hash, sl.i-1)
		}
	}
}

// add counts pkt in its flow and returns the flow's composition counters
// for Sketches.AddCount to fill (nil: no composition kept, or the flow is
// beyond the cap).
func (ft *FlowTable) add(pkt *capture.Packet) []uint32 {
	i, ok := ft.find(pkt.Key, pkt.FlowHash)
	if !ok {
		if len(ft.Flows) >= ft.cap {
			ft.Untracked++
			return nil
		}
		i = int32(len(ft.Flows))
		ft.insert(pkt.FlowHash, i)
		var cells []uint32
		if ft.cellsPer > 0 {
			// Counters come from a slab: one allocation per 4096 flows.
			if len(ft.slab)+ft.cellsPer > cap(ft.slab) {
				ft.slab = make([]uint32, 0, 4096*ft.cellsPer)
			}
			n := len(ft.slab)
			ft.slab = ft.slab[:n+ft.cellsPer]
			cells = ft.slab[n : n+ft.cellsPer : n+ft.cellsPer]
		}
		ft.Flows = append(ft.Flows, FlowStat{Key: pkt.Key, FlowHash: pkt.FlowHash, Cells: cells})
	}
	f := &ft.Flows[i]
	f.Packets++
	f.Bytes += uint64(pkt.WireLen)
	return f.Cells
}

// merge adds o's flows into ft (worker tables, held packets).
func (ft *FlowTable) merge(o *FlowTable) {
	for j := range o.Flows {
		of := &o.Flows[j]
		i, ok := ft.find(of.Key, of.FlowHash)
		if !ok {
			if len(ft.Flows) >= ft.cap {
				ft.Untracked += of.Packets
				continue
			}
			i = int32(len(ft.Flows))
			ft.insert(of.FlowHash, i)
			ft.Flows = append(ft.Flows, FlowStat{Key: of.Key, FlowHash: of.FlowHash, Cells: make([]uint32, len(of.Cells))})
		}
		f := &ft.Flows[i]
		f.Packets += of.Packets
		f.Bytes += of.Bytes
		for c := range of.Cells {
			f.Cells[c] += of.Cells[c]
		}
	}
	ft.Untracked += o.Untracked
}

// ReceiverInterval is the receiver's own view of one interval once its capture has
// passed the end of the hold of the interval's closing boundary: the
// packets placed directly, and the packets held at that boundary (to be
// split by the sender's End).
type ReceiverInterval struct {
	ID       int64
	Partial  bool
	Direct   *Sketches
	Flows    *FlowTable
	HeldPrev *HeldSet    // only on the first sealed interval: held at its opening boundary
	HeldNext *HeldSet    // held at the boundary ID+1
	NextK    int64       // class of the boundary ID+2, fixed when this interval was sealed
	First    bool        // the first interval this builder sealed
	Late     uint64      // packets that arrived after their interval was sealed
	Clock    ClockStatus // the receiver's clock when the interval was sealed (set by the receiver)
	// Capture drops (set by the receiver's capture worker, DropLedger):
	// read when the interval was sealed, and those that may have removed
	// packets of it.
	Drops, DropsAffecting uint64
	pool                  *pool
}

// HeldSet is what the receiver held at one boundary.
type HeldSet struct {
	B    int64 // the boundary at B·T
	W    int64 // its final hold window, ns
	K    int64 // its class: the packets were sent in intervals B−K … B
	Pkts []capture.Packet
}

type receiverOpen struct {
	sk    *Sketches
	flows *FlowTable
}

type receiverHold struct {
	w, k  int64
	ended bool
	pkts  []capture.Packet
}

// ReceiverBuilder is the receiver's capture-side half: it places packets whose
// interval is certain and holds the ones near a boundary. Not safe for
// concurrent use.
type ReceiverBuilder struct {
	p            Params
	pool         *pool
	plan         *WindowPlan // nil: every window is max_delay
	captureStart int64
	composition  bool
	open         map[int64]*receiverOpen
	holds        map[int64]*receiverHold // boundary id b (at b*T) → its hold
	next         int64                   // next interval to seal
	handed       int64                   // boundaries up to this one are handed over
	handedW      int64                   // the window of boundary handed
	started      bool
	flushing     bool // end of input: nothing more to wait for
	sealedAny    bool
	late         uint64
	lastFlows    int // flows of the interval sealed last: the next table's size
}

// NewReceiverBuilderPlan starts a receiver builder with adaptive windows from
// plan (shared by the workers of one capture; nil: every window is
// max_delay); see NewSenderBuilder for captureStart. composition keeps
// per-flow cell counts (decode estimator).
func NewReceiverBuilderPlan(p Params, captureStart int64, composition bool, plan *WindowPlan) (*ReceiverBuilder, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	pl, err := newPool(p)
	if err != nil {
		return nil, err
	}
	b := &ReceiverBuilder{p: p, pool: pl, plan: plan, captureStart: captureStart, composition: composition,
		open: map[int64]*receiverOpen{}, holds: map[int64]*receiverHold{}, started: true}
	// Start where capture began, the same for every worker of one capture
	// (their sealed intervals are merged). Packets received in the hold of
	// that zone's boundary may belong to the K intervals before it: seal
	// them too.
	b0 := ID(captureStart+p.Guard, p.T)
	b.next = b0
	if k := b.classOf(b0); captureStart-b0*p.T < p.classTop(k) {
		b.next = b0 - k
	}
	b.handed = b.next - 1
	return b, nil
}

func (b *ReceiverBuilder) classOf(bnd int64) int64 {
	if b.plan == nil {
		return b.p.maxClass()
	}
	return b.plan.classFor(bnd, !b.flushing)
}

// hold returns boundary bnd's hold, beginning it (its class and first
// window fixed by the plan) on first use.
func (b *ReceiverBuilder) hold(bnd int64) *receiverHold {
	h := b.holds[bnd]
	if h == nil {
		h = &receiverHold{k: b.classOf(bnd), w: b.p.MaxDelay}
		if b.plan != nil {
			h.w = b.plan.startFor(bnd, !b.flushing)
		}
		b.holds[bnd] = h
	}
	return h
}

// inHold reports whether time t (in bnd's zone or later) falls in bnd's
// hold; past its window it first tries to raise the window to the plan's
// target (within the class), else it ends the hold for good.
func (b *ReceiverBuilder) inHold(h *receiverHold, bnd, t int64) bool {
	zoneEnd := (bnd+1)*b.p.T - b.p.Guard
	if t < min(bnd*b.p.T+h.w, zoneEnd) {
		return true
	}
	if h.ended {
		return false
	}
	if b.plan != nil && t < zoneEnd {
		if w := b.plan.raise(h.w, h.k); t < bnd*b.p.T+w {
			h.w = w
			return true
		}
	}
	b.endHold(h, bnd)
	return false
}

func (b *ReceiverBuilder) endHold(h *receiverHold, bnd int64) {
	if !h.ended {
		h.ended = true
		if b.plan != nil {
			b.plan.ended(bnd, h.w)
		}
	}
}

// Add places one received packet, first sealing every interval whose hold
// window has passed.
func (b *ReceiverBuilder) Add(pkt *capture.Packet, emit func(*ReceiverInterval)) {
	b.Advance(pkt.TS, emit)
	bnd := ID(pkt.TS+b.p.Guard, b.p.T) // the zone [bnd·T − guard, (bnd+1)·T − guard)
	if bnd > b.handed {
		if h := b.hold(bnd); b.inHold(h, bnd, pkt.TS) {
			h.pkts = append(h.pkts, *pkt)
			return
		}
	} else if bnd < b.handed || pkt.TS < bnd*b.p.T+b.handedW {
		b.late++ // its hold was handed over already
		return
	}
	// Past the hold: received at or after bnd·T + W, so sent in bnd.
	if bnd < b.next {
		b.late++
		return
	}
	o := b.openFor(bnd)
	o.sk.AddCount(pkt, pkt.TS-bnd*b.p.T, o.flows.add(pkt))
}

func (b *ReceiverBuilder) openFor(id int64) *receiverOpen {
	o := b.open[id]
	if o == nil {
		o = &receiverOpen{sk: b.pool.get(), flows: newFlowTable(b.p.FlowCap, b.p.Sketch, b.composition, b.lastFlows)}
		b.open[id] = o
	}
	return o
}

// Advance seals every interval I whose closing boundary's hold has ended by now.
func (b *ReceiverBuilder) Advance(now int64, emit func(*ReceiverInterval)) {
	if !b.started {
		return
	}
	for {
		bn := b.next + 1
		if now < bn*b.p.T-b.p.Guard {
			return
		}
		if b.inHold(b.hold(bn), bn, now) {
			return
		}
		// After a long idle gap, jump rather than seal thousands of empty intervals.
		if len(b.open) == 0 && len(b.holds) <= 1 && len(b.holds[bn].pkts) == 0 && ID(now, b.p.T)-b.next > 16 {
			b.endHold(b.holds[bn], bn)
			delete(b.holds, bn)
			b.next = ID(now, b.p.T) - 2
			b.handed, b.handedW = b.next, 0
			continue
		}
		b.seal(b.next, emit)
	}
}

// Flush seals everything (end of input).
func (b *ReceiverBuilder) Flush(emit func(*ReceiverInterval)) {
	if !b.started {
		return
	}
	b.flushing = true
	last := b.next
	for id := range b.open {
		last = max(last, id)
	}
	for id := range b.holds {
		last = max(last, id)
	}
	for b.next <= last {
		h := b.hold(b.next + 1)
		b.endHold(h, b.next+1)
		b.seal(b.next, emit)
	}
}

func (b *ReceiverBuilder) heldSet(bnd int64) *HeldSet {
	h := b.holds[bnd]
	if h == nil {
		// Never held (before capture began): any window will do.
		h = &receiverHold{w: b.p.minWindow(), k: 1}
	}
	b.endHold(h, bnd)
	delete(b.holds, bnd)
	return &HeldSet{B: bnd, W: h.w, K: h.k, Pkts: h.pkts}
}

func (b *ReceiverBuilder) seal(id int64, emit func(*ReceiverInterval)) {
	o := b.openFor(id)
	delete(b.open, id)
	s := &ReceiverInterval{ID: id, Partial: b.captureStart > id*b.p.T, Direct: o.sk, Flows: o.flows, pool: b.pool,
		HeldNext: b.heldSet(id + 1), NextK: b.classOf(id + 2), Late: b.late}
	if !b.sealedAny {
		s.HeldPrev = b.heldSet(id)
	}
	b.late = 0
	b.lastFlows = o.flows.Len()
	b.next = id + 1
	b.handed, b.handedW = id+1, s.HeldNext.W
	s.First = !b.sealedAny
	b.sealedAny = true
	emit(s)
}

// Release returns Direct's sketches for reuse (any goroutine).
func (s *ReceiverInterval) Release() {
	if s.pool != nil && s.Direct != nil {
		s.pool.put(s.Direct)
	}
	s.Direct = nil
}
