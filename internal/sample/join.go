package sample

import (
	"cmp"
	"math/bits"
	"slices"
	"sort"
)

// Window is the interval assignment's bounds: a joined delay is at least
// -Guard; MaxDelay + Guard bounds the delays a sample of the first
// interval (no piece before it) may have had before the capture began.
type Window struct {
	T, MaxDelay, Guard int64
}

// FlowDist is one flow's joined samples in one interval.
type FlowDist struct {
	Delays    []float64 // exact one-way delays (ns) of the samples the receiver saw, ascending
	Lost      int       // samples the receiver provably never saw: lost packets
	Ambiguous int       // samples two receiver candidates could be (left out)
	// Reordered counts the joined samples that arrived after a joined
	// sample of the flow sent later (RFC 4737 among the samples), and
	// ReorderExtentNS is the largest lateness among them: how long after
	// the first later-sent sample it arrived (reorder.go).
	Reordered       int
	ReorderExtentNS float64
	// Overtaken[k-1] counts the reordered samples that k later-sent
	// samples arrived before (the last bucket: k or more).
	Overtaken [OvertakenBuckets]int32
	// SendSpanNS is the time between the first and the last joined
	// sample's send time.
	SendSpanNS float64
	// SerialCorr is the lag-1 correlation of the joined samples' delays
	// in send order: near 0 where each packet's delay is drawn on its own,
	// near 1 where it follows a slow swing (a queue filling and
	// draining), which reorders nothing however wide (ReorderedEstimate).
	SerialCorr float64
}

// LinkSample is one joined packet of the uniform link sample.
type LinkSample struct {
	Class uint16
	Delay float64 // ns
}

// Joined is the join of one interval.
type Joined struct {
	Flows    map[uint64]*FlowDist // by flow hash
	Link     []LinkSample
	LinkLost int
	// Covered is false when a receiver piece was missing (its first
	// interval, or an interval whose pieces were dropped): missing samples
	// are then not taken for lost.
	Covered bool
}

// Join pairs the sender's samples of interval id with the receiver's
// candidates (pieces id−1 and id of ps). It marks the pieces used even
// when set is nil (no samples came): call it once per final interval.
func Join(ps *Pieces, id int64, set *Set, w Window) *Joined {
	prev, cur := ps.take(id)
	// The two pieces must cover receive times without a gap between them.
	covered := prev != nil && cur != nil && cur.From <= prev.Upto
	out := &Joined{Flows: map[uint64]*FlowDist{}, Covered: covered}
	if set == nil || cur == nil {
		return out
	}
	start := id * w.T
	receiverLimit := cur.Limit
	if prev != nil {
		receiverLimit = min(receiverLimit, prev.Limit)
	}
	// A bitmap by flow hash in front of an open-addressing table of the
	// set's flows: most candidates belong to flows without samples and
	// cost one bit test; a candidate of a sampled flow costs a probe or
	// two, and only candidates up to the list's largest sample are kept
	// (the sender kept the smallest S of each flow).
	var bm [1 << 12]uint64
	tab := newFlowTab(len(set.Flows))
	for i := range set.Flows {
		l := &set.Flows[i]
		f := l.Flow
		var hi uint64
		if n := len(l.Samples); n > 0 {
			hi = l.Samples[n-1].Q<<l.Shift | (uint64(1)<<l.Shift - 1)
		}
		tab.put(f, hi, i)
		bm[f&(1<<18-1)>>6] |= 1 << (f & 63)
	}
	byFlow := make([][]ReceiverCand, len(set.Flows))
	var link []ReceiverCand
	for _, pc := range []*Piece{prev, cur} {
		if pc == nil {
			continue
		}
		for _, x := range pc.C {
			if bm[x.Flow&(1<<18-1)>>6]&(1<<(x.Flow&63)) != 0 {
				if i := tab.get(x.Flow, x.S); i >= 0 {
					byFlow[i] = append(byFlow[i], x)
				}
			}
			if x.S < set.LinkLimit {
				link = append(link, x)
			}
		}
	}
	m := matcher{w: w, start: start, receiverLimit: receiverLimit, prevMissing: !covered}
	var order []sendRecv
	if covered {
		m.receiverFrom = prev.From
	}
	for i := range set.Flows {
		l := &set.Flows[i]
		d := &FlowDist{}
		order = order[:0]
		m.join(l, byFlow[i], func(x ReceiverCand, delay float64) {
			d.Delays = append(d.Delays, delay)
			order = append(order, sendRecv{send: x.TS - int64(delay), recv: x.TS})
		}, &d.Lost, &d.Ambiguous)
		d.Reordered, d.ReorderExtentNS, d.Overtaken = reordering(order)
		if len(order) > 1 {
			d.SendSpanNS = float64(order[0].send - order[len(order)-1].send) // reordering sorted them by send time, latest first
			d.SerialCorr = serialCorr(order)
		}
		slices.Sort(d.Delays)
		out.Flows[l.Flow] = d
	}
	var amb int
	m.join(&set.Link, link, func(x ReceiverCand, delay float64) {
		out.Link = append(out.Link, LinkSample{Class: x.Class, Delay: delay})
	}, &out.LinkLost, &amb)
	return out
}

// flowTab maps a flow hash to its list's index and largest sample value
// (open addressing, linear probing, at most half full).
type flowTab struct {
	slots []flowSlot
	shift uint
}

type flowSlot struct {
	flow, hi uint64
	i        int32 // the list's index + 1; 0: empty
}

func newFlowTab(n int) flowTab {
	b := max(bits.Len(uint(2*n)), 6)
	return flowTab{slots: make([]flowSlot, 1<<b), shift: uint(64 - b)}
}

func (t *flowTab) slot(f uint64) uint64 { return (f * 0x9e3779b97f4a7c15) >> t.shift }

// put files list i of flow f (a later list of the same flow replaces it).
func (t *flowTab) put(f, hi uint64, i int) {
	mask := uint64(len(t.slots) - 1)
	for j := t.slot(f); ; j = (j + 1) & mask {
		if sl := &t.slots[j]; sl.i == 0 || sl.flow == f {
			*sl = flowSlot{flow: f, hi: hi, i: int32(i + 1)}
			return
		}
	}
}

// get is the index of flow f's list when s can be one of its samples, else -1.
func (t *flowTab) get(f, s uint64) int {
	mask := uint64(len(t.slots) - 1)
	for j := t.slot(f); ; j = (j + 1) & mask {
		sl := &t.slots[j]
		if sl.i == 0 {
			return -1
		}
		if sl.flow == f {
			if s <= sl.hi {
				return int(sl.i - 1)
			}
			return -1
		}
	}
}

type matcher struct {
	w             Window
	start         int64
	receiverLimit uint64
	prevMissing   bool
	// receiverFrom: the pieces hold no candidate received at or before it. A
	// sample that could have been received by then (sent within guard of
	// it: the window of the boundary before its interval was above
	// T − guard) is left out whole, found or not, so that the delays kept
	// do not lean towards the slow ones.
	receiverFrom int64
}

// join matches one list against the receiver's candidates that may hold
// its packets (sorted here by S).
func (m *matcher) join(l *List, rx []ReceiverCand, found func(ReceiverCand, float64), lost, amb *int) {
	slices.SortFunc(rx, func(a, b ReceiverCand) int { return cmp.Compare(a.S, b.S) })
	span := uint64(1)<<l.Shift - 1
	for _, smp := range l.Samples {
		lo := smp.Q << l.Shift
		hi := lo | span
		tx := m.start + smp.SendTime
		if !m.prevMissing && tx-m.w.Guard <= m.receiverFrom {
			continue
		}
		i := sort.Search(len(rx), func(i int) bool { return rx[i].S >= lo })
		n := 0
		var hit ReceiverCand
		for ; i < len(rx) && rx[i].S <= hi; i++ {
			// No upper bound: the two pieces end at the seal of the
			// interval, and a packet slower than max_delay that still
			// arrived in them was not lost (its delay is exact).
			d := rx[i].TS - tx
			if d >= -m.w.Guard {
				n++
				hit = rx[i]
			}
		}
		switch {
		case n == 1:
			found(hit, float64(hit.TS-tx))
		case n > 1:
			*amb++
		case hi < m.receiverLimit && !(m.prevMissing && smp.SendTime < m.w.MaxDelay+m.w.Guard):
			// The receiver kept every candidate in this range that it
			// received in the window: this packet never arrived.
			*lost++
		}
	}
}

// serialCorr is the lag-1 correlation of the delays of v in its order (0
// where they do not vary).
func serialCorr(v []sendRecv) float64 {
	var mean float64
	for _, x := range v {
		mean += float64(x.recv - x.send)
	}
	mean /= float64(len(v))
	var num, den float64
	for i, x := range v {
		e := float64(x.recv-x.send) - mean
		den += e * e
		if i > 0 {
			num += e * (float64(v[i-1].recv-v[i-1].send) - mean)
		}
	}
	if den <= 0 {
		return 0
	}
	return num / den
}
