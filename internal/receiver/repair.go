package receiver

import (
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sketch"
)

// cellRepair is what the estimators read for one interval: the flow
// sketches and link aggregators with the listed packets taken out of the
// cells where that makes them exact (docs/decode.md, "Repair from the
// list of lost packets"), or the interval's own where nothing was.
type cellRepair struct {
	snd, rcv *sketch.LDS
	rep      *sketch.Repaired // nil: no cell repaired
	lda      [][2]*sketch.LDA // per class; nil entries: not repaired
	ldaCells []int
}

// repairCells, where the interval's list is complete (buildLost: the whole
// difference, and nothing but network loss explains it), takes each
// listed packet with its exact time out of the cells that hold it, on
// copies: the matched interval's sketches stay as they were (the
// assignment check and the usable-cell ratio read them). Extra packets
// have no receive time in the list, so their cells stay lossy.
func (e *Estimation) repairCells(iv *results.Interval, mt *interval.Matched, sender string) *cellRepair {
	cr := &cellRepair{snd: mt.Sender.Sk.LDS, rcv: mt.Receiver.LDS}
	if len(iv.Lost) == 0 || iv.LostList == nil {
		return cr
	}
	if e.NoRepair || !iv.LostList.Complete {
		return cr
	}
	pkts := make([]sketch.RepairPacket, len(iv.Lost))
	known := 0
	for i := range iv.Lost {
		p := &iv.Lost[i]
		w := uint32(1)
		if e.Weight != nil {
			w = e.Weight(p.Key)
		}
		pkts[i] = sketch.RepairPacket{Flow: e.FlowHash(p.Key), Pkt: p.Hash, W: w, Extra: p.Extra}
		if p.SentNS != nil && !p.Extra {
			pkts[i].T, pkts[i].Known = *p.SentNS-iv.StartNS, true
			known++
		}
	}
	snd, rcv := cr.snd, cr.rcv
	if known > 0 {
		snd, rcv = snd.Clone(), rcv.Clone()
	} // else RepairLDS only counts the cells it leaves lossy: no packet to take out, nothing written
	rep, st, err := sketch.RepairLDS(snd, rcv, pkts)
	if err != nil {
		return cr // the two ends' parameters differ: the estimators say so
	}
	iv.LostList.RepairedCells = st.Cells
	if st.Cells > 0 {
		cr.snd, cr.rcv, cr.rep = snd, rcv, rep
	}
	// The link aggregators: with one class every packet is in it; with
	// more, the list does not say which class a packet was in (the class
	// rules read the packet, the list holds its flow), so they stay.
	if known > 0 && len(mt.Sender.Sk.LDA) == 1 && len(mt.Receiver.LDA) == 1 {
		s, r := mt.Sender.Sk.LDA[0].Clone(), mt.Receiver.LDA[0].Clone()
		if n, err := sketch.RepairLDA(s, r, pkts); err == nil && n > 0 {
			cr.lda, cr.ldaCells = [][2]*sketch.LDA{{s, r}}, []int{n}
		}
	}
	return cr
}

// markRepaired gives each flow record its count of repaired cells, and
// marks such a flow touched: its cells did not match before the repair
// (a packet misplaced by the hold window would be one of those listed).
func (cr *cellRepair) markRepaired(iv *results.Interval, hashes []uint64) {
	if cr.rep == nil {
		return
	}
	for i := range hashes {
		if i >= len(iv.Flows) {
			break
		}
		if n := cr.rep.FlowCells(cr.snd, hashes[i]); n > 0 {
			iv.Flows[i].RepairedCells = n
			if i < len(iv.Touched) {
				iv.Touched[i] = true
			}
		}
	}
}

// linkDelay replaces a class's delay, stddev, ci95 and samples by those
// of its repaired aggregators; its counts and loss ratio stay those of
// the interval's own (the repair takes lost packets out of the sender's
// counters).
func (cr *cellRepair) linkDelay(class int, le *sketch.LinkEstimate) int {
	if class >= len(cr.lda) || cr.lda[class][0] == nil {
		return 0
	}
	d := sketch.EstimateLDA(cr.lda[class][0], cr.lda[class][1])
	le.Delay, le.Stddev, le.CI95, le.Samples = d.Delay, d.Stddev, d.CI95, d.Samples
	return cr.ldaCells[class]
}
