package interval

import (
	"cmp"
	"slices"

	"github.com/lds-net/lds/internal/capture"
)

// SenderInterval is one finished interval at the sender. The capture
// worker only hands it over; Finish (on another goroutine) sorts the
// boundary list and ranks the heavy flows, so that the packet path never
// stops for that work at a boundary.
type SenderInterval struct {
	ID       int64
	Partial  bool // the capture did not cover the whole interval
	First    bool // the first interval since this sender started: no earlier one will come
	Sk       *Sketches
	Boundary []uint64          // BoundaryKeys of the packets seen in [B - max_delay - guard, B), B the interval's end; sorted by Finish
	Heavy    []capture.FlowKey // heaviest flows by packets, heaviest first (after Finish)
	HeavyN   []uint64          // their packet counts (not on the wire: for merging workers)
	Late     uint64            // packets that arrived after their interval had closed (not counted)
	// Capture health when the interval closed, cumulative since capture
	// began (set by the capture worker, summed over workers).
	Counters capture.ParseCounters
	Drops    capture.DropStats

	heavy    []heavySlot // the worker's heavy-flow table, ranked by Finish
	keep     int         // heavy flows to keep (Params.Heavy)
	finished bool
	pool     *pool // where Sk goes back (Release)
}

// Finish sorts the boundary list and ranks the heavy flows. Idempotent;
// the merger, the encoder and the matcher call it, off the capture
// goroutine. An interval built by hand keeps its Heavy list as it is.
func (si *SenderInterval) Finish() {
	if si.finished {
		return
	}
	si.finished = true
	slices.Sort(si.Boundary)
	si.Boundary = slices.Compact(si.Boundary)
	all := make([]kv, 0, len(si.heavy))
	for _, s := range si.heavy {
		if s.n > 0 {
			all = append(all, kv{s.key, s.n})
		}
	}
	si.heavy = nil
	if si.keep > 0 {
		si.Heavy, si.HeavyN = top(all, si.keep)
	}
}

// Release returns the interval's sketches for reuse once they are encoded
// (any goroutine). Sk must not be used afterwards.
func (si *SenderInterval) Release() {
	if si.pool != nil && si.Sk != nil {
		si.pool.put(si.Sk)
	}
	si.Sk = nil
}

// BoundaryBits is how much of a packet hash the boundary list keeps. A held
// packet sent after the boundary whose key collides with one in the list
// (probability about list size / 2^40, ~5e-8 at 1 Mpps) lands in the
// closing interval: its cells then fail the digest check and are left
// out, never believed. 40 bits cost ~3 bytes a packet on the wire.
const BoundaryBits = 40

// BoundaryKey is the part of a packet hash the boundary list carries.
func BoundaryKey(pktHash uint64) uint64 { return pktHash >> (64 - BoundaryBits) }

// heavySlot is one entry of the heavy-flow table.
type heavySlot struct {
	key  capture.FlowKey
	hash uint64
	n    uint64
}

// heavyTable finds the heaviest flows in constant memory and one memory
// access a packet: a direct-mapped table indexed by the flow hash where a
// flow that meets another in its slot decrements it (Misra–Gries per
// slot). A flow heavier than everything else sharing its slot keeps it;
// its count is a lower bound. The LDS's count-min gives the real counts.
type heavyTable struct {
	slots []heavySlot
	mask  uint64
}

func newHeavyTable(heavy int) heavyTable {
	n := 1024
	for n < 16*heavy && n < 1<<20 {
		n <<= 1
	}
	return heavyTable{slots: make([]heavySlot, n), mask: uint64(n - 1)}
}

func (h *heavyTable) add(k *capture.FlowKey, hash uint64) {
	s := &h.slots[(hash^hash>>32)&h.mask]
	switch {
	case s.n == 0:
		s.key, s.hash, s.n = *k, hash, 1
	case s.hash == hash:
		s.n++
	default:
		s.n--
	}
}

// SenderBuilder assigns packets to intervals by the sender's own clock and
// emits each interval when it ends. Not safe for concurrent use: one per
// capture worker, merged at the boundary.
type SenderBuilder struct {
	p            Params
	pool         *pool
	captureStart int64
	cur          *SenderInterval
	end          int64 // end of cur, ns
	tailFrom     int64 // packets at or after this go into cur.Boundary
	heavy        heavyTable
	lastTail     int // boundary list length of the last interval, to pre-size the next
	late         uint64
	opened       bool
}

// NewSenderBuilder starts a builder; captureStart (Unix ns) is when capture
// began: the interval containing it is flagged partial unless capture began
// at its very start.
func NewSenderBuilder(p Params, captureStart int64) (*SenderBuilder, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	pl, err := newPool(p)
	if err != nil {
		return nil, err
	}
	b := &SenderBuilder{p: p, pool: pl, captureStart: captureStart, heavy: newHeavyTable(p.Heavy)}
	// Open the interval capture began in, so that every worker of one
	// capture emits the same sequence of intervals (they are merged).
	b.open(ID(captureStart, p.T))
	return b, nil
}

// Add counts one packet, first emitting every interval that ended before it.
func (b *SenderBuilder) Add(pkt *capture.Packet, emit func(*SenderInterval)) {
	if pkt.TS >= b.end {
		b.Advance(pkt.TS, emit)
	}
	if pkt.TS < b.end-b.p.T {
		b.late++ // older than the open interval: already shipped
		return
	}
	b.cur.Sk.Add(pkt, pkt.TS-(b.end-b.p.T))
	if pkt.TS >= b.tailFrom {
		b.cur.Boundary = append(b.cur.Boundary, BoundaryKey(pkt.PktHash))
	}
	b.heavy.add(&pkt.Key, pkt.FlowHash)
}

// Advance closes every interval that ends at or before now (Unix ns),
// emitting empty intervals for an idle link, and opens the one containing now.
func (b *SenderBuilder) Advance(now int64, emit func(*SenderInterval)) {
	if b.cur == nil {
		return
	}
	for now >= b.end {
		next := b.cur.ID + 1
		b.close(emit)
		// After a long idle gap, skip straight to now rather than emit
		// thousands of empty intervals; the receiver counts the gap.
		if id := ID(now, b.p.T); id-next > 16 {
			next = id
		}
		b.open(next)
	}
}

// Flush emits the open interval (end of input).
func (b *SenderBuilder) Flush(emit func(*SenderInterval)) {
	if b.cur != nil {
		b.close(emit)
	}
}

// FlushPartial emits the open interval when capture stops at now, before
// the interval's end: it is flagged partial.
func (b *SenderBuilder) FlushPartial(now int64, emit func(*SenderInterval)) {
	if b.cur != nil {
		if now < b.end {
			b.cur.Partial = true
		}
		b.close(emit)
	}
}

func (b *SenderBuilder) open(id int64) {
	start := id * b.p.T
	b.cur = &SenderInterval{ID: id, Sk: b.pool.get(), Partial: b.captureStart > start, First: !b.opened,
		Boundary: make([]uint64, 0, b.lastTail+b.lastTail/4), pool: b.pool, keep: b.p.Heavy}
	b.opened = true
	b.end = start + b.p.T
	b.tailFrom = b.end - b.p.MaxDelay - b.p.Guard
}

// close hands the interval over. It copies the heavy-flow table (a bounded
// memmove) and clears it; sorting and ranking wait for Finish.
func (b *SenderBuilder) close(emit func(*SenderInterval)) {
	iv := b.cur
	iv.heavy = slices.Clone(b.heavy.slots)
	clear(b.heavy.slots)
	iv.Late, b.late = b.late, 0
	b.lastTail = len(iv.Boundary)
	b.cur = nil
	emit(iv)
}

type kv struct {
	k capture.FlowKey
	v uint64
}

// top returns the n keys with the highest counts, heaviest first, ties
// broken by key so that the choice is deterministic.
func top(all []kv, n int) ([]capture.FlowKey, []uint64) {
	if n <= 0 || len(all) == 0 {
		return nil, nil
	}
	slices.SortFunc(all, func(a, b kv) int {
		if c := cmp.Compare(b.v, a.v); c != 0 {
			return c
		}
		return compareKeys(a.k, b.k)
	})
	if len(all) > n {
		all = all[:n]
	}
	out, cnt := make([]capture.FlowKey, len(all)), make([]uint64, len(all))
	for i := range all {
		out[i], cnt[i] = all[i].k, all[i].v
	}
	return out, cnt
}

func compareKeys(a, b capture.FlowKey) int {
	if c := slices.Compare(a.Src[:], b.Src[:]); c != 0 {
		return c
	}
	if c := slices.Compare(a.Dst[:], b.Dst[:]); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.SPort, b.SPort), cmp.Compare(a.DPort, b.DPort), cmp.Compare(a.Proto, b.Proto))
}
