package sample

import (
	"github.com/lds-net/lds/internal/capture"
)

// Cand is one candidate packet: its flow, its sampling value s, its
// capture time (Unix ns) and its LDA class.
type Cand struct {
	Flow  uint64
	S     uint64
	TS    int64
	Class uint16
}

// Cands are one end's candidates of one interval (the sender's by send
// time, the receiver's by receive time). Every packet with S < Limit that
// the end captured in the interval is in C, and no other.
type Cands struct {
	ID     int64
	Limit  uint64 // exclusive bound on S
	C      []Cand
	Halved uint64 // times the candidate rate was halved to stay under max_candidates
	// From, Upto: the receive times (From, Upto] the receiver piece covers
	// (RxStore.Cut).
	From, Upto int64
}

// add appends a candidate, halving the rate (in place, no allocation) when
// the interval holds more than maxCands candidates.
func (c *Cands) add(p *capture.Packet, s uint64, maxCands int) {
	if s >= c.Limit {
		return
	}
	if len(c.C) >= maxCands {
		c.halve()
		if s >= c.Limit {
			return
		}
	}
	c.C = append(c.C, Cand{Flow: p.FlowHash, S: s, TS: p.TS, Class: p.Class})
}

func (c *Cands) halve() {
	c.Limit >>= 1
	c.Halved++
	k := 0
	for _, x := range c.C {
		if x.S < c.Limit {
			c.C[k] = x
			k++
		}
	}
	c.C = c.C[:k]
}

// Merge adds o's candidates (another capture worker's share of the same
// interval) into c and returns it (o when c is nil): the limit is the
// smaller one.
func (c *Cands) Merge(o *Cands) *Cands {
	if c == nil {
		return o
	}
	c.merge(o)
	return c
}

func (c *Cands) merge(o *Cands) {
	if o == nil {
		return
	}
	lim := min(c.Limit, o.Limit)
	c.Halved = max(c.Halved, o.Halved)
	c.C = append(c.C, o.C...)
	if lim < c.Limit {
		c.Limit = lim
		k := 0
		for _, x := range c.C {
			if x.S < lim {
				c.C[k] = x
				k++
			}
		}
		c.C = c.C[:k]
	}
}

// Pool recycles candidate buffers between the capture workers that fill
// them and the goroutine that selects from them, so that a steady capture
// allocates none. Safe for concurrent use; nil is a valid empty pool.
type Pool struct{ ch chan *Cands }

// NewPool keeps up to n idle buffers.
func NewPool(n int) *Pool { return &Pool{ch: make(chan *Cands, n)} }

// Put gives a buffer back (dropped when the pool is full).
func (p *Pool) Put(c *Cands) {
	if p == nil || c == nil {
		return
	}
	select {
	case p.ch <- c:
	default:
	}
}

func (p *Pool) get() *Cands {
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
// the packet path (one hash mix and compare; a candidate is appended to a
// reused buffer), Take when the worker emits the interval. Not safe for
// concurrent use.
type Sampler struct {
	cfg   Config
	pool  *Pool
	t     int64
	limit uint64
	cur   *Cands
	from  int64 // cur's interval [from, to), ns
	to    int64
	done  []*Cands // closed intervals not yet taken (a few at most)
	free  []*Cands
	last  int // candidates of the last interval: the next buffer's size
}

// NewSampler collects candidates for intervals of t ns, taking its
// buffers from pool (nil: allocates one an interval).
func NewSampler(cfg Config, t int64, pool *Pool) *Sampler {
	return &Sampler{cfg: cfg, pool: pool, t: t, limit: limitOf(cfg.level())}
}

// Add considers one packet (by send time).
func (sm *Sampler) Add(p *capture.Packet) {
	s := Mix(p.PktHash)
	if s >= sm.limit {
		return
	}
	if sm.cur == nil || p.TS < sm.from || p.TS >= sm.to {
		id := intervalID(p.TS, sm.t)
		if sm.cur != nil && id < sm.cur.ID {
			return // late: its interval has closed
		}
		if sm.cur == nil || id != sm.cur.ID {
			sm.rotate(id)
		}
		sm.from, sm.to = id*sm.t, (id+1)*sm.t
	}
	sm.cur.add(p, s, sm.cfg.MaxCandidates)
}

func (sm *Sampler) rotate(id int64) {
	if sm.cur != nil {
		sm.last = len(sm.cur.C)
		sm.done = append(sm.done, sm.cur)
	}
	c := sm.pool.get()
	if n := len(sm.free); c == nil && n > 0 {
		c, sm.free = sm.free[n-1], sm.free[:n-1]
	} else if c == nil {
		c = &Cands{C: make([]Cand, 0, sm.last+sm.last/4+64)}
	}
	c.ID, c.Limit, c.C, c.Halved = id, sm.limit, c.C[:0], 0
	sm.cur = c
	// An interval never taken (none emitted for it) is recycled after a while.
	if len(sm.done) > 8 {
		sm.free = append(sm.free, sm.done[0])
		sm.done = sm.done[1:]
	}
}

// Take hands over the candidates of interval id (nil: none seen); they
// belong to the caller, who may give them back with Pool.Put once done.
func (sm *Sampler) Take(id int64) *Cands {
	if sm.cur != nil && sm.cur.ID == id {
		c := sm.cur
		sm.cur, sm.from, sm.to = nil, 0, 0
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
