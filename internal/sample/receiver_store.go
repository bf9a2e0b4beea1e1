package sample

import (
	"sync"

	"github.com/lds-net/lds/internal/capture"
)

// ReceiverStore is the receiver's per-capture-worker candidate collector. It
// files candidates by when they were received relative to the receiver's
// sealing of intervals: piece I holds the candidates received after the
// seal of interval I−1 and up to the seal of interval I, which happens when
// the capture passes the end of I plus the hold window of that boundary.
// Every packet the sender sent in interval I whose delay is below that
// window (and whose packet is not flagged delay_beyond_window) is therefore
// in piece I−1 or I, whatever the window (adaptive, up to max_delay), as
// long as the window of the boundary before I is below T − guard; Join
// checks that from the pieces' receive-time coverage. Not safe for
// concurrent use.
type ReceiverStore struct {
	cfg      Config
	limit    uint64
	open     *Piece
	from     int64 // receive time the open piece's coverage starts after
	maxTS    int64 // latest receive time seen (the capture's start before any)
	cut      int64 // pieces up to this id were handed over
	cutAny   bool
	lastSize int
}

// NewReceiverStore files candidates for the receiver's sealed intervals of a
// capture that sees every packet received after start (Unix ns).
func NewReceiverStore(cfg Config, start int64) *ReceiverStore {
	return &ReceiverStore{cfg: cfg, limit: limitOf(cfg.level()), from: start, maxTS: start}
}

// Add considers one received packet. Call it after the packet went to the
// interval builder, so that a packet that seals an interval goes to the
// next piece.
func (st *ReceiverStore) Add(p *capture.Packet) {
	st.maxTS = max(st.maxTS, p.TS)
	s := Mix(p.PktHash)
	if s >= st.limit {
		return
	}
	c := st.open
	if c == nil {
		c = &Piece{Limit: st.limit, C: make([]ReceiverCand, 0, st.lastSize+st.lastSize/4+64)}
		st.open = c
	}
	c.add(p, s, st.cfg.MaxCandidates)
}

// Cut hands the candidates received since the last cut to put as piece id
// (call it when the receiver seals interval id), with their receive-time
// coverage (From, Upto]. A piece is handed over even when empty: it says
// that nothing sampled arrived in its range.
func (st *ReceiverStore) Cut(id int64, put func(*Piece)) {
	if st.cutAny && id <= st.cut {
		return
	}
	c := st.open
	if c == nil {
		c = &Piece{Limit: st.limit}
	}
	c.ID = id
	c.From, c.Upto = st.from, st.maxTS
	st.lastSize = max(st.lastSize, len(c.C))
	put(c)
	st.open, st.from = nil, st.maxTS
	st.cut, st.cutAny = id, true
}

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
	c    Piece
	used uint8 // bit 0: joined for its own interval, bit 1: for the next
}

// NewPieces keeps a piece until both joins that read it are done, or until
// it is keep intervals older than the newest (intervals never estimated).
func NewPieces(keep int) *Pieces {
	return &Pieces{m: map[int64]*piece{}, keep: int64(max(keep, 4))}
}

// Put adds one worker's piece.
func (ps *Pieces) Put(c *Piece) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.m[c.ID]
	if p == nil {
		p = &piece{c: Piece{ID: c.ID, Limit: c.Limit, From: c.From, Upto: c.Upto}}
		ps.m[c.ID] = p
	}
	// Several workers' pieces: covered only where every worker's is.
	p.c.From, p.c.Upto = max(p.c.From, c.From), min(p.c.Upto, c.Upto)
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
func (ps *Pieces) take(id int64) (prev, cur *Piece) {
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
