package interval

import (
	"sync/atomic"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/sketch"
)

// PacketLog is the sender's record of every packet it placed in one
// interval: its packet hash, its capture time at tap A, its flow (an index
// into Keys) and its own identifier. The receiver's list of lost-packet
// hashes is answered from it (Answer): the lost-packet table carries no
// send times, and its cells need hold nothing but the hash.
//
// A record is 24 bytes in chunks of logRecsChunk, taken from and given
// back to the builder's pool: appending is one store, no allocation in a
// steady state. Flow keys are kept once per flow and interval (the
// heavy-flow table's slot remembers the index), again for a packet whose
// flow lost its slot to another.
type PacketLog struct {
	ID     int64
	chunks [][]PacketRec
	n      int
	Keys   []capture.FlowKey
	pool   *recPool
	// cache: the receiver's flow-key index by flow hash, direct-mapped
	// (addPacket); the sender's heavy-flow table does this at the sender.
	cache []keySlot
}

type keySlot struct {
	fh  uint64
	ref uint32
	ok  bool
}

// keyCacheSlots is the size of the receiver log's flow-key cache (64 KiB).
const keyCacheSlots = 4096

// addPacket logs a packet, its flow key kept once while its cache slot
// holds it (the receiver's log).
func (l *PacketLog) addPacket(p *capture.Packet) {
	if l.cache == nil {
		l.cache = make([]keySlot, keyCacheSlots)
	}
	s := &l.cache[(p.FlowHash^p.FlowHash>>32)&(keyCacheSlots-1)]
	if !s.ok || s.fh != p.FlowHash {
		s.fh, s.ref, s.ok = p.FlowHash, l.addKey(&p.Key), true
	}
	l.add(p.PktHash, p.TS, s.ref|uint32(p.IDKind)<<refKindShift, p.ID)
}

// PacketRec is one packet of a PacketLog.
type PacketRec struct {
	Hash uint64
	TS   int64  // capture time at tap A, Unix ns
	Ref  uint32 // index into Keys | ID kind << refKindShift
	ID   uint32
}

const (
	refKindShift   = 30
	refIndexMask   = 1<<refKindShift - 1
	logRecsBits    = 14
	logRecsChunk   = 1 << logRecsBits // records a chunk (384 KiB)
	packetRecBytes = 24
)

// PacketLogBytes is the memory of a log of n packets and flows flows.
func PacketLogBytes(n, flows int64) int64 {
	chunks := (n + logRecsChunk - 1) / logRecsChunk
	return chunks*logRecsChunk*packetRecBytes + flows*40
}

// recPool recycles log chunks, key lists and chunk lists between
// intervals (any goroutine).
type recPool struct {
	free  freeList[[]PacketRec]
	keys  freeList[[]capture.FlowKey]
	lists freeList[[][]PacketRec]
	// out: chunks handed out and not yet back; peak: the most at once.
	out, peak atomic.Int64
}

// recsKept is the fewest chunks the pool keeps for reuse (64 chunks:
// 24 MiB, one interval at 1 Mpps). It keeps up to the most chunks ever
// in use at once, so that a steady rate takes every chunk from the pool:
// a fresh chunk costs its page faults and its zeroing on the packet
// path. That never holds more memory than the logs' peak, since a chunk
// is made only when the pool is empty.
const recsKept = 64

func (p *recPool) get() []PacketRec {
	p.notePeak(p.out.Add(1))
	if c, ok := p.free.get(); ok {
		return c
	}
	return make([]PacketRec, logRecsChunk)
}

// notePeak raises peak to n chunks out.
func (p *recPool) notePeak(n int64) {
	for {
		pk := p.peak.Load()
		if n <= pk || p.peak.CompareAndSwap(pk, n) {
			return
		}
	}
}

// put takes a chunk back.
func (p *recPool) put(c []PacketRec) {
	p.out.Add(-1)
	p.free.put(c, int(max(recsKept, p.peak.Load())))
}

func (p *recPool) getKeys() []capture.FlowKey {
	k, _ := p.keys.get()
	return k[:0]
}

// getList is an empty list of chunks with the capacity of an earlier
// log's, so that appending chunks allocates nothing in a steady state.
func (p *recPool) getList() [][]PacketRec {
	c, _ := p.lists.get()
	return c[:0]
}

func newPacketLog(id int64, pool *recPool) *PacketLog {
	l := &PacketLog{ID: id, pool: pool}
	if pool != nil {
		l.Keys, l.chunks = pool.getKeys(), pool.getList()
	}
	return l
}

// add appends one packet.
func (l *PacketLog) add(h uint64, ts int64, ref, id uint32) {
	c := l.n >> logRecsBits
	if c == len(l.chunks) {
		l.grow()
	}
	l.chunks[c][l.n&(logRecsChunk-1)] = PacketRec{Hash: h, TS: ts, Ref: ref, ID: id}
	l.n++
}

// grow is apart and never inlined, so that add inlines into the packet
// path.
//
//go:noinline
func (l *PacketLog) grow() {
	if l.pool != nil {
		l.chunks = append(l.chunks, l.pool.get())
		return
	}
	l.chunks = append(l.chunks, make([]PacketRec, logRecsChunk))
}

// addKey keeps a flow key and returns its index.
func (l *PacketLog) addKey(k *capture.FlowKey) uint32 {
	l.Keys = append(l.Keys, *k)
	return uint32(len(l.Keys)-1) & refIndexMask
}

// insertAll inserts every logged packet into a lost-packet table.
func (l *PacketLog) insertAll(t *sketch.IBLT) {
	for ci, c := range l.chunks {
		n := min(logRecsChunk, l.n-ci*logRecsChunk)
		for i := range c[:n] {
			t.Insert(c[i].Hash)
		}
	}
}

// Len is the number of packets logged.
func (l *PacketLog) Len() int {
	if l == nil {
		return 0
	}
	return l.n
}

// Bytes is the log's memory.
func (l *PacketLog) Bytes() int64 {
	if l == nil {
		return 0
	}
	return int64(len(l.chunks))*logRecsChunk*packetRecBytes + int64(cap(l.Keys))*40
}

// Release gives the log's storage back to the pool; l must not be used
// afterwards.
func (l *PacketLog) Release() {
	if l == nil || l.pool == nil {
		return
	}
	p := l.pool
	for _, c := range l.chunks {
		p.put(c)
	}
	if l.chunks != nil {
		clear(l.chunks)
		p.lists.put(l.chunks[:0], 2)
	}
	if l.Keys != nil {
		p.keys.put(l.Keys, 2)
	}
	l.chunks, l.Keys, l.n, l.pool, l.cache = nil, nil, 0, nil, nil
}

// LoggedPacket is one packet a log answers for.
type LoggedPacket struct {
	Hash   uint64
	SentNS int64
	Key    capture.FlowKey
	IDKind capture.IDKind
	ID     uint32
}

// Answer looks up each wanted hash in the logs and calls found for each
// logged packet that has one (a hash logged twice, the same content sent
// twice, is answered once, with its earliest time). The scan touches every
// record once: ~1–2 ms for a million packets, off the packet path.
func Answer(logs []*PacketLog, want map[uint64]bool, found func(LoggedPacket)) {
	best := make(map[uint64]LoggedPacket, len(want))
	// A bit per 64 Ki hash values rules out nearly every record without a
	// map lookup (1000 wanted hashes: ~1.5 % pass to the map).
	var filter [1 << 10]uint64
	for h := range want {
		filter[h>>54] |= 1 << (h & 63)
	}
	for _, l := range logs {
		if l == nil {
			continue
		}
		for ci, c := range l.chunks {
			n := min(logRecsChunk, l.n-ci*logRecsChunk)
			for i := range c[:n] {
				r := &c[i]
				if filter[r.Hash>>54]&(1<<(r.Hash&63)) == 0 || !want[r.Hash] {
					continue
				}
				if b, ok := best[r.Hash]; ok && b.SentNS <= r.TS {
					continue
				}
				k := int(r.Ref & refIndexMask)
				if k >= len(l.Keys) {
					continue
				}
				best[r.Hash] = LoggedPacket{Hash: r.Hash, SentNS: r.TS, Key: l.Keys[k], IDKind: capture.IDKind(r.Ref >> refKindShift), ID: r.ID}
			}
		}
	}
	for _, p := range best {
		found(p)
	}
}
