package sample

import (
	"math/bits"

	"github.com/lds-net/lds/internal/capture"
)

// ReceiverCand is one receiver candidate: its flow, its sampling value s, its
// receive time (Unix ns) and its LDA class.
type ReceiverCand struct {
	Flow  uint64
	S     uint64
	TS    int64
	Class uint16
}

// SenderCand is one sender candidate, 16 bytes: its flow, and in X the 32 bits
// of its sampling value s below the candidate bound (s >> SenderCands.Drop) over
// its send time from the interval start in units of 2^SenderCands.Unit ns (exact
// ns for intervals up to 4.29 s). The sender writes one for every packet on
// its packet path (Sampler.Add), so it is kept small.
type SenderCand struct {
	Flow uint64
	X    uint64
}

// SenderCands are the sender's candidates of one interval. Every packet with
// S < Limit that the sender captured in the interval is in C, and no other.
type SenderCands struct {
	ID     int64
	Limit  uint64 // exclusive bound on S
	C      []SenderCand
	Halved uint64 // times the candidate rate was halved to stay under max_candidates
	// Drop and Unit: how C packs s and the send time (SenderCand); T: the
	// interval length (ns).
	Drop, Unit uint8
	T          int64
}

// S is c's sampling value with the bits below Drop zero.
func (c *SenderCands) S(x SenderCand) uint64 { return x.X >> 32 << c.Drop }

// SendTime is c's send time from the interval start (ns), the middle of its unit.
func (c *SenderCands) SendTime(x SenderCand) int64 {
	t := int64(uint32(x.X)) << c.Unit
	if c.Unit > 0 {
		t = min(t+1<<(c.Unit-1), c.T-1)
	}
	return t
}

// keep drops, in place, the candidates with S >= lim.
func (c *SenderCands) keep(lim uint64) {
	q := lim >> c.Drop
	k := 0
	for _, x := range c.C {
		if x.X>>32 < q {
			c.C[k] = x
			k++
		}
	}
	c.C = c.C[:k]
}

// Merge adds o's candidates (another capture worker's share of the same
// interval) into c and returns it (o when c is nil): the limit is the
// smaller one.
func (c *SenderCands) Merge(o *SenderCands) *SenderCands {
	if c == nil {
		return o
	}
	if o == nil {
		return c
	}
	c.Halved = max(c.Halved, o.Halved)
	c.C = append(c.C, o.C...)
	if lim := min(c.Limit, o.Limit); lim < c.Limit {
		c.Limit = lim
		c.keep(lim)
	} else if lim < o.Limit {
		c.keep(lim)
	}
	return c
}

// Piece is the receiver's candidates of one piece (ReceiverStore): every packet
// with S < Limit received in (From, Upto] is in C, and no other.
type Piece struct {
	ID     int64
	Limit  uint64 // exclusive bound on S
	C      []ReceiverCand
	Halved uint64 // times the candidate rate was halved to stay under max_candidates
	// From, Upto: the receive times (From, Upto] the piece covers
	// (ReceiverStore.Cut).
	From, Upto int64
}

// add appends a candidate, halving the rate (in place, no allocation) when
// the piece holds more than maxCands candidates.
func (c *Piece) add(p *capture.Packet, s uint64, maxCands int) {
	if s >= c.Limit {
		return
	}
	if len(c.C) >= maxCands {
		c.Limit >>= 1
		c.Halved++
		c.keep(c.Limit)
		if s >= c.Limit {
			return
		}
	}
	c.C = append(c.C, ReceiverCand{Flow: p.FlowHash, S: s, TS: p.TS, Class: p.Class})
}

func (c *Piece) keep(lim uint64) {
	k := 0
	for _, x := range c.C {
		if x.S < lim {
			c.C[k] = x
			k++
		}
	}
	c.C = c.C[:k]
}

// merge adds o's candidates (another capture worker's piece) into c.
func (c *Piece) merge(o *Piece) {
	if o == nil {
		return
	}
	lim := min(c.Limit, o.Limit)
	c.Halved = max(c.Halved, o.Halved)
	c.C = append(c.C, o.C...)
	if lim < c.Limit || lim < o.Limit {
		c.Limit = lim
		c.keep(lim)
	}
}

// Pool recycles candidate buffers between the capture workers that fill
// them and the goroutine that selects from them, so that a steady capture
// allocates none. Safe for concurrent use; nil is a valid empty pool.
type Pool struct{ ch chan *SenderCands }

// NewPool keeps up to n idle buffers.
func NewPool(n int) *Pool { return &Pool{ch: make(chan *SenderCands, n)} }

// Put gives a buffer back (dropped when the pool is full).
func (p *Pool) Put(c *SenderCands) {
	if p == nil || c == nil {
		return
	}
	select {
	case p.ch <- c:
	default:
	}
}

func (p *Pool) get() *SenderCands {
	if p == nil {
		return nil
	}
	select {
	case c := <-p.ch:
		return c
	default:
		return nil
	}
}

// Sampler is the sender's per-capture-worker candidate collector: Add on
// the packet path, Take when the worker emits the interval. Not safe for
// concurrent use.
//
// Add is branch-free for the candidate test: every packet writes its
// 16-byte record into the next free slot of a preallocated buffer, and the
// slot is kept (the count advances) only when the packet is a candidate.
// The interval test and the buffer's room are one predictable branch each;
// everything else (a new interval, a full buffer) is in slow.
type Sampler struct {
	limit uint64
	from  int64        // the open interval's start (ns)
	t     uint64       // the interval length (ns)
	buf   []SenderCand // the open interval's buffer at its full length: C is buf[:n]
	n     int
	drop  uint8 // s >> drop: the 32 bits of s below the candidate bound
	unit  uint8 // send times in 2^unit ns
	cur   *SenderCands
	cfg   Config
	pool  *Pool
	done  []*SenderCands // closed intervals not yet taken (a few at most)
	free  []*SenderCands
	last  int // candidates of the last interval: the next buffer's size
}

// NewSampler collects candidates for intervals of t ns, taking its
// buffers from pool (nil: allocates them).
func NewSampler(cfg Config, t int64, pool *Pool) *Sampler {
	l := cfg.level()
	sm := &Sampler{cfg: cfg, pool: pool, t: uint64(t), limit: limitOf(l), drop: uint8(32 - min(l, 32))}
	if b := bits.Len64(uint64(t - 1)); b > 32 {
		sm.unit = uint8(b - 32)
	}
	return sm
}

// Add considers one packet (by send time).
func (sm *Sampler) Add(p *capture.Packet) {
	s := Mix(p.PktHash)
	off := uint64(p.TS - sm.from)
	if off >= sm.t || sm.n >= len(sm.buf) {
		sm.slow(p, s)
		return
	}
	sm.buf[sm.n] = SenderCand{Flow: p.FlowHash, X: s>>sm.drop<<32 | off>>sm.unit}
	_, in := bits.Sub64(s, sm.limit, 0) // 1 when s < limit
	sm.n += int(in)
}

// slow is Add for a packet outside the open interval or with the buffer
// full (or none open).
func (sm *Sampler) slow(p *capture.Packet, s uint64) {
	if sm.cur == nil || p.TS < sm.from || uint64(p.TS-sm.from) >= sm.t {
		id := intervalID(p.TS, int64(sm.t))
		if sm.cur != nil && id < sm.cur.ID {
			return // late: its interval has closed
		}
		if sm.cur == nil || id != sm.cur.ID {
			sm.rotate(id)
		}
		sm.from = id * int64(sm.t)
	}
	if s >= sm.limit {
		return
	}
	if sm.n >= len(sm.buf) {
		if sm.n >= sm.cfg.MaxCandidates {
			c := sm.cur
			c.C = sm.buf[:sm.n]
			c.Limit >>= 1
			c.Halved++
			c.keep(c.Limit)
			sm.limit, sm.n = c.Limit, len(c.C)
			if s >= sm.limit {
				return
			}
		} else {
			// Grow (rare: the buffer is sized from the last interval).
			nb := make([]SenderCand, min(max(2*len(sm.buf), 4096), sm.cfg.MaxCandidates))
			copy(nb, sm.buf[:sm.n])
			sm.buf = nb
		}
	}
	sm.buf[sm.n] = SenderCand{Flow: p.FlowHash, X: s>>sm.drop<<32 | uint64(p.TS-sm.from)>>sm.unit}
	sm.n++
}

// seal hands the open buffer's candidates to cur.
func (sm *Sampler) seal() {
	if sm.cur != nil {
		sm.cur.C = sm.buf[:sm.n]
	}
	sm.buf, sm.n = nil, 0
}

func (sm *Sampler) rotate(id int64) {
	if sm.cur != nil {
		sm.seal()
		sm.last = len(sm.cur.C)
		sm.done = append(sm.done, sm.cur)
	}
	c := sm.pool.get()
	if n := len(sm.free); c == nil && n > 0 {
		c, sm.free = sm.free[n-1], sm.free[:n-1]
	} else if c == nil {
		c = &SenderCands{}
	}
	if want := min(sm.last+sm.last/4+4096, sm.cfg.MaxCandidates); cap(c.C) < want {
		c.C = make([]SenderCand, want)
	}
	sm.limit = limitOf(sm.cfg.level())
	c.ID, c.Limit, c.Halved, c.Drop, c.Unit, c.T = id, sm.limit, 0, sm.drop, sm.unit, int64(sm.t)
	sm.buf, sm.n = c.C[:min(cap(c.C), sm.cfg.MaxCandidates)], 0
	sm.cur = c
	// An interval never taken (none emitted for it) is recycled after a while.
	if len(sm.done) > 8 {
		sm.free = append(sm.free, sm.done[0])
		sm.done = sm.done[1:]
	}
}

// Take hands over the candidates of interval id (nil: none seen); they
// belong to the caller, who may give them back with Pool.Put once done.
func (sm *Sampler) Take(id int64) *SenderCands {
	if sm.cur != nil && sm.cur.ID == id {
		c := sm.cur
		sm.seal()
		sm.cur, sm.from = nil, 0
		return c
	}
	for i, c := range sm.done {
		if c.ID == id {
			sm.done = append(sm.done[:i], sm.done[i+1:]...)
			return c
		}
	}
	return nil
}

func intervalID(ts, t int64) int64 {
	id := ts / t
	if ts%t < 0 {
		id--
	}
	return id
}
