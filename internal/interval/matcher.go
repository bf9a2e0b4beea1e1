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
	release    func()
}

// Release returns the receiver's sketches for reuse once estimated.
func (mt *Matched) Release() {
	if mt.release != nil {
		mt.release()
		mt.release = nil
	}
	mt.Rx = nil
}

type split struct {
	prev, next []capture.Packet // held packets of the closing / the opening interval
	unresolved uint64
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
	held     map[int64][]capture.Packet // boundary b → held packets, not yet split
	heldAt   map[int64]time.Time
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
		rx: map[int64]*Sealed{}, rxSince: map[int64]time.Time{}, held: map[int64][]capture.Packet{},
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
		m.held[s.ID] = append(m.held[s.ID], s.HeldPrev...)
		m.heldAt[s.ID] = now
	}
	m.held[s.ID+1] = append(m.held[s.ID+1], s.HeldNext...)
	m.heldAt[s.ID+1] = now
	s.HeldPrev, s.HeldNext = nil, nil
	if m.done[s.ID] {
		return // sealed after being given up (cannot happen in order, kept safe)
	}
	m.rx[s.ID] = s
	m.rxSince[s.ID] = now
	m.try(now, emit)
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
			if m.resolved[id] == nil && (over || m.expired(m.rxSince[id], now)) {
				m.forceResolve(id)
			}
			if m.resolved[id] != nil && m.resolved[id+1] != nil {
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

// resolve splits every complete held set whose sender boundary function is known.
func (m *Matcher) resolve(now time.Time) {
	for b, pk := range m.held {
		// A held set is complete when it arrives (with the sealing of b-1).
		fn, ok := m.sndB[b-1]
		switch {
		case ok:
			sp := &split{}
			for i := range pk {
				// Exact for every packet the sender saw within max_delay +
				// guard of b; any other answer is arbitrary (a packet
				// slower than max_delay, or one the sender missed): its
				// cells then fail the digest check and are counted.
				if fn.Get(pk[i].PktHash) {
					sp.prev = append(sp.prev, pk[i])
				} else {
					sp.next = append(sp.next, pk[i])
				}
			}
			m.resolved[b] = sp
		case m.noPrev[b]:
			// The sender never had interval b-1: everything held is b's.
			m.resolved[b] = &split{next: pk}
		case m.senderGone || m.expired(m.heldAt[b], now):
			m.resolved[b] = byReceiveTime(pk, b*m.p.T)
		default:
			continue
		}
		delete(m.held, b)
		delete(m.heldAt, b)
	}
}

func (m *Matcher) forceResolve(b int64) {
	if pk, ok := m.held[b]; ok {
		m.resolved[b] = byReceiveTime(pk, b*m.p.T)
		delete(m.held, b)
		delete(m.heldAt, b)
	} else if m.resolved[b] == nil {
		m.resolved[b] = &split{}
	}
}

// byReceiveTime is the fallback without the sender's list: packets received
// before the boundary go to the closing interval. Counted as unresolved.
func byReceiveTime(pk []capture.Packet, boundary int64) *split {
	sp := &split{unresolved: uint64(len(pk))}
	for i := range pk {
		if pk[i].TS < boundary {
			sp.prev = append(sp.prev, pk[i])
		} else {
			sp.next = append(sp.next, pk[i])
		}
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
		if sp := m.resolved[id]; sp != nil {
			for i := range sp.next {
				mt.Rx.AddCount(&sp.next[i], sp.next[i].TS-start, mt.Flows.add(&sp.next[i]))
			}
			mt.Unresolved += sp.unresolved
			sp.next = nil
		}
		if sp := m.resolved[id+1]; sp != nil {
			for i := range sp.prev {
				mt.Rx.AddCount(&sp.prev[i], sp.prev[i].TS-start, mt.Flows.add(&sp.prev[i]))
			}
			mt.Unresolved += sp.unresolved
			sp.prev = nil
		}
	}
	if mt.Partial && outcome == results.OutcomeMatched {
		mt.Outcome = results.OutcomePartial
	}
	// An interval neither end saw a packet in is not an event: at the
	// edges of a capture the receiver seals such intervals for its held
	// packets, which by now have gone to their neighbours.
	quiet := mt.Snd == nil && (mt.Rx == nil || mt.Rx.Packets == 0)
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
	for b := range m.resolved {
		if m.done[b] && (m.done[b-1] || b-1 < low) {
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
