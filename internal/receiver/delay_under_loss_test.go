package receiver

import (
	"math"
	"testing"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
)

// TestCombineDelay: where the record's mean delay comes from, by hand.
func TestCombineDelay(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	samples := &sample.FlowDist{Delays: []float64{90, 95, 100, 105, 110}} // mean 100, ci95 2.776·√(62.5/5)
	ci := 2.776 * math.Sqrt(62.5/5)
	tests := []struct {
		name              string
		rec               results.FlowRecord
		d                 *sample.FlowDist
		wantDelay, wantCI float64 // NaN: null
		wantFrom          string
		status            results.Status
	}{
		{"no sketch mean: samples", results.FlowRecord{Status: results.StatusNoUsableCell, Samples: 0}, samples, 100, ci, results.DelayFromSamples, ""},
		{"not identified: samples", results.FlowRecord{Status: results.StatusNotIdentified, Samples: 3}, samples, 100, ci, results.DelayFromSamples, ""},
		{"too few samples", results.FlowRecord{Status: results.StatusNoUsableCell}, &sample.FlowDist{Delays: []float64{1, 2, 3, 4}}, math.NaN(), math.NaN(), "", results.StatusNoUsableCell},
		{"withheld for the window: kept", results.FlowRecord{Status: results.StatusBeyondWindow}, samples, math.NaN(), math.NaN(), "", results.StatusBeyondWindow},
		{"exact sketch mean wins", results.FlowRecord{DelayNS: f(50), CI95NS: f(0), Samples: 2, DelayFrom: "sketch"}, samples, 50, 0, results.DelayFromSketch, ""},
		{"sketch over more packets wins", results.FlowRecord{DelayNS: f(50), CI95NS: f(10), Samples: 400, DelayFrom: "sketch"}, samples, 50, 10, results.DelayFromSketch, ""},
		// Equal variances: the midpoint, ci95 / √2.
		{"sketch over fewer packets: both", results.FlowRecord{DelayNS: f(50), CI95NS: f(ci), Samples: 2, DelayFrom: "sketch"}, samples, 75, ci / math.Sqrt2, results.DelayFromBoth, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rec
			combineDelay(&r, tc.d.MeanDelay())
			near := func(p *float64, want float64) bool {
				if math.IsNaN(want) {
					return p == nil
				}
				return p != nil && math.Abs(*p-want) < 1e-9*math.Max(1, want)
			}
			if !near(r.DelayNS, tc.wantDelay) || !near(r.CI95NS, tc.wantCI) || r.DelayFrom != tc.wantFrom || r.Status != tc.status {
				t.Fatalf("delay %v ci95 %v from %q status %q; want %v ± %v from %q status %q",
					ptr(r.DelayNS), ptr(r.CI95NS), r.DelayFrom, r.Status, tc.wantDelay, tc.wantCI, tc.wantFrom, tc.status)
			}
		})
	}
}

func ptr(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}
