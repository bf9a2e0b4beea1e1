package interval

import (
	"math"

	"github.com/lds-net/lds/internal/sketch"
)

// Assignment is the receiver's check of one matched interval for packets
// placed in the wrong interval: packets slower than a hold window. Such a
// packet leaves a deficit in the cells of the interval it was sent in
// (which alone looks like loss) and a surplus in the cells of the one it
// was placed in (impossible under loss alone); both fail the digest check.
type Assignment struct {
	// SurplusCells counts LDS and LDA cells where the receiver counted
	// more than the sender.
	SurplusCells int
	// DeficitCells counts LDS cells where the receiver counted fewer
	// packets than the sender: loss, or packets placed in another interval.
	// Without any, no packet of this interval sits in another one.
	DeficitCells int
	// Delay is the largest delay the interval's usable LDA cells vouch
	// for: over the classes, the mean plus three standard deviations, ns
	// (NaN: no usable cell). The window grows from it (WindowPlan.Observe).
	Delay float64
	// Mean is the largest mean delay over the classes, ns (NaN: none).
	Mean float64
	// Window is the smaller of the interval's two hold windows, ns (0:
	// unknown).
	Window int64
	// Misplaced counts held packets the sender's function placed into an
	// interval that was already final.
	Misplaced uint64
}

// Beyond reports whether packets of another interval sit in this one: a
// surplus, a misplaced held packet, or a mean delay that reaches the hold
// window. (Packets of this one that sit in the next show as the next
// one's surplus: the receiver flags both.) Intervals whose held packets
// were placed by receive time (Unresolved) are judged by that instead.
func (a Assignment) Beyond(unresolved uint64) bool {
	return a.Misplaced > 0 || (unresolved == 0 && a.SurplusCells > 0) ||
		(a.Window > 0 && !math.IsNaN(a.Mean) && a.Mean >= float64(a.Window))
}

// CheckAssignment compares both ends' cells of a matched interval.
func (mt *Matched) CheckAssignment() Assignment {
	a := Assignment{Delay: math.NaN(), Mean: math.NaN(), Misplaced: mt.Misplaced}
	if mt.WOpen > 0 && mt.WClose > 0 {
		a.Window = min(mt.WOpen, mt.WClose)
	}
	if mt.Sender == nil || mt.Receiver == nil || mt.Sender.Sk == nil {
		return a
	}
	s, r := mt.Sender.Sk.LDS, mt.Receiver.LDS
	if s.Len() == r.Len() {
		for i := range s.Len() {
			switch rn, sn := r.Cell(i).N, s.Cell(i).N; {
			case rn > sn:
				a.SurplusCells++
			case rn < sn:
				a.DeficitCells++
			}
		}
	}
	for c := range min(len(mt.Sender.Sk.LDA), len(mt.Receiver.LDA)) {
		sa, ra := mt.Sender.Sk.LDA[c], mt.Receiver.LDA[c]
		p := sa.Params()
		if ra.Params() != p {
			continue
		}
		for bank := range p.Banks {
			for i := range p.Cells {
				if ra.Cell(bank, i).N > sa.Cell(bank, i).N {
					a.SurplusCells++
				}
			}
		}
		le := sketch.EstimateLDA(sa, ra)
		if !math.IsNaN(le.Delay) && (math.IsNaN(a.Mean) || le.Delay > a.Mean) {
			a.Mean = le.Delay
		}
		if d := le.Delay + 3*zeroIfNaN(le.Stddev); !math.IsNaN(d) && (math.IsNaN(a.Delay) || d > a.Delay) {
			a.Delay = d
		}
	}
	return a
}

func zeroIfNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}
