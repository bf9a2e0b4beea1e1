package receiver

import (
	"log/slog"
	"math"
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
)

// TestPublishFlagsHeldPredecessor: an interval held back for its
// successor's check (cells short of packets) withholds its loss as
// capture_drops when the successor's close found capture drops at either
// end (a packet slower than the hold window, or one racing the read, may
// be among them); without drops it publishes its loss.
func TestPublishFlagsHeldPredecessor(t *testing.T) {
	tests := []struct {
		name             string
		senderDrops      uint64 // read when interval 11 closed at the sender
		rxDrops          uint64 // read when interval 11 was sealed at the receiver
		wantHeldFlagged  bool
		wantCaptureDrops results.CaptureDrops
	}{
		{"no drops", 0, 0, false, results.CaptureDrops{}},
		{"receiver drops", 0, 4, true, results.CaptureDrops{Receiver: 4}},
		{"sender drops", 7, 0, true, results.CaptureDrops{Sender: 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(config.DefaultReceiver(), Options{Replay: true}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			out := make(chan *results.Interval, 4)
			e := r.entries[0].emit
			e.plan, e.out = interval.NewWindowPlan(r.params, 1), out
			job := func(id int64, deficit int, meta interval.SenderMeta, rxDrops uint64) *estJob {
				loss := 2.0
				iv := &results.Interval{Sender: "a", Interval: id, Outcome: results.OutcomeMatched,
					Flows: []results.FlowRecord{{Interval: id, Key: capture.MustParseFlowKey("10.0.0.1", "10.0.0.2", 17, 1, 2), Loss: &loss, Packets: 50}}}
				return &estJob{sender: "a", iv: iv, chk: interval.Assignment{DeficitCells: deficit, Delay: math.NaN()},
					mt: &interval.Matched{ID: id, Outcome: results.OutcomeMatched, Meta: meta, ReceiverDrops: rxDrops}}
			}
			e.publishJob(job(10, 3, interval.SenderMeta{}, 0)) // cells short of packets: held
			if len(out) != 0 {
				t.Fatal("an interval with cells short of packets was published before its successor's check")
			}
			e.publishJob(job(11, 0, interval.SenderMeta{KernelDrops: tc.senderDrops}, tc.rxDrops))
			held := <-out
			next := <-out
			if held.Interval != 10 || next.Interval != 11 {
				t.Fatalf("published %d then %d, want 10 then 11", held.Interval, next.Interval)
			}
			f := held.Flows[0]
			if tc.wantHeldFlagged {
				if f.Status != results.StatusCaptureDrops || f.Loss != nil || held.CaptureDrops == nil || *held.CaptureDrops != tc.wantCaptureDrops {
					t.Errorf("held interval: status %q loss %v capture_drops %+v, want capture_drops, null, %+v", f.Status, f.Loss, held.CaptureDrops, tc.wantCaptureDrops)
				}
			} else if f.Status != "" || f.Loss == nil || held.CaptureDrops != nil {
				t.Errorf("held interval without drops: status %q loss %v capture_drops %+v, want its loss published", f.Status, f.Loss, held.CaptureDrops)
			}
		})
	}
}
