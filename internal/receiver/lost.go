package receiver

import (
	"cmp"
	"slices"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/internal/sketch"
)

// Reasons an interval's lost-packet list is incomplete (LostSummary.Reason).
const (
	lostOverflow   = "overflow"      // more differences than the table holds
	lostPartial    = "partial"       // an end's capture did not cover the interval
	lostDrops      = "capture_drops" // an end's capture dropped packets: not all differences are network loss
	lostLate       = "late"          // packets counted at one end only because they came after their interval closed
	lostUnresolved = "unresolved"    // held packets placed without the sender's boundary function
)

// lostFlow is one flow's share of the list.
type lostFlow struct {
	lost, extra int
}

// applyLost subtracts the receiver's lost-packet table from the sender's,
// peels the difference into the interval's list of lost (and extra)
// packets and, where the list is complete, makes every flow's loss the
// exact count (docs/results.md, "Lost packets"). keys and hashes are the
// candidate flows, index for index with iv.Flows; t is the interval length.
func applyLost(iv *results.Interval, mt *interval.Matched, sender string, flowHash func(capture.FlowKey) uint64, t int64) {
	round := mt.Lost
	if round == nil {
		round = interval.PeelLost(mt) // not through the match stage (tests): no answer
	}
	if round == nil {
		return
	}
	items, complete := round.Items, round.Complete
	sum := &results.LostSummary{Complete: complete}
	if !complete {
		sum.Reason = lostOverflow
	}
	iv.LostList = sum
	perFlow := map[capture.FlowKey]*lostFlow{}
	iv.Lost = make([]results.LostPacket, 0, len(items))
	for i := range items {
		it := &items[i]
		if !it.ValidItem() {
			// A cell that looks pure but holds no packet lds could have
			// inserted: the decode is not to be trusted.
			sum.Complete, sum.Reason = false, lostOverflow
			continue
		}
		p := lostPacket(mt.ID, sender, it)
		if a, ok := round.Answer[p.Hash]; ok && !p.Extra && a.Key == p.Key {
			t := a.SentNS
			p.SentNS = &t
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
	slices.SortFunc(iv.Lost, compareLost)
	if t <= 1<<32 && round.Answer == nil { // beyond, the samples' send times are rounded
		sentFromSamples(iv.Lost, mt.Snd.Samples, iv.StartNS, flowHash)
	}
	if sum.Complete {
		if r := cmp.Or(lostDoubt(mt), lostWithheld(iv)); r != "" {
			sum.Complete, sum.Reason = false, r
		}
	}
	if !sum.Complete {
		return // the estimates stay; LossExact stays false
	}
	exactLoss(iv, mt, perFlow, flowHash)
}

// lostDoubt names what makes the two ends' tables differ by more than
// network loss, or "".
func lostDoubt(mt *interval.Matched) string {
	switch {
	case mt.Partial || mt.Outcome == results.OutcomePartial:
		return lostPartial
	case mt.Meta.DropsAffecting+mt.RxDropsAffecting > 0:
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
			return s
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
			Loss: results.Float(float64(f.lost)), Packets: float64(f.lost), LossExact: true, Sender: iv.Sender, Status: "no_usable_cell",
			LossBound: results.Float(float64(f.lost))})
		iv.Touched = append(iv.Touched, true)
	}
}

func lostPacket(id int64, sender string, it *sketch.Peeled) results.LostPacket {
	k := capture.FlowKey{Src: it.Src, Dst: it.Dst, SPort: it.SPort, DPort: it.DPort, Proto: it.Proto, V6: it.Flags&sketch.ItemV6 != 0}
	p := results.LostPacket{Interval: id, Sender: sender, Key: k, ID: it.ID, Extra: it.Sign < 0, Hash: it.Hash}
	switch {
	case it.Flags&sketch.ItemIDTCPSeq != 0:
		p.IDKind = capture.IDTCPSeq
	case it.Flags&sketch.ItemIDIPv4 != 0:
		p.IDKind = capture.IDIPv4
	default:
		p.ID = 0
	}
	return p
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

// sentFromSamples gives a lost packet its send time where the sender
// shipped it among its flow's consistent samples (docs/sampling.md): the
// sample of the flow whose value matches the packet's, when exactly one
// does. The lost-packet table carries identities, not times, and no
// fixed-size table can carry the send times of packets the sender cannot
// know are lost (docs/results.md, "Lost packets"); the samples hold exact
// send times (to the ns for intervals up to 4.29 s) of a share of them.
func sentFromSamples(list []results.LostPacket, set *sample.Set, start int64, flowHash func(capture.FlowKey) uint64) {
	if set == nil || len(set.Flows) == 0 {
		return
	}
	byFlow := make(map[uint64]*sample.List, len(set.Flows))
	for i := range set.Flows {
		byFlow[set.Flows[i].Flow] = &set.Flows[i]
	}
	for i := range list {
		p := &list[i]
		if p.Extra {
			continue
		}
		s := sample.Mix(p.Hash)
		if s >= set.Limit {
			continue // not a candidate: never sampled
		}
		l := byFlow[flowHash(p.Key)]
		if l == nil {
			continue
		}
		q := s >> l.Shift
		j, found := slices.BinarySearchFunc(l.Samples, q, func(x sample.Sample, q uint64) int { return cmp.Compare(x.Q, q) })
		// Not sampled; two samples of the flow sharing the value
		// (ambiguous); or the flow's largest sample, which an unsampled
		// packet just above the flow's cap could share.
		if !found || j == len(l.Samples)-1 || l.Samples[j+1].Q == q {
			continue
		}
		t := start + l.Samples[j].TX
		p.SentNS = &t
	}
}
