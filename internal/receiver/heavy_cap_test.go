package receiver_test

import (
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sketch"
)

// TestHeavyKeysCannotPassMaxFlows: a sender that lists more heavy keys
// than sketch.heavy, or enough to take the candidates past
// sketch.max_flows, gets no more estimated than the configuration allows.
func TestHeavyKeysCannotPassMaxFlows(t *testing.T) {
	cfg := config.DefaultReceiver()
	p := interval.Params{T: int64(cfg.Interval), MaxDelay: int64(cfg.MaxDelay), Guard: int64(cfg.Guard),
		Sketch: cfg.SketchParams(), LDA: cfg.LDAParams(), Classes: 1, FlowCap: 100}
	key := func(i int) capture.FlowKey {
		k := capture.FlowKey{SPort: uint16(i), DPort: uint16(i >> 16), Proto: 17}
		k.Src[0], k.Dst[0] = 10, 192
		return k
	}
	hash := func(k capture.FlowKey) uint64 { return uint64(k.SPort)<<16 | uint64(k.DPort) | 1<<40 }
	for _, tc := range []struct {
		name                  string
		table, sent           int // flows in the receiver's table, heavy keys the sender sent
		maxFlows, heavy, want int
	}{
		{"within both caps", 10, 5, 100, 1000, 15},
		{"more keys than sketch.heavy", 10, 500, 1000, 20, 30},
		{"keys would pass sketch.max_flows", 90, 50, 100, 1000, 100},
		{"table full", 100, 50, 100, 1000, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rx, err := interval.NewSketches(p)
			if err != nil {
				t.Fatal(err)
			}
			snd, _ := interval.NewSketches(p)
			ft := interval.NewFlowTable(tc.maxFlows, p.Sketch, false)
			for i := range tc.table {
				ft.Flows = append(ft.Flows, interval.FlowStat{Key: key(i), FlowHash: hash(key(i)), Packets: 1})
			}
			si := &interval.SenderInterval{ID: 1, Sk: snd}
			for i := range tc.sent {
				si.Heavy = append(si.Heavy, key(1000+i))
			}
			mt := &interval.Matched{ID: 1, Outcome: results.OutcomeMatched, Sender: si, Receiver: rx, Flows: ft}
			est := receiver.Estimation{Estimator: sketch.EstimatorPaper, T: p.T, Classes: []string{"default"}, FlowHash: hash,
				Workers: 1, MaxFlows: tc.maxFlows, Heavy: tc.heavy}
			iv, err := est.Estimate("a", mt, receiver.Clock{})
			if err != nil {
				t.Fatal(err)
			}
			if len(iv.Flows) != tc.want {
				t.Fatalf("%d flow records, want %d (table %d, heavy keys sent %d, max_flows %d, heavy %d)",
					len(iv.Flows), tc.want, tc.table, tc.sent, tc.maxFlows, tc.heavy)
			}
		})
	}
}
