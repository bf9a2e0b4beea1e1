package api

import (
	"bytes"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/jsonl"
	"github.com/lds-net/lds/internal/results"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenStore holds records that exercise every field of the results
// contract: IPv4 and IPv6, null and present estimates, every optional
// field, a sender filled in from the interval, and ties in packets, loss
// and delay (the answers order ties by flow key).
func goldenStore() *Store {
	all := results.FlowRecord{Interval: 7, StartNS: 7e9, Key: capture.MustParseFlowKey("2001:db8::10", "2001:db8:1::1", 17, 53, 5353),
		DelayNS: f(1234.5), StddevNS: f(1e-7), Loss: nil, Packets: 40, Samples: 39.25, CI95NS: f(88), Sender: "edge-a",
		Bytes: f(52000), Estimator: "decode", Partial: true, Unsynced: true, ErrorNS: f(250), Spike: true,
		Status: results.StatusBeyondWindow, LossPoint: f(1), P50NS: f(1200), P90NS: f(1500), P99NS: f(2e21),
		DelaySamples: 30, StddevFrom: "samples", SampledLost: 2, LossBound: f(4.5), DelayFrom: results.DelayFromBoth, LossSpike: true}
	flows := []results.FlowRecord{
		all,
		{Interval: 7, StartNS: 7e9, Key: capture.MustParseFlowKey("10.0.0.9", "192.0.2.1", 6, 40000, 443),
			DelayNS: f(400_000), StddevNS: f(12.25), Loss: f(0), Packets: 40, Samples: 40, CI95NS: f(3.5), Estimator: "paper", DelayFrom: results.DelayFromSamples},
		{Interval: 7, StartNS: 7e9, Key: capture.MustParseFlowKey("10.0.0.10", "192.0.2.1", 6, 40000, 443),
			DelayNS: f(400_000), Packets: 40, Loss: f(1.5), Samples: 12, Estimator: "paper", StddevFrom: "sketch"},
		{Interval: 7, StartNS: 7e9, Key: capture.MustParseFlowKey("10.0.0.10", "192.0.2.1", 6, 40000, 80),
			Packets: 3, Loss: f(0), Estimator: "paper"},
		{Interval: 7, StartNS: 7e9, Key: capture.MustParseFlowKey("10.0.0.10", "192.0.2.1", 1, 0x0800, 77),
			DelayNS: f(5), Packets: 40, Loss: f(0.25), Samples: 1, Estimator: "decode", LossPoint: f(0)},
		{Interval: 7, StartNS: 7e9, Key: capture.MustParseFlowKey("2001:db8::9", "2001:db8::1", 6, 1, 2),
			Packets: 1e-7, Loss: f(3)},
	}
	s := NewStore(10)
	s.Add(&results.Interval{Sender: "edge-a", Interval: 7, StartNS: 7e9, Outcome: results.OutcomeMatched, Flows: flows,
		Links: []results.LinkRecord{{Interval: 7, StartNS: 7e9, Class: "all", Sent: 166, Received: 160, LossRatio: f(6.0 / 166),
			DelayNS: f(300_000), StddevNS: f(9), Samples: 100, CI95NS: f(2), P50NS: f(290_000), DelaySamples: 50, DelayFrom: results.DelayFromSketch}},
		UsableCellRatio: 0.875, SenderDrops: 1, ReceiverDrops: 2, SketchBytes: 8192})
	s.Add(&results.Interval{Sender: "edge-b", Interval: 6, StartNS: 6e9, Outcome: results.OutcomeVoidedGap})
	s.Add(&results.Interval{Sender: "edge-b", Interval: 7, StartNS: 7e9, Outcome: results.OutcomeMatched,
		Flows: []results.FlowRecord{{Interval: 7, StartNS: 7e9, Key: capture.MustParseFlowKey("10.0.0.9", "192.0.2.1", 6, 40000, 443),
			DelayNS: f(400_000), Loss: f(0), Packets: 40, Samples: 40}}})
	// A receiver's ring dropped packets of interval 8: loss withheld.
	drops := &results.Interval{Sender: "edge-b", Interval: 8, StartNS: 8e9, Outcome: results.OutcomeMatched, ReceiverDrops: 312,
		Flows: []results.FlowRecord{{Interval: 8, StartNS: 8e9, Key: capture.MustParseFlowKey("10.0.0.9", "192.0.2.1", 6, 40000, 443),
			DelayNS: f(410_000), Loss: f(37), LossBound: f(40), Packets: 40, Samples: 3}},
		Links: []results.LinkRecord{{Interval: 8, StartNS: 8e9, Class: "all", Sent: 40, Received: 3, LossRatio: f(37.0 / 40)}}}
	drops.FlagCaptureDrops(results.CaptureDrops{Receiver: 312})
	s.Add(drops)
	return s
}

// checkGolden compares got with testdata/name (go test -update rewrites it).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n got %s\nwant %s", name, got, want)
	}
}

// TestGoldenAPI holds the API's answers byte for byte.
func TestGoldenAPI(t *testing.T) {
	h := goldenStore().Handler()
	var out bytes.Buffer
	for _, q := range []string{"/api/v1/flows", "/api/v1/flows?sort=delay", "/api/v1/flows?sort=loss",
		"/api/v1/flows?sender=edge-a&prefix=10.0.0.8/29&limit=2", "/api/v1/flows?prefix=2001:db8::/48&min_packets=1",
		"/api/v1/links", "/api/v1/intervals"} {
		code, body := do(t, h, http.MethodGet, q)
		if code != http.StatusOK {
			t.Fatalf("%s: status %d: %s", q, code, body)
		}
		out.WriteString("GET " + q + "\n")
		out.Write(body)
	}
	checkGolden(t, "api.golden", out.Bytes())
}

// TestGoldenJSONL holds the results file's lines byte for byte.
func TestGoldenJSONL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.jsonl")
	w, err := jsonl.Open(path, jsonl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap := goldenStore().snapshot("")
	for _, sender := range []string{"edge-a", "edge-b"} {
		for _, iv := range snap[sender] {
			if err := w.Write(iv); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "results.jsonl.golden", b)
}
