package sample

import (
	"sync"

	"github.com/lds-net/lds/internal/capture"
)

// RxStore is the receiver's per-capture-worker candidate collector. It
// files candidates by receive time into pieces: piece b holds those
// received in [b·T + max_delay, (b+1)·T + max_delay), so that every packet
// the sender sent in interval I (received in [I·T − guard, (I+1)·T +
// max_delay) when its delay is below max_delay and the clock offset below
// guard) is in piece I−1 or I. Not safe for concurrent use.
type RxStore struct {
	cfg      Config
	t, md    int64
	limit    uint64
	open     map[int64]*Cands
	last     *Cands
	cut      int64 // pieces up to this id were handed over
	cutAny   bool
	late     uint64
	lastSize int
}

// NewRxStore files candidates for intervals of t ns and a max_delay of md ns.
func NewRxStore(cfg Config, t, md int64) *RxStore {
	return &RxStore{cfg: cfg, t: t, md: md, limit: limitOf(cfg.level()), open: map[int64]*Cands{}}
}

// Add considers one received packet.
func (st *RxStore) Add(p *capture.Packet) {
	s := Mix(p.PktHash)
	if s >= st.limit {
		return
	}
	b := intervalID(p.TS-st.md, st.t)
	c := st.last
	if c == nil || c.ID != b {
		if st.cutAny && b <= st.cut {
			st.late++ // its piece was handed over
			return
		}
		c = st.open[b]
		if c == nil {
			c = &Cands{ID: b, Limit: st.limit, C: make([]Cand, 0, st.lastSize+st.lastSize/4+64)}
			st.open[b] = c
		}
		st.last = c
	}
	c.add(p, s, st.cfg.MaxCandidates)
}

// Cut hands every piece up to id to put (call it when the capture has
// passed (id+1)·T + max_delay: the receiver's sealing of interval id).
func (st *RxStore) Cut(id int64, put func(*Cands)) {
	for b, c := range st.open {
		if b <= id {
			delete(st.open, b)
			st.lastSize = max(st.lastSize, len(c.C))
			put(c)
		}
	}
	if !st.cutAny || id > st.cut {
		st.cut, st.cutAny = id, true
	}
	st.last = nil
}

// Late counts candidates that came after their piece was handed over.
func (st *RxStore) Late() uint64 { return st.late }

// Pieces holds one sender entry's receiver pieces (from all capture
// workers) until the joins that need them are done: the join of interval I
// reads pieces I−1 and I. Safe for concurrent use.
type Pieces struct {
	mu     sync.Mutex
	m      map[int64]*piece
	newest int64
	keep   int64
}

type piece struct {
	c    Cands
	used uint8 // bit 0: joined for its own interval, bit 1: for the next
}

// NewPieces keeps a piece until both joins that read it are done, or until
// it is keep intervals older than the newest (intervals never estimated).
func NewPieces(keep int) *Pieces {
	return &Pieces{m: map[int64]*piece{}, keep: int64(max(keep, 4))}
}

// Put adds one worker's piece.
func (ps *Pieces) Put(c *Cands) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.m[c.ID]
	if p == nil {
		p = &piece{c: Cands{ID: c.ID, Limit: c.Limit}}
		ps.m[c.ID] = p
	}
	p.c.merge(c)
	if c.ID > ps.newest {
		ps.newest = c.ID
		for id := range ps.m {
			if id < ps.newest-ps.keep {
				delete(ps.m, id)
			}
		}
	}
}

// take returns pieces id−1 and id for the join of interval id (nil where
// absent) and marks them used; a piece used by both its joins is dropped.
// The candidates are only read afterwards, never written.
func (ps *Pieces) take(id int64) (prev, cur *Cands) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.m[id-1]; p != nil {
		prev = &p.c
		p.used |= 2
		if p.used == 3 {
			delete(ps.m, id-1)
		}
	}
	if p := ps.m[id]; p != nil {
		cur = &p.c
		p.used |= 1
		if p.used == 3 {
			delete(ps.m, id)
		}
	}
	return prev, cur
}
