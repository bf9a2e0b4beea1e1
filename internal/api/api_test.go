package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
)

func f(v float64) *float64 { return &v }

func rec(sender string, id int64, src, dst string, proto uint8, packets, loss float64, delay *float64) results.FlowRecord {
	return results.FlowRecord{Interval: id, StartNS: id * 1e9, Sender: sender, Key: capture.MustParseFlowKey(src, dst, proto, 1000, 443),
		Packets: packets, Loss: &loss, DelayNS: delay}
}

// testStore: a/100 has F1 (1500 pkts, 400 µs, loss 2), F2 (10, no delay),
// F3 (300, 2 ms, loss 5); a/101 was voided (no records); b/100 has G1 (50, 1 ms).
func testStore() *Store {
	s := NewStore(10)
	s.Add(&results.Interval{Sender: "a", Interval: 100, StartNS: 100e9, Outcome: results.OutcomeMatched,
		Flows: []results.FlowRecord{
			rec("a", 100, "10.0.0.1", "192.0.2.7", 6, 1500, 2, f(400_000)),
			rec("a", 100, "10.0.1.5", "198.51.100.1", 17, 10, 0, nil),
			rec("a", 100, "2001:db8::1", "2001:db8::2", 6, 300, 5, f(2_000_000)),
		},
		Links:           []results.LinkRecord{{Interval: 100, Class: "all", Sent: 1810, Received: 1803, DelayNS: f(500_000)}},
		UsableCellRatio: 0.9, SketchBytes: 4096,
	})
	s.Add(&results.Interval{Sender: "a", Interval: 101, StartNS: 101e9, Outcome: results.OutcomeVoidedGap})
	s.Add(&results.Interval{Sender: "b", Interval: 100, StartNS: 100e9, Outcome: results.OutcomeMatched,
		Flows: []results.FlowRecord{rec("b", 100, "10.0.0.9", "192.0.2.7", 6, 50, 0, f(1_000_000))}})
	return s
}

func do(t *testing.T, h http.Handler, method, target string) (int, []byte) {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(method, target, nil))
	if ct := rr.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", target, ct)
	}
	return rr.Code, rr.Body.Bytes()
}

func TestFlows(t *testing.T) {
	h := testStore().Handler()
	tests := []struct {
		query     string
		wantSrc   []string
		wantTotal int
	}{
		{"", []string{"10.0.0.1", "2001:db8::1", "10.0.0.9", "10.0.1.5"}, 4},
		{"?interval=latest&sort=packets", []string{"10.0.0.1", "2001:db8::1", "10.0.0.9", "10.0.1.5"}, 4},
		{"?sender=a&sort=delay", []string{"2001:db8::1", "10.0.0.1", "10.0.1.5"}, 3},
		{"?sort=loss", []string{"2001:db8::1", "10.0.0.1", "10.0.1.5", "10.0.0.9"}, 4},
		{"?prefix=10.0.0.0/24", []string{"10.0.0.1", "10.0.0.9"}, 2},
		{"?prefix=198.51.100.0/24", []string{"10.0.1.5"}, 1}, // matches the destination
		{"?prefix=2001:db8::/32", []string{"2001:db8::1"}, 1},
		{"?prefix=10.0.0.9", []string{"10.0.0.9"}, 1},
		{"?min_packets=100", []string{"10.0.0.1", "2001:db8::1"}, 2},
		{"?limit=1", []string{"10.0.0.1"}, 4},
		{"?interval=100&sender=b", []string{"10.0.0.9"}, 1},
		{"?interval=101&sender=a", nil, 0}, // voided: stored, no flows
		{"?prefix=203.0.113.0/24", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			code, body := do(t, h, http.MethodGet, "/api/v1/flows"+tc.query)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
			var ans FlowsAnswer
			if err := json.Unmarshal(body, &ans); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, fl := range ans.Flows {
				got = append(got, fl.Key.SrcAddr().String())
			}
			if !slices.Equal(got, tc.wantSrc) || ans.Total != tc.wantTotal {
				t.Fatalf("flows %v total %d, want %v total %d", got, ans.Total, tc.wantSrc, tc.wantTotal)
			}
		})
	}
}

// The flows are served with exactly the JSON of the JSONL contract.
func TestFlowsJSONIsTheContract(t *testing.T) {
	s := testStore()
	code, body := do(t, s.Handler(), http.MethodGet, "/api/v1/flows?sender=a&sort=packets")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	var ans struct{ Flows []json.RawMessage }
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatal(err)
	}
	iv := s.snapshot("a")["a"][0]
	for i, want := range []int{0, 2, 1} { // by packets: F1, F3, F2
		line, err := results.MarshalLine(nil, &iv.Flows[want])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ans.Flows[i], bytes.TrimSpace(line)) {
			t.Fatalf("flow %d:\n got %s\nwant %s", i, ans.Flows[i], line)
		}
	}
	if !bytes.Contains(ans.Flows[2], []byte(`"delay_ns":null`)) {
		t.Fatalf("missing delay must be null: %s", ans.Flows[2])
	}
}

func TestBadParameters(t *testing.T) {
	h := testStore().Handler()
	tests := []struct {
		target    string
		code      int
		parameter string
	}{
		{"/api/v1/flows?interval=abc", 400, "interval"},
		{"/api/v1/flows?interval=999", 404, "interval"},
		{"/api/v1/flows?limit=0", 400, "limit"},
		{"/api/v1/flows?limit=x", 400, "limit"},
		{"/api/v1/flows?limit=2000000", 400, "limit"},
		{"/api/v1/flows?limit=1&limit=2", 400, "limit"},
		{"/api/v1/flows?min_packets=-1", 400, "min_packets"},
		{"/api/v1/flows?min_packets=NaN", 400, "min_packets"},
		{"/api/v1/flows?sort=rtt", 400, "sort"},
		{"/api/v1/flows?prefix=10.0.0.0/33", 400, "prefix"},
		{"/api/v1/flows?prefix=bogus", 400, "prefix"},
		{"/api/v1/flows?sortt=delay", 400, "sortt"},
		{"/api/v1/flows?sender=zzz", 404, "sender"},
		{"/api/v1/links?interval=-", 400, "interval"},
		{"/api/v1/links?limit=3", 400, "limit"},
		{"/api/v1/intervals?sender=zzz", 404, "sender"},
		{"/api/v1/intervals?interval=1", 400, "interval"},
		{"/api/v1/nothing", 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			code, body := do(t, h, http.MethodGet, tc.target)
			if code != tc.code {
				t.Fatalf("status %d, want %d: %s", code, tc.code, body)
			}
			var e apiError
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" || e.Parameter != tc.parameter {
				t.Fatalf("error body %s (%v), want one naming parameter %q", body, err, tc.parameter)
			}
		})
	}
	if code, _ := do(t, h, http.MethodPost, "/api/v1/flows"); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: status %d, want 405", code)
	}
}

func TestLinks(t *testing.T) {
	h := testStore().Handler()
	code, body := do(t, h, http.MethodGet, "/api/v1/links")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	var ans LinksAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatal(err)
	}
	if len(ans.Links) != 1 || ans.Links[0].Sender != "a" || ans.Links[0].Class != "all" || ans.Links[0].Sent != 1810 ||
		ans.Links[0].Received != 1803 || *ans.Links[0].DelayNS != 500_000 {
		t.Fatalf("links = %s", body)
	}
	if want := []IntervalRef{{"a", 100}, {"b", 100}}; !slices.Equal(ans.Intervals, want) {
		t.Fatalf("intervals = %v, want %v", ans.Intervals, want)
	}
}

func TestIntervals(t *testing.T) {
	h := testStore().Handler()
	code, body := do(t, h, http.MethodGet, "/api/v1/intervals")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	var ans IntervalsAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatal(err)
	}
	want := []IntervalSummary{
		{Sender: "a", Interval: 101, StartNS: 101e9, Outcome: results.OutcomeVoidedGap, UsableCellRatio: f(0)},
		{Sender: "a", Interval: 100, StartNS: 100e9, Outcome: results.OutcomeMatched, Flows: 3, Links: 1, UsableCellRatio: f(0.9), SketchBytes: 4096},
		{Sender: "b", Interval: 100, StartNS: 100e9, Outcome: results.OutcomeMatched, Flows: 1, UsableCellRatio: f(0)},
	}
	if !reflect.DeepEqual(ans.Intervals, want) {
		t.Fatalf("intervals =\n%+v\nwant\n%+v", ans.Intervals, want)
	}
}

func TestStoreKeepsLastN(t *testing.T) {
	tests := []struct {
		name string
		add  []int64
		want []int64
	}{
		{"in order", []int64{1, 2, 3, 4, 5}, []int64{3, 4, 5}},
		{"out of order", []int64{5, 3, 4, 1, 2}, []int64{3, 4, 5}},
		{"resend replaces", []int64{1, 2, 2, 3}, []int64{1, 2, 3}},
		{"gap", []int64{10, 20, 15}, []int64{10, 15, 20}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(3)
			for i, id := range tc.add {
				s.Add(&results.Interval{Sender: "a", Interval: id, Outcome: results.Outcome(rune('a' + i))})
			}
			var got []int64
			for _, iv := range s.snapshot("a")["a"] {
				got = append(got, iv.Interval)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("kept %v, want %v", got, tc.want)
			}
		})
	}
	s := NewStore(3)
	s.Add(&results.Interval{Sender: "a", Interval: 2, Outcome: "first"})
	s.Add(&results.Interval{Sender: "a", Interval: 2, Outcome: "resent"})
	if got := s.snapshot("a")["a"]; len(got) != 1 || got[0].Outcome != "resent" {
		t.Fatalf("resend did not replace: %+v", got)
	}
}

// FuzzFlowsQuery: any query string gets a JSON answer with 200, 400 or 404.
func FuzzFlowsQuery(f *testing.F) {
	for _, q := range []string{"", "interval=latest&sort=delay", "prefix=10.0.0.0/8&min_packets=1e3&limit=5",
		"interval=100&sender=b", "limit=%zz", "prefix=::ffff:10.0.0.1/128", "min_packets=Inf"} {
		f.Add(q)
	}
	h := testStore().Handler()
	f.Fuzz(func(t *testing.T, q string) {
		for _, ep := range []string{"/api/v1/flows", "/api/v1/links", "/api/v1/intervals"} {
			rr := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.URL.Path, req.URL.RawQuery = ep, q
			h.ServeHTTP(rr, req)
			switch rr.Code {
			case 200, 400, 404:
			default:
				t.Fatalf("%s?%s: status %d", ep, q, rr.Code)
			}
			if !json.Valid(rr.Body.Bytes()) {
				t.Fatalf("%s?%s: invalid JSON %q", ep, q, rr.Body.Bytes())
			}
		}
	})
}

func BenchmarkFlows100k(b *testing.B) {
	s := NewStore(2)
	iv := &results.Interval{Sender: "a", Interval: 1, Outcome: results.OutcomeMatched, Flows: make([]results.FlowRecord, 100_000)}
	for i := range iv.Flows {
		iv.Flows[i] = rec("a", 1, "10.0."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255), "192.0.2.1", 6, float64(i%977), 0, f(float64(i)))
		iv.Flows[i].Key.SPort = uint16(i)
	}
	s.Add(iv)
	h := s.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/api/v1/flows?sort=delay&limit=100", nil))
		if rr.Code != 200 {
			b.Fatal(rr.Code)
		}
	}
}
