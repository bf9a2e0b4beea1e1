package interval

import (
	"fmt"
)

// Capture workers (AF_PACKET fanout) each keep their own builder, so the
// packet path takes no lock; their intervals are merged here, at the
// boundary. Sketches are linear: merging is exact.

// SenderMerger joins the n workers' copies of each interval.
type SenderMerger struct {
	n       int
	heavy   int
	pending map[int64][]*SenderInterval
}

// NewSenderMerger merges n workers, keeping the heavy heaviest keys.
func NewSenderMerger(n, heavy int) *SenderMerger {
	return &SenderMerger{n: n, heavy: heavy, pending: map[int64][]*SenderInterval{}}
}

// Add takes one worker's interval; it returns the merged interval once
// all n have it, else nil. Call it off the capture goroutine. The merged
// interval is not finished: its owner (the sender's ship stage) calls
// Finish once, which builds the boundary function over all workers' keys.
func (m *SenderMerger) Add(si *SenderInterval) (*SenderInterval, error) {
	if m.n == 1 {
		return si, nil
	}
	si.rank()
	p := append(m.pending[si.ID], si)
	if len(p) < m.n {
		m.pending[si.ID] = p
		return nil, nil
	}
	delete(m.pending, si.ID)
	return m.merge(p)
}

func (m *SenderMerger) merge(p []*SenderInterval) (*SenderInterval, error) {
	out := p[0]
	var all []kv
	for i, k := range out.Heavy {
		all = append(all, kv{k, out.HeavyN[i]})
	}
	for _, o := range p[1:] {
		if err := out.Sk.Merge(o.Sk); err != nil {
			return nil, fmt.Errorf("interval %d: merging workers: %w", out.ID, err)
		}
		out.Keys = append(out.Keys, o.Keys...)
		out.Logs = append(out.Logs, o.Logs...)
		o.Release()
		out.Window = max(out.Window, o.Window)
		out.Partial = out.Partial || o.Partial
		out.First = out.First && o.First
		out.Trailer = out.Trailer && o.Trailer
		out.Late += o.Late
		out.Counters = out.Counters.Add(o.Counters)
		out.Drops = out.Drops.Add(o.Drops)
		out.DropsAffecting += o.DropsAffecting
		out.SampleCands = out.SampleCands.Merge(o.SampleCands)
		for i, k := range o.Heavy {
			all = append(all, kv{k, o.HeavyN[i]})
		}
	}
	out.Heavy, out.HeavyN = top(all, m.heavy)
	return out, nil
}

// Flush returns what is left (workers that ended early), merged as far as
// possible and flagged partial, oldest first.
func (m *SenderMerger) Flush() []*SenderInterval {
	var out []*SenderInterval
	for _, id := range SortedIDs(m.pending) {
		merged, err := m.merge(m.pending[id])
		if err != nil {
			continue // cannot happen: one builder's params
		}
		merged.Partial = true // a worker's share is missing
		out = append(out, merged)
	}
	clear(m.pending)
	return out
}

// ReceiverMerger joins the n workers' sealed copies of each interval.
type ReceiverMerger struct {
	n       int
	pending map[int64][]*ReceiverInterval
}

// NewReceiverMerger merges n workers.
func NewReceiverMerger(n int) *ReceiverMerger {
	return &ReceiverMerger{n: n, pending: map[int64][]*ReceiverInterval{}}
}

// Add takes one worker's sealed interval; it returns the merged one once all
// n have sealed it, else nil.
func (m *ReceiverMerger) Add(s *ReceiverInterval) (*ReceiverInterval, error) {
	if m.n == 1 {
		return s, nil
	}
	p := append(m.pending[s.ID], s)
	if len(p) < m.n {
		m.pending[s.ID] = p
		return nil, nil
	}
	delete(m.pending, s.ID)
	out := p[0]
	for _, o := range p[1:] {
		if err := out.Direct.Merge(o.Direct); err != nil {
			return nil, fmt.Errorf("interval %d: merging workers: %w", s.ID, err)
		}
		o.Release()
		out.Flows.merge(o.Flows)
		out.HeldPrev = mergeHeld(out.HeldPrev, o.HeldPrev)
		out.HeldNext = mergeHeld(out.HeldNext, o.HeldNext)
		out.NextK = max(out.NextK, o.NextK)
		out.Partial = out.Partial || o.Partial
		out.First = out.First && o.First
		out.Late += o.Late
		out.Drops += o.Drops
		out.DropsAffecting += o.DropsAffecting
	}
	return out, nil
}

func mergeHeld(a, b *HeldSet) *HeldSet {
	if a == nil || b == nil {
		if a == nil {
			return b
		}
		return a
	}
	a.Pkts = append(a.Pkts, b.Pkts...)
	a.W, a.K = max(a.W, b.W), max(a.K, b.K)
	return a
}
