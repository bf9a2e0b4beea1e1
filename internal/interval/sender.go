package interval

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/retrieval"
	"github.com/lds-net/lds/internal/sample"
)

// SenderInterval is one finished interval at the sender. The capture
// worker only hands it over; Finish (on another goroutine) sorts the
// boundary keys, builds the boundary function and ranks the heavy flows,
// so that the packet path never stops for that work at a boundary.
type SenderInterval struct {
	ID      int64
	Partial bool // the capture did not cover the whole interval
	First   bool // the first interval since this sender started: no earlier one will come
	Sk      *Sketches
	// The boundary B is the interval's end. Boundary holds the packet
	// hashes seen in [B - max_delay - guard, B), After those seen in
	// [B, B + max_delay + guard): every packet the receiver can hold at B
	// is in one of them. Finish sorts and de-duplicates both and builds
	// Split from them.
	Boundary []uint64
	After    []uint64
	// Split maps each of those packet hashes to one bit, set when the
	// packet was seen before B (BoundaryFunc): what the End ships instead
	// of the list. A hash in both lists maps to "before". On the receiver
	// it is decoded from the wire and the lists are nil.
	Split  *retrieval.Func
	Heavy  []capture.FlowKey // heaviest flows by packets, heaviest first (after Finish)
	HeavyN []uint64          // their packet counts (not on the wire: for merging workers)
	Late   uint64            // packets that arrived after their interval had closed (not counted)
	// Capture health when the interval was emitted, cumulative since
	// capture began (set by the capture worker, summed over workers).
	Counters capture.ParseCounters
	Drops    capture.DropStats
	// Consistent packet samples (internal/sample): the capture worker's
	// candidates (sender only, merged with the workers'), and the selection
	// that travels in the interval's stream (nil: none).
	SampleCands *sample.Cands
	Samples     *sample.Set

	heavy    []heavySlot // the worker's heavy-flow table, ranked by Finish
	keep     int         // heavy flows to keep (Params.Heavy)
	ranked   bool
	splitErr error
	pool     *pool // where Sk goes back (Release)
}

// Finish ranks the heavy flows and builds the boundary function.
// Idempotent; the merger, the encoder and the matcher call it, off the
// capture goroutine. An interval built by hand keeps its Heavy list as it
// is; one that already has Split (decoded) keeps it. The error (only
// possible for a corrupt key set) is returned again by later calls.
func (si *SenderInterval) Finish() error {
	si.rank()
	if si.Split == nil && si.splitErr == nil {
		si.splitErr = si.buildSplit()
	}
	return si.splitErr
}

// rank ranks the worker's heavy-flow table (once).
func (si *SenderInterval) rank() {
	if si.ranked {
		return
	}
	si.ranked = true
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

// buildSplit sorts and de-duplicates the two key lists and builds Split
// over their union: a key seen on both sides of B (identical invariant
// content, or a 64-bit hash collision) is "before", as the list was.
func (si *SenderInterval) buildSplit() error {
	slices.Sort(si.Boundary)
	si.Boundary = slices.Compact(si.Boundary)
	slices.Sort(si.After)
	si.After = slices.Compact(si.After)
	sc := si.pool.scratch()
	defer si.pool.putScratch(sc)
	keys, vals := sc.keys[:0], sc.vals[:0]
	b, a := si.Boundary, si.After
	for len(b) > 0 || len(a) > 0 {
		switch {
		case len(a) == 0 || len(b) > 0 && b[0] < a[0]:
			keys, vals = append(keys, b[0]), append(vals, true)
			b = b[1:]
		case len(b) == 0 || a[0] < b[0]:
			keys, vals = append(keys, a[0]), append(vals, false)
			a = a[1:]
		default: // seen on both sides: before wins
			keys, vals = append(keys, b[0]), append(vals, true)
			a, b = a[1:], b[1:]
		}
	}
	sc.keys, sc.vals = keys, vals
	f, err := sc.b.Build(keys, vals)
	if err != nil {
		return fmt.Errorf("interval %d: boundary function over %d keys: %w", si.ID, len(keys), err)
	}
	si.Split = f
	return nil
}

// SentBefore reports, for a packet hash the sender saw within max_delay +
// guard of the interval's end B, whether it saw it before B. For any other
// hash the answer is arbitrary. Finish must have succeeded.
func (si *SenderInterval) SentBefore(pktHash uint64) bool { return si.Split.Get(pktHash) }

// Release returns the interval's sketches for reuse once they are encoded
// (any goroutine). Sk must not be used afterwards.
func (si *SenderInterval) Release() {
	if si.pool != nil && si.Sk != nil {
		si.pool.put(si.Sk)
	}
	si.Sk = nil
}

// heavySlot is one entry of the heavy-flow table, as close copies it out.
type heavySlot struct {
	key  capture.FlowKey
	hash uint64
	n    uint64
}

// heavyCount is the part of a slot every packet touches; the slot's key
// lives apart (heavyTable.keys) and is written only when a flow takes the
// slot, so that the per-packet table is 16 bytes a slot (256 KiB at the
// default sketch.heavy) instead of 56.
type heavyCount struct {
	hash uint64
	n    uint64
}

// heavyTable finds the heaviest flows in constant memory and one memory
// access a packet: a direct-mapped table indexed by the flow hash where a
// flow that meets another in its slot decrements it (Misra–Gries per
// slot). A flow heavier than everything else sharing its slot keeps it;
// its count is a lower bound. The LDS's count-min gives the real counts.
type heavyTable struct {
	slots []heavyCount
	keys  []capture.FlowKey
	mask  uint64
}

func newHeavyTable(heavy int) heavyTable {
	n := 1024
	for n < 16*heavy && n < 1<<20 {
		n <<= 1
	}
	return heavyTable{slots: make([]heavyCount, n), keys: make([]capture.FlowKey, n), mask: uint64(n - 1)}
}

func (h *heavyTable) add(k *capture.FlowKey, hash uint64) {
	i := (hash ^ hash>>32) & h.mask
	s := &h.slots[i]
	switch {
	case s.n == 0:
		s.hash, s.n = hash, 1
		h.keys[i] = *k
	case s.hash == hash:
		s.n++
	default:
		s.n--
	}
}

// take appends the occupied slots to dst and empties the table.
func (h *heavyTable) take(dst []heavySlot) []heavySlot {
	for i, s := range h.slots {
		if s.n > 0 {
			dst = append(dst, heavySlot{key: h.keys[i], hash: s.hash, n: s.n})
		}
	}
	clear(h.slots)
	return dst
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
	// pend is the last closed interval, held back until the packets sent
	// up to its end + max_delay + guard are in its After list (pendUntil).
	pend      *SenderInterval
	pendUntil int64
	heavy     heavyTable
	lastTail  int // boundary list lengths of the last interval, to pre-size the next
	lastAfter int
	late      uint64
	opened    bool
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

// Add counts one packet, first emitting every interval that ended (with
// its boundary window) before it.
func (b *SenderBuilder) Add(pkt *capture.Packet, emit func(*SenderInterval)) {
	if pkt.TS >= b.end || b.pend != nil && pkt.TS >= b.pendUntil {
		b.Advance(pkt.TS, emit)
	}
	if pkt.TS < b.end-b.p.T {
		b.late++ // older than the open interval: already shipped
		return
	}
	b.cur.Sk.Add(pkt, pkt.TS-(b.end-b.p.T))
	if pkt.TS >= b.tailFrom {
		b.cur.Boundary = append(b.cur.Boundary, pkt.PktHash)
	}
	if b.pend != nil {
		// pkt.TS is in [pend's end, pendUntil): sent just after its boundary.
		b.pend.After = append(b.pend.After, pkt.PktHash)
	}
	b.heavy.add(&pkt.Key, pkt.FlowHash)
}

// Advance closes every interval that ends at or before now (Unix ns),
// emitting empty intervals for an idle link, and opens the one containing
// now. A closed interval is emitted once now reaches its end + max_delay +
// guard: its boundary function covers the packets sent until then.
func (b *SenderBuilder) Advance(now int64, emit func(*SenderInterval)) {
	if b.cur == nil {
		return
	}
	for {
		if b.pend != nil && now >= b.pendUntil {
			b.emitPend(emit)
			continue
		}
		if now < b.end {
			return
		}
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

// Flush emits the held-back and the open interval (end of input): their
// boundary functions cover what was seen, and packets never seen by the
// sender cannot be at the receiver either.
func (b *SenderBuilder) Flush(emit func(*SenderInterval)) {
	if b.cur != nil {
		b.close(emit)
		b.emitPend(emit)
	}
}

// FlushPartial emits the held-back and the open interval when capture stops
// at now; the open one is flagged partial if now is before its end.
func (b *SenderBuilder) FlushPartial(now int64, emit func(*SenderInterval)) {
	if b.cur != nil {
		if now < b.end {
			b.cur.Partial = true
		}
		b.close(emit)
		b.emitPend(emit)
	}
}

func (b *SenderBuilder) emitPend(emit func(*SenderInterval)) {
	if iv := b.pend; iv != nil {
		b.pend = nil
		b.lastAfter = len(iv.After)
		emit(iv)
	}
}

func (b *SenderBuilder) open(id int64) {
	start := id * b.p.T
	b.cur = &SenderInterval{ID: id, Sk: b.pool.get(), Partial: b.captureStart > start, First: !b.opened,
		Boundary: make([]uint64, 0, b.lastTail+b.lastTail/4), After: make([]uint64, 0, b.lastAfter+b.lastAfter/4),
		pool: b.pool, keep: b.p.Heavy}
	b.opened = true
	b.end = start + b.p.T
	b.tailFrom = b.end - b.p.MaxDelay - b.p.Guard
}

// close ends the open interval: it copies the heavy-flow table's occupied
// slots out (bounded by the table) and clears it, and holds the interval
// back (pend) for the packets sent just after its end; sorting, ranking and
// building wait for Finish. An interval still held back is emitted first, so that intervals
// leave in order (it cannot still be collecting: T > 2(max_delay+guard)).
func (b *SenderBuilder) close(emit func(*SenderInterval)) {
	b.emitPend(emit)
	iv := b.cur
	iv.heavy = b.heavy.take(iv.heavy[:0])
	iv.Late, b.late = b.late, 0
	b.lastTail = len(iv.Boundary)
	b.cur = nil
	b.pend, b.pendUntil = iv, b.end+b.p.MaxDelay+b.p.Guard
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
