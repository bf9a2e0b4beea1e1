package sketch

import (
	"fmt"
	"math/bits"
)

// RepairPacket is a packet one end's cells hold and the other end's do
// not, as the decoded lost-packet list names it: a lost packet (seen at
// the sender only) or an extra one (seen at the receiver only).
type RepairPacket struct {
	Flow, Pkt uint64 // flow hash and packet hash, as Update got them
	// T is the packet's capture time at the end that saw it, in ns from
	// the interval start, as that end's Update got it; meaningful only
	// where Known.
	T     int64
	W     uint32 // the flow's weight (0 is taken as 1)
	Known bool
	// Extra: seen at the receiver only, taken out of the receiver's
	// cells; else lost, taken out of the sender's.
	Extra bool
}

// RepairStats says what a repair did.
type RepairStats struct {
	Cells   int // cells taken out of: every listed packet in them had its time
	Blocked int // cells left as they were: a listed packet in them had no time
	Packets int // listed packets taken out of at least one cell
	// ExtraSlots are the receiver's composition counters the extra
	// packets taken out leave: (flow, r·k + vLDA offset) each. The caller
	// decrements its FlowComposition for them.
	ExtraSlots []ExtraSlot
}

// ExtraSlot is one composition counter an extra packet leaves.
type ExtraSlot struct {
	Flow uint64
	Slot int
}

// Repaired marks the cells a repair took packets out of (index r·C + c).
type Repaired struct {
	cells []bool
}

// Has reports whether cell i was repaired.
func (m *Repaired) Has(i int) bool { return m != nil && i >= 0 && i < len(m.cells) && m.cells[i] }

// FlowCells is how many of the flow's R·k cells in l were repaired.
func (m *Repaired) FlowCells(l *LDS, flowHash uint64) int {
	if m == nil {
		return 0
	}
	n := 0
	h1, h2 := l.flowCols(flowHash)
	col := h1
	for r := 0; r < l.rows; r++ {
		c := col
		for j := uint64(0); j < l.k; j++ {
			if m.cells[uint64(r)*l.cols+c] {
				n++
			}
			if c++; c == l.cols {
				c = 0
			}
		}
		if col += h2; col >= l.cols {
			col -= l.cols
		}
	}
	return n
}

// RepairLDS takes the listed packets out of the cells that hold them, in
// place: each lost packet from the sender's cells, each extra one from the
// receiver's, in every row that sampled it, with the sketch's own hashing,
// sampling, sign and weight (Update's arithmetic undone). A cell is taken
// out of only when every listed packet in it has its time: a cell that
// holds one without stays exactly as it was, lossy (no partial repair).
//
// The list must be the complete difference of the two ends' packet sets
// for the interval (a peeled lost-packet table), else a repaired cell is
// still lossy and stays unused. With it complete and every time exact, a
// repaired cell holds the same packets at both ends, so it passes the
// usable test and its delay sum is exact: the estimators then see the
// sketch of the packets both ends saw. Byte counters are not touched (the
// list carries no sizes): they keep counting what the sender sent. Where
// no packet has its time nothing is written: the stats then count the
// cells the list leaves lossy.
func RepairLDS(snd, rcv *LDS, pkts []RepairPacket) (*Repaired, RepairStats, error) {
	var st RepairStats
	if snd == nil || rcv == nil || !snd.p.Equal(rcv.p) {
		return nil, st, fmt.Errorf("repair sketches: parameters differ or a sketch is missing; only an interval's two sketches repair")
	}
	blocked := make([]bool, len(snd.cells))
	var pos []int32
	for i := range pkts {
		if pkts[i].Known {
			continue
		}
		pos = snd.Positions(pkts[i].Flow, pkts[i].Pkt, pos)
		for _, c := range pos {
			if c >= 0 {
				blocked[c] = true
			}
		}
	}
	rep := &Repaired{cells: make([]bool, len(snd.cells))}
	for i := range pkts {
		p := &pkts[i]
		if !p.Known {
			continue
		}
		if n := remove(snd, rcv, p, blocked, rep, &st); n > 0 {
			st.Packets++
		}
	}
	for i, b := range blocked {
		if b {
			st.Blocked++
		}
		if rep.cells[i] {
			st.Cells++
		}
	}
	return rep, st, nil
}

// remove undoes p's Update in every row that sampled it and whose cell is
// not blocked; it returns the cells it took p out of.
func remove(snd, rcv *LDS, p *RepairPacket, blocked []bool, rep *Repaired, st *RepairStats) int {
	l := snd
	if p.Extra {
		l = rcv
	}
	w := int64(p.W)
	if w == 0 {
		w = 1
	}
	wt := w * p.T
	C := l.cols
	col, step := l.flowCols(p.Flow)
	n := 0
	for r := 0; r < l.rows; r++ {
		z := rowMix(p.Pkt, r)
		if z>>32 < l.thr[r] {
			off := fastRange(z, l.k)
			c := col + off
			if c >= C {
				c -= C
			}
			i := uint64(r)*C + c
			if !blocked[i] {
				l.cells[i].add(-w, -wt, z, digest(p.Pkt)) // takes the packet out: σ·(−x) = −σ·x
				rep.cells[i] = true
				n++
				if p.Extra {
					st.ExtraSlots = append(st.ExtraSlots, ExtraSlot{Flow: p.Flow, Slot: r*int(l.k) + int(off)})
				}
			}
		}
		if col += step; col >= C {
			col -= C
		}
	}
	return n
}

// RepairLDA is RepairLDS for a link aggregator: the listed packets of the
// aggregator's class taken out of the bank cell each one updated, a cell
// only where every listed packet in it has its time. It returns the cells
// repaired. Weights do not apply (the LDA counts packets).
func RepairLDA(snd, rcv *LDA, pkts []RepairPacket) (int, error) {
	if snd == nil || rcv == nil || snd.p != rcv.p {
		return 0, fmt.Errorf("repair link aggregators: parameters differ or one is missing; only an interval's two aggregators repair")
	}
	blocked := map[uint64]bool{}
	for i := range pkts {
		if !pkts[i].Known {
			blocked[snd.cellOf(pkts[i].Pkt)] = true
		}
	}
	done := map[uint64]bool{}
	for i := range pkts {
		p := &pkts[i]
		c := snd.cellOf(p.Pkt)
		if !p.Known || blocked[c] {
			continue
		}
		a := snd
		if p.Extra {
			a = rcv
		}
		cell := &a.cells[c]
		cell.S -= p.T
		cell.N--
		cell.D ^= digest(p.Pkt)
		done[c] = true
	}
	return len(done), nil
}

// cellOf is the index (b·m + i) of the cell Update puts a packet in.
func (a *LDA) cellOf(pktHash uint64) uint64 {
	z := splitmix64(pktHash)
	b := uint64(bits.LeadingZeros64(z))
	if last := uint64(a.p.Banks - 1); b > last {
		b = last
	}
	return b*a.m + fastRange(z, a.m)
}

// Clone returns a copy of the sketch (cells and byte counters).
func (l *LDS) Clone() *LDS {
	c := *l
	c.cells = append([]Cell(nil), l.cells...)
	if l.bytes != nil {
		c.bytes = append([]uint64(nil), l.bytes...)
	}
	c.p.Sampling = append([]float64(nil), l.p.Sampling...)
	return &c
}

// Clone returns a copy of the aggregator.
func (a *LDA) Clone() *LDA {
	c := *a
	c.cells = append([]LDACell(nil), a.cells...)
	return &c
}
