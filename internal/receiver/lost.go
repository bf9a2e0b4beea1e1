package receiver

import (
	"cmp"
	"slices"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sketch"
)

// Reasons an interval's lost-packet list is incomplete (LostSummary.Reason).
const (
	lostOverflow   = "overflow"      // more differences than the table holds
	lostPartial    = "partial"       // an end's capture did not cover the interval
	lostDrops      = "capture_drops" // an end's capture dropped packets: not all differences are network loss
	lostLate       = "late"          // packets counted at one end only because they came after their interval closed
	lostUnresolved = "unresolved"    // held packets placed without the sender's boundary function
	lostUnanswered = "unanswered"    // a listed packet's flow is known to neither end's log
)

// lostFlow is one flow's share of the list.
type lostFlow struct {
	lost, extra int
}

// buildLost makes the interval's list of lost (and extra) packets from
// the peeled difference of the two ends' tables and the sender's answer
// (iv.Lost, iv.LostList; docs/results.md, "Lost packets") and returns
// each listed flow's counts, nil without tables. It needs no flow record:
// the estimate stage runs it before the estimators, and applyLostFlows
// after them. The list is complete here only if nothing but network loss
// can explain it (lostDoubt).
func buildLost(iv *results.Interval, mt *interval.Matched, sender string) map[capture.FlowKey]*lostFlow {
	round := mt.Lost
	if round == nil {
		round = interval.PeelLost(mt) // not through the match stage (tests): no answer
		if round != nil {
			mt.Lost = round
			nameExtra(mt)
		}
	}
	if round == nil {
		return nil
	}
	items, complete := round.Items, round.Complete
	sum := &results.LostSummary{Complete: complete}
	if !complete {
		sum.Reason = lostOverflow
	}
	iv.LostList = sum
	perFlow := map[capture.FlowKey]*lostFlow{}
	iv.Lost = make([]results.LostPacket, 0, len(items))
	unknown := 0
	for i := range items {
		p, ok := lostPacket(mt.ID, sender, &items[i], round)
		if !ok {
			// Neither the sender's answer nor the receiver's own log
			// names the packet: listed by nothing but its hash, it
			// cannot count toward any flow.
			unknown++
			continue
		}
		iv.Lost = append(iv.Lost, p)
		f := perFlow[p.Key]
		if f == nil {
			f = &lostFlow{}
			perFlow[p.Key] = f
		}
		if p.Extra {
			f.extra++
			sum.Extra++
		} else {
			f.lost++
			sum.Lost++
		}
	}
	if unknown > 0 && sum.Complete {
		sum.Complete, sum.Reason = false, cmp.Or(round.Unanswered, lostUnanswered)
	}
	slices.SortFunc(iv.Lost, compareLost)
	if sum.Complete {
		if r := lostDoubt(mt); r != "" {
			sum.Complete, sum.Reason = false, r
		}
	}
	return perFlow
}

// applyLostFlows is applyLost's second half, once the flow records exist:
// where the list is still complete, every flow's loss becomes the exact
// count.
func applyLostFlows(iv *results.Interval, mt *interval.Matched, perFlow map[capture.FlowKey]*lostFlow, flowHash func(capture.FlowKey) uint64) {
	sum := iv.LostList
	if sum == nil || !sum.Complete {
		return // the estimates stay; LossExact stays false
	}
	if r := lostWithheld(iv); r != "" {
		sum.Complete, sum.Reason = false, r
		return
	}
	exactLoss(iv, mt, perFlow, flowHash)
}

// lostDoubt names what makes the two ends' tables differ by more than
// network loss, or "".
func lostDoubt(mt *interval.Matched) string {
	switch {
	case mt.Partial || mt.Outcome == results.OutcomePartial:
		return lostPartial
	case mt.Meta.DropsAffecting+mt.ReceiverDropsAffecting > 0:
		// Either end's capture dropped packets that may belong to the
		// interval (the drop ledgers' attribution, the same that withholds
		// its loss: results.Interval.FlagCaptureDrops).
		return lostDrops
	case mt.Late > 0 || mt.Meta.ParseDrops["late"] > 0:
		return lostLate
	case mt.Unresolved > 0:
		return lostUnresolved
	}
	return ""
}

// lostWithheld names the status of a flow whose loss is withheld
// (capture_drops, delay_beyond_window), or "": such an interval's tables
// differ by more than network loss, and no loss of it may be exact.
func lostWithheld(iv *results.Interval) string {
	for i := range iv.Flows {
		switch s := iv.Flows[i].Status; s {
		case results.StatusCaptureDrops, results.StatusBeyondWindow:
			return string(s)
		}
	}
	return ""
}

// exactLoss gives every flow its exact loss and packets sent, and adds a
// record for each listed flow that is not a candidate (it lost every
// packet and was not among the sender's heaviest).
func exactLoss(iv *results.Interval, mt *interval.Matched, perFlow map[capture.FlowKey]*lostFlow, flowHash func(capture.FlowKey) uint64) {
	seen := make(map[capture.FlowKey]bool, len(perFlow))
	for i := range iv.Flows {
		r := &iv.Flows[i]
		f := perFlow[r.Key]
		if f != nil {
			seen[r.Key] = true
		} else {
			f = &lostFlow{}
		}
		// The bound and the point estimate become the count too: an exact
		// count is the tightest bound, and the estimate it replaces.
		r.Loss, r.LossExact, r.LossBound = results.Float(float64(f.lost)), true, results.Float(float64(f.lost))
		if r.LossPoint != nil {
			r.LossPoint = results.Float(float64(f.lost))
		}
		if st := mt.Flows.Lookup(r.Key, flowHash(r.Key)); st != nil {
			r.Packets = float64(int64(st.Packets) + int64(f.lost) - int64(f.extra))
		} else if mt.Flows.Untracked == 0 {
			// Not at the receiver at all: every packet it sent was lost.
			r.Packets = float64(f.lost)
		}
	}
	var add []capture.FlowKey
	for k, f := range perFlow {
		if !seen[k] && f.lost > 0 && (mt.Flows.Untracked == 0 || mt.Flows.Lookup(k, flowHash(k)) == nil) {
			add = append(add, k)
		}
	}
	slices.SortFunc(add, capture.CompareText)
	for _, k := range add {
		f := perFlow[k]
		if mt.Flows.Lookup(k, flowHash(k)) != nil {
			continue // a receiver flow beyond the candidates' cap
		}
		iv.Flows = append(iv.Flows, results.FlowRecord{Interval: iv.Interval, StartNS: iv.StartNS, Key: k,
			Loss: results.Float(float64(f.lost)), Packets: float64(f.lost), LossExact: true, Sender: iv.Sender, Status: results.StatusNoUsableCell,
			LossBound: results.Float(float64(f.lost))})
		iv.Touched = append(iv.Touched, true)
	}
}

// lostPacket names a peeled packet: a lost one (+1) from the sender's
// answer (flow, identifier, tap A's capture time), an extra one (−1) from
// the receiver's own log (flow and identifier; it was never sent at A).
// ok is false where neither names it.
func lostPacket(id int64, sender string, it *sketch.Peeled, round *interval.LostRound) (results.LostPacket, bool) {
	p := results.LostPacket{Interval: id, Sender: sender, Extra: it.Sign < 0, Hash: it.Hash}
	var lp interval.LoggedPacket
	var ok bool
	if p.Extra {
		lp, ok = round.Extra[it.Hash]
	} else if lp, ok = round.Answer[it.Hash]; ok {
		t := lp.SentNS
		p.SentNS = &t
	}
	if !ok {
		return p, false
	}
	p.Key, p.IDKind, p.ID = lp.Key, lp.IDKind, lp.ID
	if p.IDKind == capture.IDNone {
		p.ID = 0
	}
	return p, true
}

// compareLost orders a list by flow (as its text sorts), then extra after
// lost, then identifier and hash: the same list always reads the same.
func compareLost(a, b results.LostPacket) int {
	if c := capture.CompareText(a.Key, b.Key); c != 0 {
		return c
	}
	if a.Extra != b.Extra {
		if a.Extra {
			return 1
		}
		return -1
	}
	return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Hash, b.Hash))
}
