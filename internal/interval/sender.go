package interval

import (
	"slices"

	"github.com/lds-net/lds/internal/capture"
)

// SenderInterval is one finished interval at the sender.
type SenderInterval struct {
	ID        int64
	Partial   bool // the capture did not cover the whole interval
	First     bool // the first interval since this sender started: no earlier one will come
	Sk        *Sketches
	Boundary  []uint64          // sorted packet hashes seen in [B - max_delay - guard, B), B the interval's end
	Heavy     []capture.FlowKey // heaviest flows by packets, heaviest first
	HeavyN    []uint64          // their packet counts (not on the wire: for merging workers)
	Late      uint64            // packets that arrived after their interval had closed (not counted)
	Untracked uint64            // packets of flows beyond the flow table cap (counted in sketches, not in Heavy)
	// Capture health when the interval closed, cumulative since capture
	// began (set by the capture worker, summed over workers).
	Counters capture.ParseCounters
	Drops    capture.DropStats
}

// BoundaryBits is how much of a packet hash the boundary list keeps. A held
// packet sent after the boundary whose key collides with one in the list
// (probability about list size / 2^40, ~5e-8 at 1 Mpps) lands in the
// closing interval: its cells then fail the digest check and are left
// out, never believed. 40 bits cost ~3 bytes a packet on the wire.
const BoundaryBits = 40

// BoundaryKey is the part of a packet hash the boundary list carries.
func BoundaryKey(pktHash uint64) uint64 { return pktHash >> (64 - BoundaryBits) }

// SenderBuilder assigns packets to intervals by the sender's own clock and
// emits each interval when it ends. Not safe for concurrent use: one per
// capture worker, merged at the boundary.
type SenderBuilder struct {
	p            Params
	pool         pool
	captureStart int64
	cur          *SenderInterval
	end          int64 // end of cur, ns
	tailFrom     int64 // packets at or after this go into cur.Boundary
	flows        map[capture.FlowKey]uint64
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
	if _, err := NewSketches(p); err != nil {
		return nil, err
	}
	b := &SenderBuilder{p: p, pool: pool{p: p}, captureStart: captureStart,
		flows: make(map[capture.FlowKey]uint64, min(p.FlowCap, 1<<16))}
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
	if n, ok := b.flows[pkt.Key]; ok || len(b.flows) < b.p.FlowCap {
		b.flows[pkt.Key] = n + 1
	} else {
		b.cur.Untracked++
	}
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

// Recycle returns the sketches of an interval that is no longer needed.
func (b *SenderBuilder) Recycle(s *Sketches) { b.pool.put(s) }

func (b *SenderBuilder) open(id int64) {
	start := id * b.p.T
	b.cur = &SenderInterval{ID: id, Sk: b.pool.get(), Partial: b.captureStart > start, First: !b.opened}
	b.opened = true
	b.end = start + b.p.T
	b.tailFrom = b.end - b.p.MaxDelay - b.p.Guard
}

func (b *SenderBuilder) close(emit func(*SenderInterval)) {
	iv := b.cur
	slices.Sort(iv.Boundary)
	iv.Boundary = slices.Compact(iv.Boundary)
	iv.Heavy, iv.HeavyN = topFlows(b.flows, b.p.Heavy)
	iv.Late, b.late = b.late, 0
	clear(b.flows)
	b.cur = nil
	emit(iv)
}

type kv struct {
	k capture.FlowKey
	v uint64
}

// topFlows returns the n keys with the highest counts, heaviest first.
func topFlows(m map[capture.FlowKey]uint64, n int) ([]capture.FlowKey, []uint64) {
	if n <= 0 || len(m) == 0 {
		return nil, nil
	}
	all := make([]kv, 0, len(m))
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	return top(all, n)
}

func top(all []kv, n int) ([]capture.FlowKey, []uint64) {
	slices.SortFunc(all, func(a, b kv) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
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
	ab := a.AppendBinary(nil)
	bb := b.AppendBinary(nil)
	return slices.Compare(ab, bb)
}
