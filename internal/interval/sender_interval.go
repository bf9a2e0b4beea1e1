package interval

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

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
	// Trailer: an empty interval emitted at the end of the input only so
	// that the boundaries the last packets can be held at have a function
	// (not reported when the receiver has nothing in it either).
	Trailer bool
	Sk      *Sketches
	// The boundary b = ID+1 is the interval's end. Keys holds the packet
	// hashes seen in the key window of b for the receiver's hold window
	// Window (Params.KeyWindow), each with its offset b − (send interval):
	// every packet the receiver can hold at b is among them, in capture
	// order (a hash may appear twice). Finish builds Split over them; its
	// storage goes back to the builder's pool with Release.
	Keys   []BoundaryKey
	Window int64 // ns; the hold window Keys cover
	// Split maps each of those packet hashes to its offset
	// (SentOffset): what the End ships. A hash seen at two offsets maps
	// to the larger (the earlier send). On the receiver it is decoded from
	// the wire and Keys is nil.
	Split  *retrieval.Func
	Heavy  []capture.FlowKey // heaviest flows by packets, heaviest first (after Finish)
	HeavyN []uint64          // their packet counts (not on the wire: for merging workers)
	Late   uint64            // packets that arrived after their interval had closed (not counted)
	// Capture health when the interval was emitted, cumulative since
	// capture began (set by the capture worker, summed over workers).
	Counters capture.ParseCounters
	Drops    capture.DropStats
	// DropsAffecting: the capture drops that may have removed packets of
	// this interval (DropLedger; summed over workers).
	DropsAffecting uint64
	// Consistent packet samples (internal/sample): the capture worker's
	// candidates (sender only, merged with the workers'), and the selection
	// that travels in the interval's stream (nil: none).
	SampleCands *sample.SenderCands
	Samples     *sample.Set
	// Logs: every packet placed in the interval (one log per capture
	// worker; nil without the lost-packet table). It outlives Release: the
	// sender keeps it until the receiver's question about the interval's
	// lost packets is answered (PacketLog).
	Logs []*PacketLog

	heavy     []heavySlot // the worker's heavy-flow table, ranked by Finish
	keep      int         // heavy flows to keep (Params.Heavy)
	ranked    bool
	lostBuilt bool
	splitErr  error
	pool      *pool          // where Sk and Keys go back (Release)
	keyBuf    *[]BoundaryKey // the pooled holder of Keys' storage (nil: none)
}

// BoundaryKey is one packet of a boundary's key window: its hash and the
// number of intervals between its send interval and the boundary (0: sent
// after the boundary, 1: in the interval just before, ...).
type BoundaryKey struct {
	Hash uint64
	Off  uint32
}

// Finish ranks the heavy flows and builds the boundary function.
// Idempotent; the sender's ship stage calls it once per interval (before
// wire.Encode, which only encodes), and the receiver's matcher on what it
// decoded, both off the capture goroutine. An interval built by hand keeps its Heavy list as it
// is; one that already has Split (decoded) keeps it. The error (only
// possible for a corrupt key set) is returned again by later calls.
func (si *SenderInterval) Finish() error {
	si.rank()
	si.buildLost()
	if si.Split == nil && si.splitErr == nil {
		si.splitErr = si.buildSplit()
	}
	return si.splitErr
}

// buildLost fills the lost-packet table from the packet logs (once): the
// capture goroutine only logs each packet, and the table, which only the
// wire needs, is built here, off the packet path.
func (si *SenderInterval) buildLost() {
	if si.lostBuilt || si.Sk == nil || si.Sk.Lost == nil || !si.Sk.deferLost {
		return
	}
	si.lostBuilt = true
	for _, l := range si.Logs {
		l.insertAll(si.Sk.Lost)
	}
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

// buildSplit builds Split over the keys. The function depends on the
// set of keys and values only, not on their order, so the keys go in as
// captured; only when a hash appears twice (identical invariant content
// sent twice, or a 64-bit hash collision: the builder reports
// ErrDuplicateKey) are they sorted and de-duplicated, the larger offset
// (the earlier send) kept.
func (si *SenderInterval) buildSplit() error {
	sc := si.pool.scratch()
	defer si.pool.putScratch(sc)
	f, err := sc.build(si.Keys)
	if errors.Is(err, retrieval.ErrDuplicateKey) {
		slices.SortFunc(si.Keys, func(a, b BoundaryKey) int {
			if c := cmp.Compare(a.Hash, b.Hash); c != 0 {
				return c
			}
			return cmp.Compare(b.Off, a.Off)
		})
		si.Keys = slices.CompactFunc(si.Keys, func(a, b BoundaryKey) bool { return a.Hash == b.Hash })
		f, err = sc.build(si.Keys)
	}
	if err != nil {
		return fmt.Errorf("interval %d: boundary function over %d keys: %w", si.ID, len(si.Keys), err)
	}
	si.Split = f
	return nil
}

// build makes the function mapping each key's hash to its offset, in the
// smallest width that holds the largest offset.
func (sc *splitScratch) build(ks []BoundaryKey) (*retrieval.Func, error) {
	keys, vals := slices.Grow(sc.keys[:0], len(ks)), slices.Grow(sc.vals[:0], len(ks))
	maxOff := uint32(0)
	for _, k := range ks {
		keys, vals = append(keys, k.Hash), append(vals, uint64(k.Off))
		maxOff = max(maxOff, k.Off)
	}
	sc.keys, sc.vals = keys, vals
	return sc.b.BuildValues(keys, vals, retrieval.WidthFor(uint64(maxOff)))
}

// SentOffset reports, for a packet hash the sender saw in the key window
// of the interval's end boundary b, b minus its send interval. For any
// other hash the answer is arbitrary. Finish must have succeeded.
func (si *SenderInterval) SentOffset(pktHash uint64) uint64 { return si.Split.Value(pktHash) }

// Release returns the interval's sketches and boundary keys for reuse
// once they are encoded (any goroutine). Sk and Keys must not be used
// afterwards.
func (si *SenderInterval) Release() {
	if si.pool != nil && si.Sk != nil {
		si.pool.put(si.Sk)
	}
	si.Sk = nil
	if si.pool != nil && si.keyBuf != nil {
		*si.keyBuf = si.Keys[:0]
		si.pool.putKeys(si.keyBuf)
		si.Keys = nil
	}
	si.keyBuf = nil
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
	n    uint32
	// ref: the key index in the interval's packet log (PacketLog.Keys) of
	// the flow that took the slot last, | slotRefSet; 0 until a flow takes
	// the slot in this interval (take clears it). It stays the flow's
	// while the slot's hash does, so that a flow that lost its count to
	// another and takes the slot back finds its index here again.
	ref uint32
}

// slotRefSet marks a slot's ref as set in this interval (indexes take 30
// bits, refIndexMask).
const slotRefSet = 1 << 31

// heavyTable finds the heaviest flows in constant memory and one memory
// access a packet: a direct-mapped table indexed by the flow hash where a
// flow that meets another in its slot decrements it (Misra–Gries per
// slot). A flow heavier than everything else sharing its slot keeps it;
// its count is a lower bound. The LDS's count-min gives the real counts.
type heavyTable struct {
	slots []heavyCount
	keys  []capture.FlowKey
	mask  uint64
	// other: the packet log's key index of flows met in a slot another
	// flow holds, direct-mapped by flow hash; gen tells this interval's
	// entries from older ones (take starts a new generation).
	other []otherRef
	gen   uint32
}

type otherRef struct {
	hash uint64
	ref  uint32
	gen  uint32
}

// otherRefs is the size of the table of flows that meet a held slot, in
// sets of otherWays.
const (
	otherRefs = 4096
	otherWays = 4
)

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

// addLog is add that also returns the flow's key index in the interval's
// packet log. A flow holding its slot finds the index there; a flow that
// takes a slot or meets one another flow holds finds it in a second,
// direct-mapped table, and keeps its key in the log only when that table
// does not hold it either.
func (h *heavyTable) addLog(k *capture.FlowKey, hash uint64, l *PacketLog) uint32 {
	i := (hash ^ hash>>32) & h.mask
	s := &h.slots[i]
	if s.hash == hash && s.ref != 0 {
		s.n++ // holds the slot, or takes back the empty slot it held
		return s.ref &^ slotRefSet
	}
	return h.addLogSlot(k, hash, l, s, i)
}

// addLogSlot is addLog for a flow that is not the slot's last taker
// (s, slot i) in this interval: it takes the slot if it is free, else
// decrements it; SenderBuilder.logPacket writes the common case out and
// calls this for the rest.
func (h *heavyTable) addLogSlot(k *capture.FlowKey, hash uint64, l *PacketLog, s *heavyCount, i uint64) uint32 {
	if s.n == 0 {
		s.hash, s.n = hash, 1
		h.keys[i] = *k
		r := h.otherRef(k, hash, l)
		s.ref = r | slotRefSet
		return r
	}
	s.n--
	return h.otherRef(k, hash, l)
}

func (h *heavyTable) otherRef(k *capture.FlowKey, hash uint64, l *PacketLog) uint32 {
	if h.other == nil {
		h.other = make([]otherRef, otherRefs)
		h.gen = 1
	}
	// A set of otherWays entries (one cache line), the most recently
	// added first: flows that meet in a set do not evict each other until
	// more than otherWays of them do.
	j := int(hash>>20) & (otherRefs - 1) &^ (otherWays - 1)
	set := h.other[j : j+otherWays : j+otherWays]
	for i := range set {
		if set[i].gen == h.gen && set[i].hash == hash {
			return set[i].ref
		}
	}
	r := l.addKey(k)
	copy(set[1:], set[:otherWays-1])
	set[0] = otherRef{hash: hash, ref: r, gen: h.gen}
	return r
}

// take appends the occupied slots to dst and empties the table.
func (h *heavyTable) take(dst []heavySlot) []heavySlot {
	for i, s := range h.slots {
		if s.n > 0 {
			dst = append(dst, heavySlot{key: h.keys[i], hash: s.hash, n: uint64(s.n)})
		}
	}
	clear(h.slots)
	h.gen++ // the next interval's packet log: new key indexes
	if h.gen == 0 {
		clear(h.other)
		h.gen = 1
	}
	return dst
}

// SenderBuilder assigns packets to intervals by the sender's own clock and
// emits each interval once the packets of its end boundary's key window
// are in. Not safe for concurrent use: one per capture worker, merged at
// the boundary.
type SenderBuilder struct {
	p            Params
	pool         *pool
	captureStart int64
	cur          *SenderInterval
	end          int64 // end of cur, ns
	// pend holds the closed intervals, oldest first, until the packets
	// sent up to their end + W + guard are in the log (W the receiver's
	// window for that boundary, or max_delay while it is unknown).
	pend []*SenderInterval
	// log keeps (hash, time) of every counted packet near a boundary,
	// oldest first, from the earliest send time a pending boundary's key
	// window can reach (16 B a packet; off the wire).
	log       boundaryLog
	nextCheck int64 // Add calls Advance once a packet reaches it
	win       *WindowTable
	wait      time.Duration // replay: wait this long for a window instead of assuming max_delay
	heavy     heavyTable
	late      uint64
	lastTS    int64 // latest packet time counted
	opened    bool
	trailer   bool       // Flush is advancing past the input
	plog      *PacketLog // the open interval's packet log (nil without the lost-packet table)
	lines     []uintptr  // locate's addresses, reused
	spots     [spotRing]spot
	// recs is plog's current chunk and ri the records in it: the packet
	// path stores there, and syncLog sets plog's length when the chunk
	// ends or the interval closes.
	recs []PacketRec
	ri   int
}

type logRec struct {
	h  uint64
	ts int64
}

// boundaryLog is the boundary log's storage: records, oldest first, in
// chunks of logChunk that are reused from one interval to the next
// (records a boundary no longer needs free whole chunks, which the next
// packets fill). It never moves a record: at a steady rate a packet
// costs one 16-byte store, and growing (a faster rate) costs one chunk.
// Its storage stays within one chunk of the most records it ever held.
type boundaryLog struct {
	chunks [][]logRec // in use, oldest first; each logChunk long
	free   [][]logRec // emptied, for reuse
	head   int        // index of the oldest record in chunks[0]
	n      int        // records held
}

const (
	logChunkBits = 14
	logChunk     = 1 << logChunkBits // records a chunk (256 KiB)
)

func (r *boundaryLog) push(rec logRec) {
	k := r.head + r.n
	c := k >> logChunkBits
	if c == len(r.chunks) {
		r.addChunk()
	}
	r.chunks[c][k&(logChunk-1)] = rec
	r.n++
}

func (r *boundaryLog) addChunk() {
	if n := len(r.free); n > 0 {
		r.chunks = append(r.chunks, r.free[n-1])
		r.free[n-1] = nil
		r.free = r.free[:n-1]
		return
	}
	r.chunks = append(r.chunks, make([]logRec, logChunk))
}

// ts is the time of the i-th oldest record.
func (r *boundaryLog) ts(i int) int64 {
	k := r.head + i
	return r.chunks[k>>logChunkBits][k&(logChunk-1)].ts
}

// search is the first record at or after t, as if the log were in time
// order (capture order is, but for rare stragglers).
func (r *boundaryLog) search(t int64) int {
	return sort.Search(r.n, func(i int) bool { return r.ts(i) >= t })
}

// appendKeys appends records i to j (oldest first) that were sent in
// [from, to) as keys of boundary bnd (appendKeys).
func (r *boundaryLog) appendKeys(keys []BoundaryKey, i, j int, from, to, bnd, t int64) []BoundaryKey {
	for i < j {
		k := r.head + i
		o := k & (logChunk - 1)
		m := min(j-i, logChunk-o)
		keys = appendKeys(keys, r.chunks[k>>logChunkBits][o:o+m], from, to, bnd, t)
		i += m
	}
	return keys
}

// drop forgets the k oldest records, freeing the chunks they emptied.
func (r *boundaryLog) drop(k int) {
	if k <= 0 {
		return
	}
	r.head, r.n = r.head+k, r.n-k
	if d := r.head >> logChunkBits; d > 0 {
		r.free = append(r.free, r.chunks[:d]...)
		m := copy(r.chunks, r.chunks[d:])
		clear(r.chunks[m:])
		r.chunks = r.chunks[:m]
		r.head &= logChunk - 1
	}
}

// NewSenderBuilder starts a builder; captureStart (Unix ns) is when capture
// began: the interval containing it is flagged partial unless capture began
// at its very start. Without a window table (nil) every boundary's
// function covers max_delay.
func NewSenderBuilder(p Params, captureStart int64) (*SenderBuilder, error) {
	return NewSenderBuilderWindows(p, captureStart, nil, 0)
}

// NewSenderBuilderWindows is NewSenderBuilder with the receiver's windows:
// an interval leaves once its end boundary's window is known and the
// packets up to it are in, or, without word from the receiver, once
// max_delay has passed. wait > 0 (replay of files, which never block a
// live capture) makes the builder wait up to that long for a window
// rather than cover max_delay.
func NewSenderBuilderWindows(p Params, captureStart int64, win *WindowTable, wait time.Duration) (*SenderBuilder, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	pl, err := newPool(p)
	if err != nil {
		return nil, err
	}
	b := &SenderBuilder{p: p, pool: pl, captureStart: captureStart, heavy: newHeavyTable(p.Heavy), win: win, wait: wait}
	// Open the interval capture began in, so that every worker of one
	// capture emits the same sequence of intervals (they are merged).
	b.open(ID(captureStart, p.T))
	b.nextCheck = b.end
	return b, nil
}

// Add counts one packet, first emitting every interval whose boundary
// window is complete before it.
func (b *SenderBuilder) Add(pkt *capture.Packet, emit func(*SenderInterval)) {
	b.add(pkt, nil, emit)
}

// add is Add, with the packet's cells found ahead when sp is not nil
// (AddBatch).
func (b *SenderBuilder) add(pkt *capture.Packet, sp *spot, emit func(*SenderInterval)) {
	if pkt.TS >= b.nextCheck {
		b.Advance(pkt.TS, emit)
	}
	start := b.end - b.p.T
	if pkt.TS < start {
		b.late++ // older than the open interval: already shipped
		return
	}
	if sp != nil && sp.ok {
		b.cur.Sk.addSpot(pkt, pkt.TS-start, sp)
	} else {
		b.cur.Sk.Add(pkt, pkt.TS-start)
	}
	b.lastTS = max(b.lastTS, pkt.TS)
	// Near a boundary: within reach of the key window of the one before
	// (max_delay + guard after it) or the one after (max_delay + 2 guard
	// before it).
	if off := pkt.TS - start; off < b.p.MaxDelay+b.p.Guard || off >= b.p.T-b.p.MaxDelay-2*b.p.Guard {
		b.log.push(logRec{pkt.PktHash, pkt.TS})
	}
	if b.plog != nil {
		b.logPacket(pkt)
		return
	}
	b.heavy.add(&pkt.Key, pkt.FlowHash)
}

// logPacket counts the packet in the heavy-flow table and appends it to
// the open interval's packet log, in one call: the flow's key index from
// its slot when it holds the slot or took it last (the common case,
// written out here), else from addLogSlot. The record goes into the
// log's current chunk, which the builder holds (recs, ri): one
// bounds-checked store.
func (b *SenderBuilder) logPacket(pkt *capture.Packet) {
	hash, ph, ts, kind, id := pkt.FlowHash, pkt.PktHash, pkt.TS, pkt.IDKind, pkt.ID
	h := &b.heavy
	i := (hash ^ hash>>32) & h.mask
	s := &h.slots[i]
	var ref uint32
	if s.hash == hash && s.ref != 0 {
		s.n++ // as addLog
		ref = s.ref &^ slotRefSet
	} else {
		ref = h.addLogSlot(&pkt.Key, hash, b.plog, s, i)
	}
	rec := PacketRec{Hash: ph, TS: ts, Ref: ref | uint32(kind)<<refKindShift, ID: id}
	if recs, ri := b.recs, b.ri; uint(ri) < uint(len(recs)) {
		recs[ri] = rec
		b.ri = ri + 1
		return
	}
	b.logNext(rec)
}

// logNext starts the open log's next chunk with rec.
func (b *SenderBuilder) logNext(rec PacketRec) {
	b.syncLog()
	b.plog.grow()
	b.recs, b.ri = b.plog.chunks[len(b.plog.chunks)-1], 1
	b.recs[0] = rec
}

// syncLog sets the open log's length from the builder's position in its
// current chunk (the capture goroutine counts there).
func (b *SenderBuilder) syncLog() {
	if lg := b.plog; lg != nil && len(lg.chunks) > 0 {
		lg.n = (len(lg.chunks)-1)<<logRecsBits + b.ri
	}
}

// Advance closes every interval that ends at or before now (Unix ns),
// emitting empty intervals for an idle link, and opens the one containing
// now. A closed interval is emitted once now reaches its end + W + guard.
func (b *SenderBuilder) Advance(now int64, emit func(*SenderInterval)) {
	if b.cur == nil {
		return
	}
	for {
		if len(b.pend) > 0 {
			if w, ok := b.due(b.pend[0], now); ok {
				b.emitFront(w, emit)
				continue
			}
		}
		if now < b.end {
			break
		}
		next := b.cur.ID + 1
		b.close()
		// After a long idle gap, skip straight to now rather than emit
		// thousands of empty intervals; the receiver counts the gap.
		if id := ID(now, b.p.T); id-next > 16 {
			next = id
		}
		b.open(next)
	}
	b.nextCheck = b.end
	if len(b.pend) > 0 {
		b.nextCheck = min(b.nextCheck, b.checkAt(b.pend[0], now))
	}
}

// due reports whether pending interval si can leave at now, and the
// window its boundary's function is to cover.
func (b *SenderBuilder) due(si *SenderInterval, now int64) (int64, bool) {
	bt := (si.ID + 1) * b.p.T
	if now < bt+b.p.minWindow()+b.p.Guard {
		return 0, false
	}
	if b.win == nil {
		return b.p.MaxDelay, now >= bt+b.p.MaxDelay+b.p.Guard
	}
	w, ok := b.win.Get(si.ID + 1)
	if !ok && now < bt+b.p.MaxDelay+b.p.Guard && b.wait > 0 {
		w, ok = b.win.wait(si.ID+1, b.wait)
	}
	if ok {
		w = min(w, b.p.MaxDelay)
		return w, now >= bt+w+b.p.Guard
	}
	return b.p.MaxDelay, now >= bt+b.p.MaxDelay+b.p.Guard
}

// checkAt is when to look at pending interval si again.
func (b *SenderBuilder) checkAt(si *SenderInterval, now int64) int64 {
	bt := (si.ID + 1) * b.p.T
	if b.win == nil {
		return bt + b.p.MaxDelay + b.p.Guard
	}
	if w, ok := b.win.Get(si.ID + 1); ok {
		return bt + min(w, b.p.MaxDelay) + b.p.Guard
	}
	// Unknown yet: look again every 100 µs of packet time.
	return max(bt+b.p.minWindow()+b.p.Guard, min(now+100_000, bt+b.p.MaxDelay+b.p.Guard))
}

// Flush emits the held-back and the open interval (end of input): their
// boundary functions cover what was seen, and packets never seen by the
// sender cannot be at the receiver either. When max_delay spans more
// than an interval it first advances, as a live sender on an idle link
// would, to the last boundary whose key window can hold the last packet,
// so that every boundary the last packets can be held at has a function.
func (b *SenderBuilder) Flush(emit func(*SenderInterval)) {
	if b.cur != nil {
		if last := ID(b.lastTS+b.p.MaxDelay+2*b.p.Guard, b.p.T) - 1; b.lastTS != 0 && last > b.cur.ID {
			b.trailer = true // intervals opened from here on hold no packet
			b.Advance(last*b.p.T, emit)
		}
		b.close()
		b.emitAll(emit)
	}
}

// FlushPartial emits the held-back and the open interval when capture stops
// at now; the open one is flagged partial if now is before its end.
func (b *SenderBuilder) FlushPartial(now int64, emit func(*SenderInterval)) {
	if b.cur != nil {
		if now < b.end {
			b.cur.Partial = true
		}
		b.close()
		b.emitAll(emit)
	}
}

func (b *SenderBuilder) emitAll(emit func(*SenderInterval)) {
	for len(b.pend) > 0 {
		bnd := b.pend[0].ID + 1
		w, ok := b.win.Get(bnd)
		if !ok && b.wait > 0 {
			// A replay's receiver announces every boundary it held, at
			// the latest when its own input ends.
			w, ok = b.win.wait(bnd, b.wait)
		}
		if !ok {
			w = b.p.MaxDelay
		}
		b.emitFront(min(w, b.p.MaxDelay), emit)
	}
}

// emitFront gives the oldest pending interval its boundary keys for
// window w and emits it, then forgets the log records no later boundary
// can need.
func (b *SenderBuilder) emitFront(w int64, emit func(*SenderInterval)) {
	iv := b.pend[0]
	b.pend[0] = nil
	b.pend = b.pend[1:]
	bnd := iv.ID + 1
	from, to := b.p.KeyWindow(bnd, w)
	// The log is in capture order, which is time order but for rare
	// stragglers: search, then scan with a margin.
	lg := &b.log
	i := max(0, lg.search(from)-logSlack)
	j := min(lg.n, lg.search(to)+logSlack)
	kb := b.pool.getKeys()
	if cap(*kb) < j-i {
		*kb = make([]BoundaryKey, 0, j-i) // the records in reach: the keys never outgrow it
	}
	keys := lg.appendKeys((*kb)[:0], i, j, from, to, bnd, b.p.T)
	iv.Keys, iv.Window, iv.keyBuf = keys, w, kb
	// The next boundary's key window starts no earlier than this.
	cut := (bnd+1)*b.p.T - b.p.MaxDelay - 2*b.p.Guard
	lg.drop(lg.search(cut) - logSlack)
	emit(iv)
}

// logSlack is how far out of time order a record may sit and still be found.
const logSlack = 4096

// appendKeys appends the records sent in [from, to) as keys of boundary
// bnd: each with bnd minus its send interval (ID(ts, t)), found by
// stepping back from the boundary rather than dividing, since a key
// window spans a few intervals at most.
func appendKeys(keys []BoundaryKey, recs []logRec, from, to, bnd, t int64) []BoundaryKey {
	bt := bnd * t
	for _, r := range recs {
		if r.ts < from || r.ts >= to {
			continue
		}
		off := uint32(0)
		for s := bt; r.ts < s; s -= t {
			off++
		}
		keys = append(keys, BoundaryKey{Hash: r.h, Off: off})
	}
	return keys
}

func (b *SenderBuilder) open(id int64) {
	start := id * b.p.T
	b.cur = &SenderInterval{ID: id, Sk: b.pool.get(), Partial: b.captureStart > start, First: !b.opened,
		Trailer: b.trailer, pool: b.pool, keep: b.p.Heavy}
	b.plog, b.recs, b.ri = nil, nil, 0
	b.cur.Sk.deferLost = b.p.LostCells > 0 // the table is built from the log (Finish)
	if b.p.LostCells > 0 {
		b.plog = newPacketLog(id, &b.pool.recs)
		b.cur.Logs = []*PacketLog{b.plog}
	}
	b.opened = true
	b.end = start + b.p.T
}

// close ends the open interval: it copies the heavy-flow table's occupied
// slots out (bounded by the table) and clears it, and queues the interval
// (pend) for the packets sent just after its end; sorting, ranking and
// building wait for Finish.
func (b *SenderBuilder) close() {
	iv := b.cur
	b.syncLog()
	iv.heavy = b.heavy.take(iv.heavy[:0])
	iv.Late, b.late = b.late, 0
	b.cur = nil
	b.pend = append(b.pend, iv)
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
		return compareKeys(&a.k, &b.k)
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

// compareKeys orders flow keys by their bytes (source, destination), then
// ports and protocol. Equal counts are the rule, not the exception (every
// flow of a paced test, every one-packet flow), so the ranking compares
// keys often: each address is two big-endian words, not 16 bytes.
func compareKeys(a, b *capture.FlowKey) int {
	return cmp.Or(compare16(&a.Src, &b.Src), compare16(&a.Dst, &b.Dst),
		cmp.Compare(a.SPort, b.SPort), cmp.Compare(a.DPort, b.DPort), cmp.Compare(a.Proto, b.Proto))
}

// compare16 compares two 16-byte strings as bytes.Compare does.
func compare16(a, b *[16]byte) int {
	return cmp.Or(cmp.Compare(binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])),
		cmp.Compare(binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:])))
}
