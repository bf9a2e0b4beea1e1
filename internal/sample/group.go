package sample

import "math/bits"

// Grouping an interval's candidates by flow (Select) is the larger part of
// the sender's selection. Where the flows are few against the candidates
// (the usual interval: hundreds to thousands of flows, a quarter of a
// million packets), a count per flow in a small open-addressing table and
// one scatter into a second buffer beat the in-place radix partition
// (groupByFlow), whose swap chains miss the cache on every move; where the
// flows are many the table would outgrow the cache, and the radix
// partition does better. docs/PERFORMANCE.md, "Packet samples", has the
// figures.

// groupMaxFlows is the most flows the table groups (a table of twice as
// many 16-byte slots: 1 MiB); beyond it, the radix partition.
const groupMaxFlows = 1 << 15

// groupMinSlots is the table's first size.
const groupMinSlots = 1 << 12

// groupSlot counts one flow's candidates, then holds where its next one goes.
type groupSlot struct {
	flow uint64
	n    uint32 // count; after offsets, the next free index in the output
	used bool
}

// grouper holds the table and the output buffer between intervals.
type grouper struct {
	slots []groupSlot
	shift uint // slot index: the top log2(len(slots)) bits of flow·φ
	used  int
	last  int // flows of the last grouping: the next table's size
	prev  []groupSlot
	out   []SenderCand
}

// group reorders cs so that each flow's candidates are contiguous, as
// groupByFlow does: by table when at most groupMaxFlows flows, else by the
// radix partition.
func (g *grouper) group(cs []SenderCand) {
	if len(cs) < 2 {
		return
	}
	ok := g.count(cs)
	g.last = g.used
	if !ok {
		groupByFlow(cs, 56)
		return
	}
	g.offsets()
	g.out = grow(g.out, len(cs))
	for _, c := range cs {
		s := &g.slots[g.find(c.Flow)]
		g.out[s.n] = c
		s.n++
	}
	copy(cs, g.out)
}

// count fills the table with each flow's count; false when the flows
// outnumber groupMaxFlows.
func (g *grouper) count(cs []SenderCand) bool {
	size := groupMinSlots // twice the last interval's flows: no doubling at a steady mix
	for size < 2*g.last {
		size *= 2
	}
	g.reset(size)
	for _, c := range cs {
		s := &g.slots[g.find(c.Flow)]
		if !s.used {
			if g.used >= groupMaxFlows {
				return false
			}
			*s = groupSlot{flow: c.Flow, used: true}
			g.used++
			if 2*g.used > len(g.slots) {
				g.rehash()
				s = &g.slots[g.find(c.Flow)]
			}
		}
		s.n++
	}
	return true
}

// find is the slot of flow: its own, or the empty one it would take
// (linear probing; the table is never more than half full).
func (g *grouper) find(flow uint64) int {
	mask := len(g.slots) - 1
	i := int((flow * 0x9e3779b97f4a7c15) >> g.shift)
	for {
		s := &g.slots[i]
		if !s.used || s.flow == flow {
			return i
		}
		i = (i + 1) & mask
	}
}

// reset empties the table at size slots (a power of two).
func (g *grouper) reset(size int) {
	g.slots = grow(g.slots, size)
	clear(g.slots)
	g.shift = uint(64 - bits.TrailingZeros(uint(size)))
	g.used = 0
}

// rehash doubles the table, keeping its flows and counts.
func (g *grouper) rehash() {
	g.prev = append(g.prev[:0], g.slots...)
	used := g.used
	g.reset(2 * len(g.prev))
	for _, s := range g.prev {
		if s.used {
			g.slots[g.find(s.flow)] = s
		}
	}
	g.used = used
}

// offsets turns each flow's count into the index of its first candidate
// in the output, flows in table order.
func (g *grouper) offsets() {
	at := uint32(0)
	for i := range g.slots {
		if s := &g.slots[i]; s.used {
			s.n, at = at, at+s.n
		}
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// GroupScratchBytes is a Selector's memory beside its copy of the
// candidates: the table at its largest (2·groupMaxFlows slots) and the
// copy a doubling takes of the one before.
const GroupScratchBytes = 3 * groupMaxFlows * 16
