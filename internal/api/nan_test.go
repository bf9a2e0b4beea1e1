package api

import (
	"encoding/json"
	"math"
	"net/http"
	"testing"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sketch"
)

// TestIdleIntervalsSerialize: an idle interval (no packet at either end)
// has a usable-cell ratio without a denominator, which the sketch reports
// as NaN. Every answer that carries it, before and after busy intervals
// and for every sender filter, is 200 with valid JSON and null for it.
func TestIdleIntervalsSerialize(t *testing.T) {
	p := sketch.DefaultParams()
	empty, err := sketch.NewLDS(p)
	if err != nil {
		t.Fatal(err)
	}
	idle := sketch.UsableCellRatio(empty, empty)
	if !math.IsNaN(idle) {
		t.Fatalf("the usable-cell ratio of two empty sketches is %v: the case this test reproduces is gone", idle)
	}
	s := NewStore(16)
	pattern := []bool{true, false, true, true, false, true} // idle or busy, in interval order
	for i, isIdle := range pattern {
		iv := &results.Interval{Sender: "a", Interval: int64(200 + i), StartNS: int64(200+i) * 1e9, Outcome: results.OutcomeMatched,
			UsableCellRatio: 0.75}
		if isIdle {
			iv.UsableCellRatio = idle
		} else {
			iv.Flows = []results.FlowRecord{rec("a", int64(200+i), "10.0.0.1", "192.0.2.7", 6, 10, 0, f(1000))}
		}
		s.Add(iv)
	}
	s.Add(&results.Interval{Sender: "b", Interval: 200, StartNS: 200e9, Outcome: results.OutcomeNoSender, UsableCellRatio: math.Inf(1)})
	h := s.Handler()
	for _, target := range []string{"/api/v1/intervals", "/api/v1/intervals?sender=a", "/api/v1/intervals?sender=b",
		"/api/v1/flows", "/api/v1/links", "/api/v1/flows?interval=203", "/api/v1/flows?interval=204"} {
		code, body := do(t, h, http.MethodGet, target)
		if code != http.StatusOK || !json.Valid(body) {
			t.Fatalf("%s: %d %s", target, code, body)
		}
	}
	_, body := do(t, h, http.MethodGet, "/api/v1/intervals?sender=a")
	var ans struct {
		Intervals []struct {
			Interval int64            `json:"interval"`
			Ratio    *json.RawMessage `json:"usable_cell_ratio"`
		} `json:"intervals"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatal(err)
	}
	if len(ans.Intervals) != len(pattern) {
		t.Fatalf("%d intervals, want %d", len(ans.Intervals), len(pattern))
	}
	for _, iv := range ans.Intervals {
		isIdle := pattern[iv.Interval-200]
		switch {
		case isIdle && iv.Ratio != nil:
			t.Errorf("idle interval %d: usable_cell_ratio %s, want null", iv.Interval, *iv.Ratio)
		case !isIdle && (iv.Ratio == nil || string(*iv.Ratio) != "0.75"):
			t.Errorf("busy interval %d: usable_cell_ratio %v, want 0.75", iv.Interval, iv.Ratio)
		}
	}
}
