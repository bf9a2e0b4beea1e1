// Package interval cuts the packet stream into measurement intervals
// (docs/DESIGN.md, "2. Packet → interval") at both ends. The sender
// assigns each packet by its own timestamp (exact). The receiver cannot
// see send times, so it holds the
// packets it receives near a boundary B, in [B - guard, B + W), W the
// boundary's hold window (at most max_delay, chosen from the delays the
// receiver has evidence of: window.go), and places them once the sender's
// End for the closing interval brings its boundary function: a few bits
// per packet hash the sender saw in [B - W - 2·guard, B + W + guard), the
// number of intervals between its send interval and B (internal/retrieval;
// docs/protocol.md). Every packet with a one-way delay below W (and a
// clock offset below guard) lands in the sender's interval; slower ones
// are detected and flagged, never believed.
//
// Time is event time: intervals close from packet timestamps, so offline
// replay and live capture run the same code; live daemons also call Advance
// with the wall clock so that an idle link still closes its intervals.
package interval

import (
	"fmt"
	"sync"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/retrieval"
	"github.com/lds-net/lds/internal/sketch"
)

// Params are the interval settings shared by both ends.
type Params struct {
	T        int64 // interval length, ns
	MaxDelay int64 // ns
	Guard    int64 // ns
	Sketch   sketch.Params
	LDA      sketch.LDAParams
	Classes  int // LDA classes, including the default class 0
	Heavy    int // sender: heaviest flow keys reported per interval
	FlowCap  int // receiver: per-interval flow table cap
	// LostCells: cells of the lost-packet table both ends keep per
	// interval (sketch.IBLTCells of lost.capacity; 0: none).
	LostCells int
	// receiverLog: the receiver logs every packet it places (Sketches.Log), so
	// that an extra packet's flow and identifier can be named; the pool
	// its chunks come from (WithReceiverLog).
	receiverLog *recPool
}

// WithReceiverLog is p for the receiver's sketches: with the lost-packet
// table, each interval also logs its packets (Sketches.Log).
func (p Params) WithReceiverLog() Params {
	if p.LostCells > 0 {
		p.receiverLog = &recPool{}
	}
	return p
}

// MaxClass bounds how many intervals max_delay may span.
const MaxClass = 64

// Validate checks the relations the boundary logic relies on.
func (p Params) Validate() error {
	if p.T <= 0 || p.MaxDelay <= 0 || p.Guard < 0 || 4*p.Guard >= p.T {
		return fmt.Errorf("interval: need interval > 4*guard, max_delay > 0 (got %d, %d, %d ns)", p.T, p.MaxDelay, p.Guard)
	}
	if p.maxClass() > MaxClass {
		return fmt.Errorf("interval: max_delay + 2*guard spans %d intervals, at most %d", p.maxClass(), MaxClass)
	}
	if p.Classes < 1 {
		return fmt.Errorf("interval: need at least one LDA class")
	}
	return nil
}

// ID is the interval of a sender timestamp: floor(ts / T).
func ID(ts, t int64) int64 {
	id := ts / t
	if ts%t < 0 {
		id--
	}
	return id
}

// Sketches are one end's sketches of one interval.
type Sketches struct {
	LDS          *sketch.LDS
	LDA          []*sketch.LDA // one per class
	Packets      uint64
	Bytes        uint64
	ClassPackets []uint64
	// Lost is the table of the packet identities placed in the interval
	// (nil without lost.capacity): the sender's minus the receiver's lists
	// the lost packets (lost.go).
	Lost *sketch.IBLT
	// Log (receiver only, with Lost): every packet placed in the interval,
	// and the logs of the capture workers merged into it (More); an extra
	// packet's flow and identifier are looked up there.
	Log         *PacketLog
	LogMore     []*PacketLog
	receiverLog *recPool
	// deferLost: the sender's sketches leave Lost to be built from the
	// interval's packet log (SenderInterval.Finish), off the packet path.
	deferLost bool
}

// PacketLogs are the receiver's packet logs of the interval.
func (s *Sketches) PacketLogs() []*PacketLog {
	if s.Log == nil {
		return s.LogMore
	}
	return append([]*PacketLog{s.Log}, s.LogMore...)
}

// NewSketches allocates empty sketches for p.
func NewSketches(p Params) (*Sketches, error) {
	l, err := sketch.NewLDS(p.Sketch)
	if err != nil {
		return nil, err
	}
	s := &Sketches{LDS: l, LDA: make([]*sketch.LDA, p.Classes), ClassPackets: make([]uint64, p.Classes)}
	for i := range s.LDA {
		if s.LDA[i], err = sketch.NewLDA(p.LDA); err != nil {
			return nil, err
		}
	}
	if p.LostCells > 0 {
		if s.Lost, err = sketch.NewIBLT(p.LostCells); err != nil {
			return nil, err
		}
		if p.receiverLog != nil {
			s.receiverLog = p.receiverLog
			s.Log = newPacketLog(0, p.receiverLog)
		}
	}
	return s, nil
}

// Add counts one packet at time t (ns relative to the interval start).
func (s *Sketches) Add(p *capture.Packet, t int64) { s.AddCount(p, t, nil) }

// AddCount is Add that also counts the packet in its flow's composition
// (FlowTable.add's counters; nil: none).
func (s *Sketches) AddCount(p *capture.Packet, t int64, comp []uint32) {
	s.LDS.UpdateCount(p.FlowHash, p.PktHash, t, p.Weight, p.WireLen, comp)
	c := s.class(p)
	s.LDA[c].Update(p.PktHash, t)
	s.count(p, c)
}

// addSpot is Add for a packet whose cells the sender's capture loop
// found ahead (SenderBuilder.locate).
func (s *Sketches) addSpot(p *capture.Packet, t int64, sp *spot) {
	if sp.plain {
		s.LDS.UpdateSpot(&sp.lds, p.PktHash, t, p.Weight)
	} else {
		s.LDS.Update(p.FlowHash, p.PktHash, t, p.Weight, p.WireLen)
	}
	c := s.class(p)
	s.LDA[c].UpdateAt(sp.lda, p.PktHash, t)
	s.count(p, c)
}

// class is the index of p's LDA (class 0 for one beyond them).
func (s *Sketches) class(p *capture.Packet) int {
	if c := int(p.Class); c < len(s.LDA) {
		return c
	}
	return 0
}

// count counts p (LDA class c) in the totals and, unless the lost-packet
// table is built later from the packet log, in that table.
func (s *Sketches) count(p *capture.Packet, c int) {
	s.Packets++
	s.Bytes += uint64(p.WireLen)
	s.ClassPackets[c]++
	if s.Lost != nil && !s.deferLost {
		insertLost(s.Lost, p)
		if s.Log != nil {
			s.Log.addPacket(p)
		}
	}
}

// Merge adds o into s (sketches are linear).
func (s *Sketches) Merge(o *Sketches) error {
	if err := s.LDS.Merge(o.LDS); err != nil {
		return err
	}
	if len(o.LDA) != len(s.LDA) {
		return fmt.Errorf("interval: merging %d LDA classes into %d", len(o.LDA), len(s.LDA))
	}
	for i := range s.LDA {
		if err := s.LDA[i].Merge(o.LDA[i]); err != nil {
			return err
		}
		s.ClassPackets[i] += o.ClassPackets[i]
	}
	s.Packets += o.Packets
	s.Bytes += o.Bytes
	if o.Log != nil {
		// The logs move, not copy: o gets a fresh one at its Reset.
		s.LogMore = append(s.LogMore, o.Log)
		o.Log = nil
	}
	s.LogMore = append(s.LogMore, o.LogMore...)
	o.LogMore = nil
	if s.Lost != nil && o.Lost != nil {
		return s.Lost.Merge(o.Lost)
	}
	return nil
}

// Reset empties s for reuse.
func (s *Sketches) Reset() {
	s.LDS.Reset()
	for i := range s.LDA {
		s.LDA[i].Reset()
		s.ClassPackets[i] = 0
	}
	s.Packets, s.Bytes = 0, 0
	s.deferLost = false
	if s.Lost != nil {
		s.Lost.Reset()
	}
	if s.receiverLog != nil {
		for _, l := range s.LogMore {
			l.Release()
		}
		s.LogMore = s.LogMore[:0]
		s.Log.Release()
		s.Log = newPacketLog(0, s.receiverLog)
	}
}

// pool recycles sketches so that a boundary costs no allocation in steady
// state. Safe for concurrent use: sketches come back from the goroutine
// that encoded or estimated them.
type pool struct {
	p  sync.Pool
	sc sync.Pool // *splitScratch
	// kfree holds storage for a boundary's keys, kept from one interval
	// to the next (at most keysKept; more goes to the collector).
	kfree freeList[*[]BoundaryKey]
	recs  recPool // packet log chunks (PacketLog)
}

// keysKept bounds the key storage a builder keeps for reuse: one buffer
// circulates at a steady state (filled at a boundary, back from the
// ship goroutine long before the next one).
const keysKept = 1

// splitScratch is the boundary function's construction space, reused
// from one interval to the next (~45 B a key: the keys and values, and
// the builder's cells, hashes and peeling order).
type splitScratch struct {
	b    retrieval.Builder
	keys []uint64
	vals []uint64
}

// scratch works on a nil pool too (intervals built by hand).
func (pl *pool) scratch() *splitScratch {
	if pl != nil {
		if s, ok := pl.sc.Get().(*splitScratch); ok {
			return s
		}
	}
	return &splitScratch{}
}

func (pl *pool) putScratch(s *splitScratch) {
	if pl != nil {
		pl.sc.Put(s)
	}
}

// getKeys returns a holder of key storage (empty, its capacity kept).
func (pl *pool) getKeys() *[]BoundaryKey {
	if k, ok := pl.kfree.get(); ok {
		return k
	}
	return new([]BoundaryKey)
}

func (pl *pool) putKeys(k *[]BoundaryKey) {
	pl.kfree.put(k, keysKept)
}

func newPool(p Params) (*pool, error) {
	if _, err := NewSketches(p); err != nil {
		return nil, err
	}
	pl := &pool{}
	pl.p.New = func() any {
		s, _ := NewSketches(p) // p was validated above
		return s
	}
	return pl, nil
}

func (pl *pool) get() *Sketches { return pl.p.Get().(*Sketches) }

func (pl *pool) put(s *Sketches) {
	if s == nil {
		return
	}
	s.Reset()
	pl.p.Put(s)
}
