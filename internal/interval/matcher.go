package interval

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/retrieval"
)

// SenderMeta is what the sender's End says beyond the sketches.
type SenderMeta struct {
	Clock       ClockStatus
	KernelDrops uint64
	IfDrops     uint64
	// DropsAffecting: the sender's capture drops that may have removed
	// packets of the interval (DropLedger).
	DropsAffecting uint64
	ParseDrops     map[string]uint64
	SketchBytes    uint64
}

// ClockStatus is one end's clock as reported for an interval.
type ClockStatus struct {
	State              ptp.State
	OffsetNS           int64
	GrandmasterPresent bool
	GrandmasterID      string
	PortState          string
	Err                string
}

// Matched pairs both ends' sketches of one interval, ready for estimation.
type Matched struct {
	ID            int64
	Outcome       results.Outcome
	Sender        *SenderInterval // nil when the sender's sketch never came
	Meta          SenderMeta
	Receiver      *Sketches   // nil when the receiver never saw the interval
	ReceiverClock ClockStatus // the receiver's clock when it sealed the interval
	// The receiver's capture drops: read when it sealed the interval, and
	// those that may have removed packets of it (DropLedger).
	ReceiverDrops, ReceiverDropsAffecting uint64
	Flows                                 *FlowTable // receiver's candidate flows
	Partial                               bool
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
	// Lost is the lost-packet list's second round (lost.go), set by the
	// receiver's match stage before the interval is estimated; nil: none.
	Lost    *LostRound
	release func()
}

// Release returns the receiver's sketches for reuse once estimated.
func (mt *Matched) Release() {
	if mt.release != nil {
		mt.release()
		mt.release = nil
	}
	mt.Receiver = nil
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
//
// Its state is keyed two ways: by interval id (ivState: both ends'
// intervals until final, the sender's boundary function, whether it was
// final) and by boundary id (bndState: the packets held at boundary b,
// its class and hold window, and how the held packets were split).
// Boundary b is the end of interval b-1 and the start of interval b.
type Matcher struct {
	p          Params
	lateness   time.Duration
	maxPending int

	ivs  map[int64]*ivState
	bnds map[int64]*bndState
	// nReceiver and nSender count the intervals with a receiver or sender side
	// waiting (Pending).
	nReceiver, nSender int
	// doneOrder holds the final interval ids in the order they became
	// final: what is forgotten goes by that order, never by the id's value.
	doneOrder []int64

	receiverFirst   int64
	receiverStarted bool
	senderGone      bool
	receiverGone    bool

	// Duplicates counts sender intervals that arrived after their interval was final.
	Duplicates uint64

	// clock is the receiver's clock for interval ids (nil: no id is
	// ahead); an id starting more than aheadGuard after it is held.
	clock      func() time.Time
	aheadGuard int64
	nHeld      int // sender intervals held ahead of the clock
	onRefuse   func(reason string, id int64)
}

// Reasons the matcher refuses or replaces an interval half
// (lds_interval_refusals_total{reason}).
const (
	// RefusedDuplicate: a sender interval whose interval is already final,
	// or that a sender interval in time already fills.
	RefusedDuplicate = "duplicate"
	// RefusedSupersededEarly: a sender interval that arrived ahead of the
	// receiver's clock, replaced by one of the same id that arrived in time.
	RefusedSupersededEarly = "superseded_early"
	// RefusedEarlyOverflow: a sender interval ahead of the receiver's
	// clock, refused because max_pending such intervals are already held.
	RefusedEarlyOverflow = "early_overflow"
	// RefusedReceiverAfterFinal: the receiver's own interval, sealed
	// after the interval was final (not used).
	RefusedReceiverAfterFinal = "receiver_after_final"
)

// RefusalReasons lists every reason the matcher refuses an interval half.
func RefusalReasons() []string {
	return []string{RefusedDuplicate, RefusedSupersededEarly, RefusedEarlyOverflow, RefusedReceiverAfterFinal}
}

// HoldAhead makes the matcher hold a sender interval whose id starts more
// than guard after clock() (the receiver's clock; a sender's clock
// stepped forward, or a buggy or hostile sender): it is not given up
// before the clock is guard past the interval's end, and from then it is
// given up or matched as if it had arrived then; if a sender interval of the same id
// arrives in time meanwhile, that one replaces it. A held interval is
// matched with the receiver's only if none arrives in time within
// lateness of the receiver's. At most max_pending intervals are held.
// Without HoldAhead (replays: the captures carry their own time) no id
// is ahead.
func (m *Matcher) HoldAhead(clock func() time.Time, guard time.Duration) {
	m.clock, m.aheadGuard = clock, int64(guard)
}

// OnRefuse sets what is told of every interval half refused or replaced
// (reason: one of RefusalReasons).
func (m *Matcher) OnRefuse(f func(reason string, id int64)) { m.onRefuse = f }

func (m *Matcher) refuse(reason string, id int64) {
	if m.onRefuse != nil {
		m.onRefuse(reason, id)
	}
}

// ahead reports whether interval id starts more than the guard after the
// receiver's clock (compared in interval units: a hostile id cannot
// overflow).
func (m *Matcher) ahead(id int64) bool {
	if m.clock == nil {
		return false
	}
	return id > (m.clock().UnixNano()+m.aheadGuard)/m.p.T
}

// due reports whether the receiver's clock is the guard past the end of
// interval id: both ends' halves of it in time have come by then.
func (m *Matcher) due(id int64) bool {
	return m.clock == nil || id < (m.clock().UnixNano()-m.aheadGuard)/m.p.T
}

// ivState is what the matcher holds for one interval id.
type ivState struct {
	receiver      *ReceiverInterval // the receiver's side, until final
	receiverSince time.Time
	sender        *senderEntry // the sender's side, until final
	senderSince   time.Time
	// fn is the sender's boundary function of this interval, kept until
	// boundary id+1 (the interval's end) is split.
	fn *retrieval.Func
	// early: the sender's side arrived ahead of the receiver's clock;
	// held while it still is. Its boundary function and first flag wait
	// in earlyFn and earlyFirst until it is believed (believe).
	early, held bool
	earlyFn     *retrieval.Func
	earlyFirst  bool
	// first: the sender's first interval since it started: interval id-1
	// will never come, so boundary id holds only this interval's packets.
	first bool
	done  bool // final; forgotten in doneOrder's order
}

func (s *ivState) empty() bool {
	return s.receiver == nil && s.sender == nil && s.fn == nil && !s.first && !s.done
}

// bndState is what the matcher holds for one boundary id.
type bndState struct {
	held   *HeldSet // packets held at the boundary, until split
	heldAt time.Time
	k      int64 // class: the intervals before b its packets may belong to
	kKnown bool
	w      int64  // final hold window, ns (0: unknown)
	split  *split // the held packets placed into intervals
}

func (s *bndState) empty() bool {
	return s.held == nil && !s.kKnown && s.k == 0 && s.w == 0 && s.split == nil
}

type senderEntry struct {
	si   *SenderInterval
	meta SenderMeta
}

// NewMatcher makes a matcher that waits up to lateness (wall clock) for the
// other side of an interval and keeps at most maxPending intervals waiting.
func NewMatcher(p Params, lateness time.Duration, maxPending int) *Matcher {
	return &Matcher{p: p, lateness: lateness, maxPending: maxPending, ivs: map[int64]*ivState{}, bnds: map[int64]*bndState{}}
}

// iv is interval id's state, made on first use.
func (m *Matcher) iv(id int64) *ivState {
	s := m.ivs[id]
	if s == nil {
		s = &ivState{}
		m.ivs[id] = s
	}
	return s
}

// bnd is boundary b's state, made on first use.
func (m *Matcher) bnd(b int64) *bndState {
	s := m.bnds[b]
	if s == nil {
		s = &bndState{}
		m.bnds[b] = s
	}
	return s
}

// isDone reports whether interval id is final (and not yet forgotten).
func (m *Matcher) isDone(id int64) bool {
	s := m.ivs[id]
	return s != nil && s.done
}

// heldAt is boundary b's held set not yet split, or nil.
func (m *Matcher) heldAt(b int64) *HeldSet {
	if s := m.bnds[b]; s != nil {
		return s.held
	}
	return nil
}

// splitAt is how boundary b's held packets were split, or nil.
func (m *Matcher) splitAt(b int64) *split {
	if s := m.bnds[b]; s != nil {
		return s.split
	}
	return nil
}

// Pending is the number of intervals waiting for their other side.
func (m *Matcher) Pending() int { return m.nReceiver + m.nSender }

// Idle reports whether both sides have ended and everything is emitted.
func (m *Matcher) Idle() bool {
	return m.senderGone && m.receiverGone && m.nReceiver == 0 && m.nSender == 0
}

// HasFinal reports whether interval id was already emitted (duplicates).
func (m *Matcher) HasFinal(id int64) bool { return m.isDone(id) }

// AddReceiver takes the receiver's own view of an interval.
func (m *Matcher) AddReceiver(s *ReceiverInterval, now time.Time, emit func(*Matched)) {
	if !m.receiverStarted {
		m.receiverStarted, m.receiverFirst = true, s.ID
	}
	if s.HeldPrev != nil || s.ID == m.receiverFirst {
		m.addHeld(s.ID, s.HeldPrev, now)
	}
	m.addHeld(s.ID+1, s.HeldNext, now)
	if s.NextK > 0 {
		b := m.bnd(s.ID + 2)
		b.k, b.kKnown = s.NextK, true
	}
	s.HeldPrev, s.HeldNext = nil, nil
	if m.isDone(s.ID) {
		// Sealed after the interval was given up: its sender side was
		// final without it (or a bug); counted, never silently dropped.
		m.refuse(RefusedReceiverAfterFinal, s.ID)
		s.Release()
		return
	}
	st := m.iv(s.ID)
	if st.receiver == nil {
		m.nReceiver++
	}
	st.receiver, st.receiverSince = s, now
	m.try(now, emit)
}

func (m *Matcher) addHeld(b int64, h *HeldSet, now time.Time) {
	if h == nil {
		h = &HeldSet{B: b, K: 1}
	}
	bs := m.bnd(b)
	if o := bs.held; o != nil {
		o.Pkts = append(o.Pkts, h.Pkts...)
		o.W, o.K = max(o.W, h.W), max(o.K, h.K)
		h = o
	}
	bs.held, bs.heldAt = h, now
	bs.k, bs.kKnown = max(bs.k, h.K), true
	bs.w = h.W
}

// AddSender takes the sender's interval; it reports false when the
// interval is refused (a duplicate of one final or in time, or ahead of
// the receiver's clock beyond what may be held) so that the caller
// acknowledges without using it. Every refusal is told to OnRefuse.
func (m *Matcher) AddSender(si *SenderInterval, meta SenderMeta, now time.Time, emit func(*Matched)) bool {
	// Without a boundary function (it failed to build: cannot happen with
	// distinct hashes) the boundary waits and is placed by receive time.
	splitOK := si.Finish() == nil
	early := m.ahead(si.ID)
	st := m.ivs[si.ID]
	switch {
	case st != nil && st.done, st != nil && st.sender != nil && (early || !st.early):
		m.Duplicates++
		m.refuse(RefusedDuplicate, si.ID)
		return false
	case st != nil && st.sender != nil:
		// In time, where one ahead of the clock waits: this one is the
		// genuine interval.
		m.refuse(RefusedSupersededEarly, si.ID)
		if st.held {
			m.nHeld--
		}
		st.sender, st.early, st.held, st.earlyFn, st.earlyFirst = nil, false, false, nil, false
		m.nSender--
	case early && m.nHeld >= m.maxPending:
		m.refuse(RefusedEarlyOverflow, si.ID)
		return false
	}
	st = m.iv(si.ID)
	st.sender, st.senderSince = &senderEntry{si: si, meta: meta}, now
	m.nSender++
	if early {
		st.early, st.held = true, true
		m.nHeld++
	}
	// The boundary function and the first flag of an interval ahead of
	// the clock are not believed until no interval in time came for its
	// id (believe): the receiver's held packets are never placed by what
	// may be a bogus interval while the genuine one can still come.
	var fn *retrieval.Func
	if splitOK {
		fn = si.Split
	}
	if early {
		st.earlyFn, st.earlyFirst = fn, si.First
	} else {
		if fn != nil {
			st.fn = fn
		}
		if si.First {
			st.first = true
		}
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

// ReceiverGone says that the receiver's capture has ended and everything is sealed.
func (m *Matcher) ReceiverGone(now time.Time, emit func(*Matched)) {
	m.receiverGone = true
	m.try(now, emit)
}

func (m *Matcher) expired(since time.Time, now time.Time) bool {
	return !since.IsZero() && now.Sub(since) >= m.lateness
}

func (m *Matcher) try(now time.Time, emit func(*Matched)) {
	m.resolve(now)
	ids := make([]int64, 0, m.nReceiver+m.nSender)
	for id, st := range m.ivs {
		if st.held && m.due(id) {
			// The clock passed it: from now on it waits as if it had
			// arrived now.
			st.held, st.senderSince = false, now
			m.nHeld--
		}
		if st.receiver != nil || st.sender != nil && !st.held {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for n, id := range ids {
		over := len(ids)-n > m.maxPending
		st := m.ivs[id]
		switch {
		case st.receiver != nil && st.sender != nil:
			if st.early {
				if !over && !m.senderGone && !m.expired(st.receiverSince, now) {
					continue // a sender interval in time may still replace it
				}
				m.believe(id, now)
			}
			if over || m.expired(st.receiverSince, now) {
				m.forceResolve(id)
				m.finish(id, results.OutcomeMatched, emit)
			} else if m.ready(id) {
				m.finish(id, results.OutcomeMatched, emit)
			}
		case st.receiver != nil:
			if m.senderGone || over || m.expired(st.receiverSince, now) {
				m.finish(id, results.OutcomeNoSender, emit)
			}
		case st.sender != nil:
			if (m.receiverStarted && id < m.receiverFirst) || m.receiverGone || over || m.expired(st.senderSince, now) {
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
		st := m.bnds[b]
		if st == nil || !st.kKnown {
			if m.receiverGone {
				return bs, true // no later held set will come
			}
			return bs, false
		}
		if st.k < b-id {
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
		if m.splitAt(b) == nil {
			if m.heldAt(b) != nil || !m.receiverGone || b <= id+1 {
				return false
			}
		}
	}
	return true
}

// resolve splits every complete held set whose sender boundary function is known.
func (m *Matcher) resolve(now time.Time) {
	for b, bs := range m.bnds {
		h := bs.held
		if h == nil {
			continue
		}
		// A held set is complete when it arrives (with the sealing of b-1).
		var fn *retrieval.Func
		pending := false // interval b-1's function waits until it is believed
		if prev := m.ivs[b-1]; prev != nil {
			fn, pending = prev.fn, prev.early && prev.earlyFn != nil
		}
		switch {
		case fn != nil:
			sp := m.newSplit(h.K)
			for i := range h.Pkts {
				// Exact for every packet the sender saw in the key window
				// of b: b minus its send interval. Any other answer is
				// arbitrary (a packet slower than the window, or one the
				// sender missed): its cells then fail the digest check and
				// are counted.
				m.place(sp, b-int64(fn.Value(h.Pkts[i].PktHash)), &h.Pkts[i])
			}
			bs.split = sp
		case m.ivs[b] != nil && m.ivs[b].first:
			// The sender never had interval b-1: everything held is b's.
			sp := m.newSplit(h.K)
			sp.byIv[b] = h.Pkts
			bs.split = sp
		case pending:
			continue
		case m.senderGone || m.expired(bs.heldAt, now):
			bs.split = m.byReceiveTime(h)
		default:
			continue
		}
		bs.held, bs.heldAt = nil, time.Time{}
	}
}

func (m *Matcher) newSplit(k int64) *split { return &split{k: k, byIv: map[int64][]capture.Packet{}} }

// place puts a held packet into interval iv, unless iv is already final
// (then it is counted as misplaced: a packet slower than its window).
func (m *Matcher) place(sp *split, iv int64, p *capture.Packet) {
	if m.isDone(iv) {
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
		if st := m.bnds[b]; st != nil && st.held != nil {
			st.split = m.byReceiveTime(st.held)
			st.held, st.heldAt = nil, time.Time{}
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

// believe takes interval id's sender side, which arrived ahead of the
// clock, for what it says (no interval in time came for the id): its
// boundary function places held packets from now on.
func (m *Matcher) believe(id int64, now time.Time) {
	st := m.ivs[id]
	if st == nil || !st.early {
		return
	}
	if st.earlyFn != nil {
		st.fn = st.earlyFn
	}
	st.first = st.first || st.earlyFirst
	st.early, st.earlyFn, st.earlyFirst = false, nil, false
	m.resolve(now)
}

func (m *Matcher) finish(id int64, outcome results.Outcome, emit func(*Matched)) {
	m.believe(id, time.Time{})
	st := m.iv(id)
	mt := &Matched{ID: id, Outcome: outcome}
	if se := st.sender; se != nil {
		mt.Sender, mt.Meta = se.si, se.meta
		mt.Partial = se.si.Partial
	}
	if rx := st.receiver; rx != nil {
		mt.Receiver, mt.Flows, mt.Late, mt.ReceiverClock = rx.Direct, rx.Flows, rx.Late, rx.Clock
		mt.ReceiverDrops, mt.ReceiverDropsAffecting = rx.Drops, rx.DropsAffecting
		mt.release = rx.Release
		mt.Partial = mt.Partial || rx.Partial
		start := id * m.p.T
		bs, _ := m.needs(id)
		for _, b := range bs {
			sp := m.splitAt(b)
			if sp == nil {
				continue
			}
			pk := sp.byIv[id]
			for i := range pk {
				mt.Receiver.AddCount(&pk[i], pk[i].TS-start, mt.Flows.add(&pk[i]))
			}
			delete(sp.byIv, id)
			if b == id+1 {
				// The boundary's own counts go to the interval it closes.
				mt.Unresolved += sp.unresolved
				mt.Misplaced += sp.misplaced
				sp.unresolved, sp.misplaced = 0, 0
			}
		}
		if b := m.bnds[id]; b != nil {
			mt.WOpen = b.w
		}
		if b := m.bnds[id+1]; b != nil {
			mt.WClose = b.w
		}
	}
	if mt.Partial && outcome == results.OutcomeMatched {
		mt.Outcome = results.OutcomePartial
	}
	// An interval neither end saw a packet in is not an event: at the
	// edges of a capture the receiver seals such intervals for its held
	// packets, which by now have gone to their neighbours.
	// So are the empty intervals a sender emits after the end of its input
	// for the boundaries that can still hold its last packets.
	quiet := (mt.Sender == nil || mt.Sender.Trailer && mt.Sender.Sk != nil && mt.Sender.Sk.Packets == 0) && (mt.Receiver == nil || mt.Receiver.Packets == 0)
	if st.receiver != nil {
		m.nReceiver--
	}
	if st.sender != nil {
		m.nSender--
	}
	if st.held {
		m.nHeld--
	}
	st.receiver, st.receiverSince, st.sender, st.senderSince = nil, time.Time{}, nil, time.Time{}
	st.held = false
	st.done = true
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
		if st := m.ivs[m.doneOrder[0]]; st != nil {
			st.done = false
		}
		m.doneOrder = m.doneOrder[1:]
	}
	low := int64(math.MinInt64)
	if len(m.doneOrder) == keep {
		low = slices.Min(m.doneOrder)
	}
	for id, st := range m.ivs {
		// The function of interval id is needed to split boundary id+1.
		if st.fn != nil && m.heldAt(id+1) == nil && (m.splitAt(id+1) != nil || id < low) {
			st.fn = nil
		}
		if id < low {
			st.first = false
		}
	}
	for b, st := range m.bnds {
		if b < low {
			st.k, st.kKnown, st.w = 0, false, 0
		}
		if st.split == nil {
			continue
		}
		// Boundary b feeds intervals b-K … b.
		gone := true
		for iv := b - st.split.k; iv <= b; iv++ {
			if !m.isDone(iv) && iv >= low {
				gone = false
				break
			}
		}
		if gone {
			st.split = nil
		}
	}
	for id, st := range m.ivs {
		if st.empty() {
			delete(m.ivs, id)
		}
	}
	for b, st := range m.bnds {
		if st.empty() {
			delete(m.bnds, b)
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
