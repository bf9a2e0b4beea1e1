package receiver

import (
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sketch"
)

// TestRepairCellsGating: one flow of 20 packets of which tap B missed 3,
// both ends' sketches and tables built from the packets. The lossy cells
// are repaired (on copies: the matched sketches stay) only where the list
// is complete, which takes the sender's answer naming every lost packet
// with its send time; a missing answer, capture drops or NoRepair leave
// them as they came.
func TestRepairCellsGating(t *testing.T) {
	k := capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443)
	const fh, T, id = uint64(0x1234_0000_5678), int64(1e9), int64(7)
	hash := func(i int) uint64 { return 0x9e3779b97f4a7c15 * uint64(i+1) }
	sent := func(i int) int64 { return int64(i) * 1_000_000 }
	mk := func() (*results.Interval, *interval.Matched) {
		p := sketch.DefaultParams()
		sl, _ := sketch.NewLDS(p)
		rl, _ := sketch.NewLDS(p)
		st, _ := sketch.NewIBLT(sketch.IBLTCells(50))
		rt, _ := sketch.NewIBLT(sketch.IBLTCells(50))
		for i := range 20 {
			sl.Update(fh, hash(i), sent(i), 1, 100)
			st.Insert(hash(i))
			if i >= 3 {
				rl.Update(fh, hash(i), sent(i)+40_000, 1, 100)
				rt.Insert(hash(i))
			}
		}
		mt := &interval.Matched{ID: id, Outcome: results.OutcomeMatched,
			Sender:   &interval.SenderInterval{ID: id, Sk: &interval.Sketches{LDS: sl, Lost: st}},
			Receiver: &interval.Sketches{LDS: rl, Lost: rt},
			Flows:    interval.NewFlowTable(16, sketch.DefaultParams(), false)}
		return &results.Interval{Sender: "a", Interval: id, StartNS: id * T, Outcome: results.OutcomeMatched}, mt
	}
	// answer is the sender's answer to the question of the match stage
	// for the first n of the 3 lost packets.
	answer := func(n int) func(*interval.Matched) {
		return func(mt *interval.Matched) {
			mt.Lost = interval.PeelLost(mt)
			mt.Lost.Asked, mt.Lost.Answer = 3, map[uint64]interval.LoggedPacket{}
			for i := range n {
				mt.Lost.Answer[hash(i)] = interval.LoggedPacket{Hash: hash(i), SentNS: id*T + sent(i), Key: k, IDKind: capture.IDTCPSeq, ID: 1000 + uint32(i)}
			}
			if n < 3 {
				mt.Lost.Unanswered = interval.UnansweredTimeout
			}
		}
	}
	tests := []struct {
		name     string
		answer   func(*interval.Matched)
		noRepair bool
		setup    func(*interval.Matched)
		repaired int // cells; 0: none
		lost     int // listed lost packets
	}{
		{"every time known", answer(3), false, nil, 4, 3},
		{"one answer missing: list incomplete", answer(2), false, nil, 0, 2},
		{"no answer: list incomplete", answer(0), false, nil, 0, 0},
		{"repair off", answer(3), true, nil, 0, 3},
		{"list incomplete: capture drops", answer(3), false, func(mt *interval.Matched) { mt.ReceiverDropsAffecting = 1 }, 0, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			iv, mt := mk()
			tc.answer(mt)
			if tc.setup != nil {
				tc.setup(mt)
			}
			s0, r0 := mt.Sender.Sk.LDS.Clone(), mt.Receiver.LDS.Clone()
			e := &Estimation{T: T, FlowHash: func(capture.FlowKey) uint64 { return fh }, NoRepair: tc.noRepair}
			buildLost(iv, mt, "a")
			if iv.LostList == nil || iv.LostList.Lost != tc.lost {
				t.Fatalf("lost list %+v, want %d lost", iv.LostList, tc.lost)
			}
			cr := e.repairCells(iv, mt, "a")
			if !mt.Sender.Sk.LDS.Equal(s0) || !mt.Receiver.LDS.Equal(r0) {
				t.Fatal("the matched interval's sketches were changed")
			}
			if iv.LostList.RepairedCells != tc.repaired {
				t.Errorf("repaired %d cells, want %d", iv.LostList.RepairedCells, tc.repaired)
			}
			if tc.repaired == 0 {
				if cr.snd != mt.Sender.Sk.LDS || cr.rcv != mt.Receiver.LDS || cr.rep != nil {
					t.Error("nothing repaired, yet the estimators would read other sketches")
				}
				return
			}
			if r := sketch.UsableCellRatio(cr.snd, cr.rcv); r != 1 {
				t.Errorf("usable cell ratio after the repair %.2f, want 1", r)
			}
			est, err := sketch.EstimatePaper(cr.snd, cr.rcv, []uint64{fh}, sketch.EstimateOptions{})
			if err != nil || est[0].Delay != 40_000 {
				t.Errorf("repaired delay %v (%v), want exactly 40000 ns", est[0].Delay, err)
			}
		})
	}
}
