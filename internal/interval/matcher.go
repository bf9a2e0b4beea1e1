package interval

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/retrieval"
)

// SenderMeta is what the sender's End says beyond the sketches.
type SenderMeta struct {
	Clock       ClockStatus
	KernelDrops uint64
	IfDrops     uint64
	ParseDrops  map[string]uint64
	SketchBytes uint64
}

// ClockStatus is one end's clock as reported for an interval.
type ClockStatus struct {
	State              string // synced, unsynced, unknown, disabled
	OffsetNS           int64
	GrandmasterPresent bool
	GrandmasterID      string
	PortState          string
	Err                string
}

// Matched pairs both ends' sketches of one interval, ready for estimation.
type Matched struct {
	ID      int64
	Outcome string          // results.Outcome*
	Snd     *SenderInterval // nil when the sender's sketch never came
	Meta    SenderMeta
	Rx      *Sketches   // nil when the receiver never saw the interval
	RxClock ClockStatus // the receiver's clock when it sealed the interval
	Flows   *FlowTable  // receiver's candidate flows
	Partial bool
	// Held packets placed without the sender's boundary function (it never
	// came): their cells may mismatch and are then left out, never believed.
	Unresolved uint64
	Late       uint64
	// Hold windows of the interval's opening and closing boundaries, ns
	// (0: unknown): packets slower than these may sit in another interval.
	WOpen, WClose int64
	// Misplaced counts held packets whose place the boundary function gave
	// as an interval already final (a packet slower than its window).
	Misplaced uint64
	release   func()
}

// Check is the interval's assignment check, taken before its sketches are
// released (CheckAssignment).
type Check = Assignment

// Release returns the receiver's sketches for reuse once estimated.
func (mt *Matched) Release() {
	if mt.release != nil {
		mt.release()
		mt.release = nil
	}
	mt.Rx = nil
}

// split is one boundary's held set placed into intervals.
type split struct {
	k          int64                      // the boundary's class
	byIv       map[int64][]capture.Packet // send interval → its held packets
	unresolved uint64
	misplaced  uint64
}

// Matcher joins the receiver's sealed intervals with the sender's, places
// held packets, and emits each interval exactly once. One per sender; not
// safe for concurrent use (the receiver runs it on one goroutine).
type Matcher struct {
	p          Params
	lateness   time.Duration
	maxPending int

	rx       map[int64]*Sealed
	rxSince  map[int64]time.Time
	held     map[int64]*HeldSet // boundary b → held packets, not yet split
	heldAt   map[int64]time.Time
	kOf      map[int64]int64 // boundary → class
	wOf      map[int64]int64 // boundary → final hold window
	resolved map[int64]*split
	snd      map[int64]*senderEntry
	sndSince map[int64]time.Time
	sndB     map[int64]*retrieval.Func // sender boundary functions kept until their boundary is split
	noPrev   map[int64]bool            // sender said (first interval since start) that interval b-1 will never come
	done     map[int64]bool
	// doneOrder holds the ids of done in the order they became final:
	// what is forgotten goes by that order, never by the id's value.
	doneOrder []int64

	rxFirst    int64
	rxStarted  bool
	senderGone bool
	rxGone     bool

	// Duplicates counts sender intervals that arrived after their interval was final.
	Duplicates uint64
}

type senderEntry struct {
	si   *SenderInterval
	meta SenderMeta
}

// NewMatcher makes a matcher that waits up to lateness (wall clock) for the
// other side of an interval and keeps at most maxPending intervals waiting.
func NewMatcher(p Params, lateness time.Duration, maxPending int) *Matcher {
	return &Matcher{p: p, lateness: lateness, maxPending: maxPending,
		rx: map[int64]*Sealed{}, rxSince: map[int64]time.Time{}, held: map[int64]*HeldSet{},
		kOf: map[int64]int64{}, wOf: map[int64]int64{},
		heldAt: map[int64]time.Time{}, resolved: map[int64]*split{}, snd: map[int64]*senderEntry{},
		sndSince: map[int64]time.Time{}, sndB: map[int64]*retrieval.Func{}, noPrev: map[int64]bool{}, done: map[int64]bool{}}
}

// Pending is the number of intervals waiting for their other side.
func (m *Matcher) Pending() int { return len(m.rx) + len(m.snd) }

// Idle reports whether both sides have ended and everything is emitted.
func (m *Matcher) Idle() bool {
	return m.senderGone && m.rxGone && len(m.rx) == 0 && len(m.snd) == 0
}

// HasFinal reports whether interval id was already emitted (duplicates).
func (m *Matcher) HasFinal(id int64) bool { return m.done[id] }

// AddSealed takes the receiver's own view of an interval.
func (m *Matcher) AddSealed(s *Sealed, now time.Time, emit func(*Matched)) {
	if !m.rxStarted {
		m.rxStarted, m.rxFirst = true, s.ID
	}
	if s.HeldPrev != nil || s.ID == m.rxFirst {
		m.addHeld(s.ID, s.HeldPrev, now)
	}
	m.addHeld(s.ID+1, s.HeldNext, now)
	if s.NextK > 0 {
		m.kOf[s.ID+2] = s.NextK
	}
	s.HeldPrev, s.HeldNext = nil, nil
	if m.done[s.ID] {
		return // sealed after being given up (cannot happen in order, kept safe)
	}
	m.rx[s.ID] = s
	m.rxSince[s.ID] = now
	m.try(now, emit)
}

func (m *Matcher) addHeld(b int64, h *HeldSet, now time.Time) {
	if h == nil {
		h = &HeldSet{B: b, K: 1}
	}
	if o := m.held[b]; o != nil {
		o.Pkts = append(o.Pkts, h.Pkts...)
		o.W, o.K = max(o.W, h.W), max(o.K, h.K)
		h = o
	}
	m.held[b] = h
	m.heldAt[b] = now
	m.kOf[b] = max(m.kOf[b], h.K)
	m.wOf[b] = h.W
}

// AddSender takes the sender's interval; it reports false for a duplicate
// (already final) so that the caller acknowledges without using it.
func (m *Matcher) AddSender(si *SenderInterval, meta SenderMeta, now time.Time, emit func(*Matched)) bool {
	// Without a boundary function (it failed to build: cannot happen with
	// distinct hashes) the boundary waits and is placed by receive time.
	splitOK := si.Finish() == nil
	if m.done[si.ID] || m.snd[si.ID] != nil {
		m.Duplicates++
		return false
	}
	m.snd[si.ID] = &senderEntry{si: si, meta: meta}
	m.sndSince[si.ID] = now
	if splitOK {
		m.sndB[si.ID] = si.Split
	}
	if si.First {
		m.noPrev[si.ID] = true
	}
	m.try(now, emit)
	return true
}

// Tick gives up on waits older than lateness.
func (m *Matcher) Tick(now time.Time, emit func(*Matched)) { m.try(now, emit) }

// SenderGone says that no more sender intervals will come (end of a replay).
func (m *Matcher) SenderGone(now time.Time, emit func(*Matched)) {
	m.senderGone = true
	m.try(now, emit)
}

// RxGone says that the receiver's capture has ended and everything is sealed.
func (m *Matcher) RxGone(now time.Time, emit func(*Matched)) {
	m.rxGone = true
	m.try(now, emit)
}

func (m *Matcher) expired(since time.Time, now time.Time) bool {
	return !since.IsZero() && now.Sub(since) >= m.lateness
}

func (m *Matcher) try(now time.Time, emit func(*Matched)) {
	m.resolve(now)
	ids := make([]int64, 0, len(m.rx)+len(m.snd))
	for id := range m.rx {
		ids = append(ids, id)
	}
	for id := range m.snd {
		if m.rx[id] == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for n, id := range ids {
		over := len(ids)-n > m.maxPending
		rx, se := m.rx[id], m.snd[id]
		switch {
		case rx != nil && se != nil:
			if over || m.expired(m.rxSince[id], now) {
				m.forceResolve(id)
				m.finish(id, results.OutcomeMatched, emit)
			} else if m.ready(id) {
				m.finish(id, results.OutcomeMatched, emit)
			}
		case rx != nil:
			if m.senderGone || over || m.expired(m.rxSince[id], now) {
				m.finish(id, results.OutcomeNoSender, emit)
			}
		case se != nil:
			if (m.rxStarted && id < m.rxFirst) || m.rxGone || over || m.expired(m.sndSince[id], now) {
				m.finish(id, results.OutcomeNoReceiver, emit)
			}
		}
	}
	m.prune()
}

// needs lists the boundaries whose held sets may hold packets of interval
// id: id and id+1 always, then id+2, … while their class reaches back to
// id. ok is false while a class it needs is not known yet.
func (m *Matcher) needs(id int64) (bs []int64, ok bool) {
	bs = []int64{id, id + 1}
	for b := id + 2; ; b++ {
		k, known := m.kOf[b]
		if !known {
			if m.rxGone {
				return bs, true // no later held set will come
			}
			return bs, false
		}
		if k < b-id {
			return bs, true
		}
		bs = append(bs, b)
	}
}

// ready reports whether every held set interval id needs is split.
func (m *Matcher) ready(id int64) bool {
	bs, ok := m.needs(id)
	if !ok {
		return false
	}
	for _, b := range bs {
		if m.resolved[b] == nil {
			if _, pending := m.held[b]; pending || !m.rxGone || b <= id+1 {
				return false
			}
		}
	}
	return true
}

// resolve splits every complete held set whose sender boundary function is known.
func (m *Matcher) resolve(now time.Time) {
	for b, h := range m.held {
		// A held set is complete when it arrives (with the sealing of b-1).
		fn, ok := m.sndB[b-1]
		switch {
		case ok:
			sp := m.newSplit(h.K)
			for i := range h.Pkts {
				// Exact for every packet the sender saw in the key window
				// of b: b minus its send interval. Any other answer is
				// arbitrary (a packet slower than the window, or one the
				// sender missed): its cells then fail the digest check and
				// are counted.
				m.place(sp, b-int64(fn.Value(h.Pkts[i].PktHash)), &h.Pkts[i])
			}
			m.resolved[b] = sp
		case m.noPrev[b]:
			// The sender never had interval b-1: everything held is b's.
			sp := m.newSplit(h.K)
			sp.byIv[b] = h.Pkts
			m.resolved[b] = sp
		case m.senderGone || m.expired(m.heldAt[b], now):
			m.resolved[b] = m.byReceiveTime(h)
		default:
			continue
		}
		delete(m.held, b)
		delete(m.heldAt, b)
	}
}

func (m *Matcher) newSplit(k int64) *split { return &split{k: k, byIv: map[int64][]capture.Packet{}} }

// place puts a held packet into interval iv, unless iv is already final
// (then it is counted as misplaced: a packet slower than its window).
func (m *Matcher) place(sp *split, iv int64, p *capture.Packet) {
	if m.done[iv] {
		sp.misplaced++
		return
	}
	sp.byIv[iv] = append(sp.byIv[iv], *p)
}

// forceResolve places by receive time every held set interval id needs
// that is still waiting for the sender's function.
func (m *Matcher) forceResolve(id int64) {
	bs, _ := m.needs(id)
	for _, b := range bs {
		if h, ok := m.held[b]; ok {
			m.resolved[b] = m.byReceiveTime(h)
			delete(m.held, b)
			delete(m.heldAt, b)
		}
	}
}

// byReceiveTime is the fallback without the sender's function: packets
// received before the boundary go to the closing interval. Counted as
// unresolved.
func (m *Matcher) byReceiveTime(h *HeldSet) *split {
	sp := m.newSplit(h.K)
	sp.unresolved = uint64(len(h.Pkts))
	for i := range h.Pkts {
		iv := h.B
		if h.Pkts[i].TS < h.B*m.p.T {
			iv--
		}
		m.place(sp, iv, &h.Pkts[i])
	}
	return sp
}

func (m *Matcher) finish(id int64, outcome string, emit func(*Matched)) {
	mt := &Matched{ID: id, Outcome: outcome}
	if se := m.snd[id]; se != nil {
		mt.Snd, mt.Meta = se.si, se.meta
		mt.Partial = se.si.Partial
	}
	if rx := m.rx[id]; rx != nil {
		mt.Rx, mt.Flows, mt.Late, mt.RxClock = rx.Direct, rx.Flows, rx.Late, rx.Clock
		mt.release = rx.Release
		mt.Partial = mt.Partial || rx.Partial
		start := id * m.p.T
		bs, _ := m.needs(id)
		for _, b := range bs {
			sp := m.resolved[b]
			if sp == nil {
				continue
			}
			pk := sp.byIv[id]
			for i := range pk {
				mt.Rx.AddCount(&pk[i], pk[i].TS-start, mt.Flows.add(&pk[i]))
			}
			delete(sp.byIv, id)
			if b == id+1 {
				// The boundary's own counts go to the interval it closes.
				mt.Unresolved += sp.unresolved
				mt.Misplaced += sp.misplaced
				sp.unresolved, sp.misplaced = 0, 0
			}
		}
		mt.WOpen, mt.WClose = m.wOf[id], m.wOf[id+1]
	}
	if mt.Partial && outcome == results.OutcomeMatched {
		mt.Outcome = results.OutcomePartial
	}
	// An interval neither end saw a packet in is not an event: at the
	// edges of a capture the receiver seals such intervals for its held
	// packets, which by now have gone to their neighbours.
	// So are the empty intervals a sender emits after the end of its input
	// for the boundaries that can still hold its last packets.
	quiet := (mt.Snd == nil || mt.Snd.Trailer && mt.Snd.Sk != nil && mt.Snd.Sk.Packets == 0) && (mt.Rx == nil || mt.Rx.Packets == 0)
	delete(m.rx, id)
	delete(m.rxSince, id)
	delete(m.snd, id)
	delete(m.sndSince, id)
	m.done[id] = true
	m.doneOrder = append(m.doneOrder, id)
	if !quiet {
		emit(mt)
	}
}

// prune forgets what no pending interval can need any more: the final
// ids beyond the last 4 x maxPending + 16 to become final, and what is
// older than all of those. An id far from the others (a hostile sender, or
// a clock step at either end) is one entry among them: it makes nothing
// else look old.
func (m *Matcher) prune() {
	keep := 4*m.maxPending + 16
	for len(m.doneOrder) > keep {
		delete(m.done, m.doneOrder[0])
		m.doneOrder = m.doneOrder[1:]
	}
	low := int64(math.MinInt64)
	if len(m.doneOrder) == keep {
		low = slices.Min(m.doneOrder)
	}
	for b := range m.sndB {
		// The list of interval b is needed to split boundary b+1.
		if _, pending := m.held[b+1]; !pending && (m.resolved[b+1] != nil || b < low) {
			delete(m.sndB, b)
		}
	}
	for b := range m.noPrev {
		if b < low {
			delete(m.noPrev, b)
		}
	}
	for _, mp := range []map[int64]int64{m.kOf, m.wOf} {
		for b := range mp {
			if b < low {
				delete(mp, b)
			}
		}
	}
	for b, sp := range m.resolved {
		// Boundary b feeds intervals b-K … b.
		gone := true
		for iv := b - sp.k; iv <= b; iv++ {
			if !m.done[iv] && iv >= low {
				gone = false
				break
			}
		}
		if gone {
			delete(m.resolved, b)
		}
	}
}

// SortedIDs is a helper for tests and logs.
func SortedIDs[V any](m map[int64]V) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
