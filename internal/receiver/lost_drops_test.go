package receiver

import (
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sketch"
)

// TestLostListWithCaptureDrops: the two ends' tables of an interval differ
// by the three packets tap A sent and tap B never saw. Without capture
// drops the list is complete and the flow's loss exact (3); where either
// end's drop ledger attributes drops to the interval, or a flow's loss is
// withheld, the list is still given but incomplete with that reason, and
// no loss is made exact (the record keeps what it had).
func TestLostListWithCaptureDrops(t *testing.T) {
	k := capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443)
	flowHash := func(capture.FlowKey) uint64 { return 0x1234 }
	mk := func() (*results.Interval, *interval.Matched) {
		snd, err := sketch.NewIBLT(sketch.IBLTCells(50))
		if err != nil {
			t.Fatal(err)
		}
		rx, _ := sketch.NewIBLT(sketch.IBLTCells(50))
		// The sender's answer names the three lost packets.
		round := &interval.LostRound{Answer: map[uint64]interval.LoggedPacket{}}
		for i := range uint32(20) {
			h := 0x9e3779b97f4a7c15 * uint64(i+1)
			snd.Insert(h)
			if i >= 3 {
				rx.Insert(h)
				continue
			}
			round.Answer[h] = interval.LoggedPacket{Hash: h, SentNS: 7e9 + int64(i), Key: k, IDKind: capture.IDTCPSeq, ID: 1000 + i}
		}
		mt := &interval.Matched{ID: 7, Outcome: results.OutcomeMatched,
			Sender:   &interval.SenderInterval{ID: 7, Sk: &interval.Sketches{Lost: snd}},
			Receiver: &interval.Sketches{Lost: rx},
			Flows:    interval.NewFlowTable(16, sketch.DefaultParams(), false)}
		p := interval.PeelLost(mt)
		round.Items, round.Complete = p.Items, p.Complete
		mt.Lost = round
		iv := &results.Interval{Sender: "a", Interval: 7, Outcome: results.OutcomeMatched,
			Flows: []results.FlowRecord{{Interval: 7, Key: k, Loss: results.Float(2.5), Packets: 19}}}
		return iv, mt
	}
	tests := []struct {
		name   string
		setup  func(*results.Interval, *interval.Matched)
		reason string // "": complete
	}{
		{"no drops", func(*results.Interval, *interval.Matched) {}, ""},
		{"receiver's drops", func(_ *results.Interval, mt *interval.Matched) { mt.ReceiverDrops, mt.ReceiverDropsAffecting = 0, 12 }, "capture_drops"},
		{"sender's drops", func(_ *results.Interval, mt *interval.Matched) { mt.Meta.DropsAffecting = 1 }, "capture_drops"},
		{"loss withheld beyond the window", func(iv *results.Interval, _ *interval.Matched) {
			iv.Flows[0].Status, iv.Flows[0].Loss = results.StatusBeyondWindow, nil
		}, string(results.StatusBeyondWindow)},
		{"loss withheld for capture drops", func(iv *results.Interval, _ *interval.Matched) {
			iv.Flows[0].Status, iv.Flows[0].Loss = results.StatusCaptureDrops, nil
		}, string(results.StatusCaptureDrops)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			iv, mt := mk()
			tc.setup(iv, mt)
			before := iv.Flows[0].Loss
			applyLostFlows(iv, mt, buildLost(iv, mt, "a"), flowHash)
			l := iv.LostList
			if l == nil || l.Lost != 3 || len(iv.Lost) != 3 || l.Complete != (tc.reason == "") || l.Reason != tc.reason {
				t.Fatalf("lost_list %+v with %d listed, want 3 listed, complete=%v, reason %q", l, len(iv.Lost), tc.reason == "", tc.reason)
			}
			f := iv.Flows[0]
			if tc.reason == "" {
				if !f.LossExact || f.Loss == nil || *f.Loss != 3 {
					t.Errorf("complete list: loss %v exact %v, want exactly 3", f.Loss, f.LossExact)
				}
				return
			}
			if f.LossExact || f.Loss != before {
				t.Errorf("incomplete list: loss %v exact %v, want the record's own loss %v, not exact", f.Loss, f.LossExact, before)
			}
		})
	}
}

// TestLostListWithoutAnswer: where the sender's answer did not come (the
// wait ended, the sender kept no log, or its answer broke the rules), the
// lost packets cannot be named: the list is incomplete with that reason
// and no loss is made exact.
func TestLostListWithoutAnswer(t *testing.T) {
	k := capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443)
	flowHash := func(capture.FlowKey) uint64 { return 0x1234 }
	for _, why := range []string{interval.UnansweredTimeout, interval.UnansweredGone, interval.UnansweredRefused} {
		snd, _ := sketch.NewIBLT(sketch.IBLTCells(50))
		rx, _ := sketch.NewIBLT(sketch.IBLTCells(50))
		for i := range uint64(20) {
			snd.Insert(0x9e3779b97f4a7c15 * (i + 1))
			if i >= 3 {
				rx.Insert(0x9e3779b97f4a7c15 * (i + 1))
			}
		}
		mt := &interval.Matched{ID: 7, Outcome: results.OutcomeMatched,
			Sender:   &interval.SenderInterval{ID: 7, Sk: &interval.Sketches{Lost: snd}},
			Receiver: &interval.Sketches{Lost: rx},
			Flows:    interval.NewFlowTable(16, sketch.DefaultParams(), false)}
		mt.Lost = interval.PeelLost(mt)
		mt.Lost.Asked, mt.Lost.Unanswered = 3, why
		iv := &results.Interval{Sender: "a", Interval: 7, Outcome: results.OutcomeMatched,
			Flows: []results.FlowRecord{{Interval: 7, Key: k, Loss: results.Float(2.5), Packets: 19}}}
		applyLostFlows(iv, mt, buildLost(iv, mt, "a"), flowHash)
		if l := iv.LostList; l == nil || l.Complete || l.Reason != why {
			t.Errorf("%s: lost_list %+v, want incomplete with reason %q", why, l, why)
		}
		if f := iv.Flows[0]; f.LossExact || f.Loss == nil || *f.Loss != 2.5 {
			t.Errorf("%s: loss %v exact %v, want the estimate 2.5, not exact", why, f.Loss, f.LossExact)
		}
	}
}
