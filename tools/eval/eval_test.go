package eval

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/gen"
	"github.com/lds-net/lds/tools/truth"
)

func f64(v float64) *float64 { return &v }

// truthRecord is truth.Record where a variable named truth hides the package.
type truthRecord = truth.Record

// tr makes a truth record for flow i of interval iv.
func tr(iv int64, i int, sent, recv int64, delay, std float64) truth.Record {
	r := truth.Record{Interval: iv, StartNS: iv * 1e9, Src: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Dst: "192.0.2.1",
		SPort: uint16(1000 + i), DPort: 443, Proto: 6, Sent: sent, Received: recv, Lost: sent - recv}
	if recv > 0 {
		r.DelayNS, r.StddevNS = f64(delay), f64(std)
	}
	return r
}

// est makes a result for truth record t.
func est(t truth.Record, delay, std *float64, loss float64) results.FlowRecord {
	k, err := t.Key()
	if err != nil {
		panic(err)
	}
	return results.FlowRecord{Interval: t.Interval, StartNS: t.StartNS, Key: k, DelayNS: delay, StddevNS: std, Loss: &loss, Packets: float64(t.Sent)}
}

func binOf(t *testing.T, rep Report, run, bin string) BinStats {
	t.Helper()
	for _, r := range rep.Runs {
		if r.Label != run {
			continue
		}
		for i, b := range rep.Bins {
			if b.Name == bin {
				return r.Bins[i]
			}
		}
	}
	t.Fatalf("no run %q bin %q", run, bin)
	return BinStats{}
}

func near(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b))
}

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		x    []float64
		p    float64
		want float64
	}{
		{nil, 0.5, math.NaN()},
		{[]float64{7}, 0.95, 7},
		{[]float64{1, 2}, 0.5, 1.5},
		{[]float64{1, 2, 3, 4, 5}, 0.5, 3},
		{[]float64{1, 2, 3, 4, 5}, 0.95, 4.8}, // h = 3.8
		{[]float64{0, 10}, 0.95, 9.5},
		{[]float64{1, 2, 3}, 1, 3},
		{[]float64{1, 2, 3}, 0, 1},
	} {
		if got := Quantile(tc.x, tc.p); !near(got, tc.want) {
			t.Errorf("Quantile(%v, %v) = %v, want %v", tc.x, tc.p, got, tc.want)
		}
	}
}

// TestEvaluateKnownErrors: 20 flows of 1500 packets with relative errors
// 0.00, 0.01, ..., 0.19 (median (0.09+0.10)/2 = 0.095; p95: h = 0.95*19 =
// 18.05, 0.18 + 0.05*0.01 = 0.1805), plus flows in the other bins with
// chosen coverage and loss outcomes.
func TestEvaluateKnownErrors(t *testing.T) {
	var truth []truth.Record
	var run []results.FlowRecord
	for i := range 20 {
		tt := tr(5, i, 1500, 1500, 1000, 200)
		truth = append(truth, tt)
		// Stddev error 0.5 for every flow.
		run = append(run, est(tt, f64(1000*(1+float64(i)/100)), f64(300), 0))
	}
	// 100-999: 4 flows, 3 estimated with errors 0.1, 0.2, 0.3; one without a
	// delay (null) but with a record; loss: flow 20 truly loses 5, the
	// estimate says 5 (found); flow 21 loses 2, estimate 0.2 (missed).
	mid := []truthRecord{tr(5, 20, 500, 495, 2000, 0), tr(5, 21, 500, 498, 2000, 0), tr(5, 22, 500, 500, 2000, 0), tr(5, 23, 500, 500, 2000, 0)}
	truth = append(truth, mid...)
	run = append(run, est(mid[0], f64(2200), nil, 5), est(mid[1], f64(2400), nil, 0.2), est(mid[2], f64(1400), nil, 0), est(mid[3], nil, nil, 1))
	// 1-9: 2 flows, one fully lost (no true delay), one not reported at all.
	small := []truthRecord{tr(5, 30, 3, 0, 0, 0), tr(5, 31, 3, 3, 500, 10)}
	truth = append(truth, small...)
	run = append(run, est(small[0], nil, nil, 3))
	// Bookkeeping: one record for a flow that does not exist, one duplicate.
	ghost := tr(6, 99, 1, 1, 1, 0)
	run = append(run, est(ghost, f64(1), nil, 0), est(truth[0], f64(5), nil, 0))

	rep, err := Evaluate(truth, map[string][]results.FlowRecord{"lds": run})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Label != "lds" || rep.Runs[1].Label != BaselineLabel {
		t.Fatalf("runs %+v", rep.Runs)
	}
	r := rep.Runs[0]
	if r.Records != len(run) || r.Matched != 20+4+1 || r.Spurious != 1 || r.Duplicates != 1 {
		t.Errorf("bookkeeping: %+v", r)
	}
	for _, tc := range []struct {
		bin                                  string
		flows, delayFlows, covered           int
		coverage, median, p95, medStd        float64
		reported, lossFlows, falseL, missedL int
		meanAbsLoss                          float64
	}{
		{">=1000", 20, 20, 20, 1, 0.095, 0.1805, 0.5, 20, 0, 0, 0, 0},
		// errors 0.1, 0.2, 0.3: median 0.2, p95 h=1.9 -> 0.2+0.9*0.1 = 0.29.
		// |loss err|: 0, 1.8, 0, 1 -> mean 0.7; flow 23 reports 1 without loss.
		{"100-999", 4, 4, 3, 0.75, 0.2, 0.29, math.NaN(), 4, 2, 1, 1, 0.7},
		{"10-99", 0, 0, 0, math.NaN(), math.NaN(), math.NaN(), math.NaN(), 0, 0, 0, 0, math.NaN()},
		// flow 30: no true delay, loss 3 reported exactly; flow 31: no record.
		{"1-9", 2, 1, 0, 0, math.NaN(), math.NaN(), math.NaN(), 1, 1, 0, 0, 0},
		// 23 errors: 0..0.19, 0.1, 0.2, 0.3 sorted; median = x[11] = 0.1;
		// p95: h = 0.95*22 = 20.9, x[20] = 0.19, x[21] = 0.2 -> 0.199.
		{"all", 26, 25, 23, 23.0 / 25, 0.1, 0.199, 0.5, 25, 3, 1, 1, 2.8 / 25},
	} {
		s := binOf(t, rep, "lds", tc.bin)
		if s.Flows != tc.flows || s.DelayFlows != tc.delayFlows || s.Covered != tc.covered {
			t.Errorf("%s: flows %d/%d/%d, want %d/%d/%d", tc.bin, s.Flows, s.DelayFlows, s.Covered, tc.flows, tc.delayFlows, tc.covered)
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{{"coverage", s.Coverage, tc.coverage}, {"median", s.MedianRelDelay, tc.median}, {"p95", s.P95RelDelay, tc.p95},
			{"median stddev", s.MedianRelStddev, tc.medStd}, {"mean |loss err|", s.MeanAbsLossErr, tc.meanAbsLoss}} {
			if !near(c.got, c.want) {
				t.Errorf("%s: %s = %v, want %v", tc.bin, c.name, c.got, c.want)
			}
		}
		if s.Reported != tc.reported || s.LossFlows != tc.lossFlows || s.FalseLoss != tc.falseL || s.MissedLoss != tc.missedL {
			t.Errorf("%s: loss reported %d with-loss %d false %d missed %d, want %d %d %d %d", tc.bin,
				s.Reported, s.LossFlows, s.FalseLoss, s.MissedLoss, tc.reported, tc.lossFlows, tc.falseL, tc.missedL)
		}
	}
}

// TestGlobalAverage: two intervals. Interval 1: flow A 2 packets at 100 ns,
// flow B 2 packets at 300 ns -> all packets: mean 200, population stddev
// 100. Interval 2: flow A alone, 4 packets mean 50, stddev 5, 1 lost of 5.
func TestGlobalAverage(t *testing.T) {
	truth := []truth.Record{tr(1, 0, 2, 2, 100, 0), tr(1, 1, 2, 2, 300, 0), tr(2, 0, 5, 4, 50, 5)}
	base := GlobalAverage(truth)
	want := []struct{ delay, std, loss float64 }{{200, 100, 0}, {200, 100, 0}, {50, 5, 1}}
	for i, w := range want {
		b := base[i]
		if b.DelayNS == nil || !near(*b.DelayNS, w.delay) || b.StddevNS == nil || !near(*b.StddevNS, w.std) || b.Loss == nil || !near(*b.Loss, w.loss) {
			t.Errorf("flow %d: baseline %v/%v/%v, want %+v", i, b.DelayNS, b.StddevNS, b.Loss, w)
		}
	}
	rep, err := Evaluate(truth, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := binOf(t, rep, BaselineLabel, "all")
	// Relative errors: 1 (A, iv 1), 1/3 (B), 0 (A, iv 2): median 1/3.
	if s.Covered != 3 || !near(s.MedianRelDelay, 1.0/3) || !near(s.P95RelDelay, 1.0/3+0.9*(2.0/3)) {
		t.Errorf("baseline: covered %d median %v p95 %v", s.Covered, s.MedianRelDelay, s.P95RelDelay)
	}
}

func TestEvaluateRejectsDuplicateTruth(t *testing.T) {
	truth := []truth.Record{tr(1, 0, 1, 1, 1, 0), tr(1, 0, 1, 1, 1, 0)}
	if _, err := Evaluate(truth, nil); err == nil {
		t.Fatal("duplicate truth accepted")
	}
}

func TestReadResults(t *testing.T) {
	in := `{"interval": 1763000000, "start_ns": 1763000000000000000, "src": "2001:db8::1", "dst": "2001:db8::7", "sport": 51000, "dport": 443, "proto": 6, "delay_ns": 412345.5, "stddev_ns": null, "loss": 2, "packets": 1520, "samples": 1498, "ci95_ns": null}

{"interval": 1763000001, "start_ns": 1763000001000000000, "src": "10.0.0.2", "dst": "192.0.2.7", "sport": 2048, "dport": 77, "proto": 1, "delay_ns": null, "stddev_ns": null, "loss": 0, "packets": 3, "samples": 0, "ci95_ns": null, "estimator": "decode"}
`
	recs, err := ReadResults(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].DelayNS == nil || *recs[0].DelayNS != 412345.5 || recs[0].StddevNS != nil ||
		recs[1].DelayNS != nil || recs[1].Key.Proto != 1 || recs[0].LossOr(0) != 2 || recs[0].Key.SrcAddr().String() != "2001:db8::1" {
		t.Fatalf("got %+v", recs)
	}
	for _, bad := range []string{"{", `{"interval": "x"}`, `{"interval": 1}`, `{"src": "10.0.0.1", "dst": "2001:db8::7"}`, `{"src": "10.0.0.1", "dst": "x"}`} {
		if _, err := ReadResults(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
}

func FuzzReadResults(f *testing.F) {
	f.Add([]byte(`{"interval":1,"src":"10.0.0.1","dst":"10.0.0.2","sport":1,"dport":2,"proto":17,"delay_ns":5}` + "\n"))
	f.Add([]byte("\n\n{}"))
	f.Add([]byte(`{"interval":1,"src":"10.0.0.1","dst":"10.0.0.2","proto":6,"loss":null,"status":"capture_drops"}` + "\n" +
		`{"interval":1,"src":"10.0.0.3","dst":"10.0.0.2","proto":6,"loss":3,"packets":10}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := ReadResults(bytes.NewReader(b))
		if err != nil {
			return
		}
		// Whatever parses must evaluate without panicking.
		if _, err := Evaluate(nil, map[string][]results.FlowRecord{"x": recs}); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzReadTruth(f *testing.F) {
	f.Add([]byte(`{"interval":1,"start_ns":1,"src":"10.0.0.1","dst":"10.0.0.2","sport":1,"dport":2,"proto":17,"sent":3,"received":2,"lost":1,"delay_ns":5,"stddev_ns":1}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		truth, err := ReadTruth(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, r := range truth {
			if r.Lost != r.Sent-r.Received || r.Received > r.Sent {
				t.Fatalf("inconsistent record accepted: %+v", r)
			}
		}
		_, _ = Evaluate(truth, nil) // bad addresses are an error, never a panic
	})
}

// TestEndToEnd generates the demo scenario, evaluates a perfect estimator
// (the truth itself), one that is off by exactly +2 %, and one that knows
// nothing about small flows, and writes the report and plots.
func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	out := gen.Outputs{SenderPcap: filepath.Join(dir, "a.pcap"), ReceiverPcap: filepath.Join(dir, "b.pcap"), Truth: filepath.Join(dir, "truth.jsonl")}
	if _, err := gen.Generate(context.Background(), gen.DefaultScenario(), out, nil); err != nil {
		t.Fatal(err)
	}
	truth, err := ReadTruthFile(out.Truth)
	if err != nil {
		t.Fatal(err)
	}
	var perfect, biased, bigOnly []results.FlowRecord
	for _, tt := range truth {
		perfect = append(perfect, est(tt, tt.DelayNS, tt.StddevNS, float64(tt.Lost)))
		var d *float64
		if tt.DelayNS != nil {
			d = f64(*tt.DelayNS * 1.02)
		}
		biased = append(biased, est(tt, d, nil, 0))
		if tt.Sent >= 100 {
			bigOnly = append(bigOnly, est(tt, tt.DelayNS, nil, 0))
		}
	}
	// Round-trip one run through the JSONL contract.
	var buf bytes.Buffer
	for i := range perfect {
		b, err := results.MarshalLine(nil, &perfect[i])
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
	}
	perfect, err = ReadResults(&buf)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Evaluate(truth, map[string][]results.FlowRecord{"perfect": perfect, "biased": biased, "big-only": bigOnly})
	if err != nil {
		t.Fatal(err)
	}
	all := binOf(t, rep, "perfect", "all")
	if all.Coverage != 1 || all.MedianRelDelay != 0 || all.P95RelDelay != 0 || all.FalseLoss != 0 || all.MissedLoss != 0 || all.MeanAbsLossErr != 0 {
		t.Errorf("perfect run: %+v", all)
	}
	if all.LossFlows == 0 {
		t.Error("demo truth has no lossy flow")
	}
	b := binOf(t, rep, "biased", "all")
	if !near(b.MedianRelDelay, 0.02) || !near(b.P95RelDelay, 0.02) || b.MissedLoss != all.LossFlows {
		t.Errorf("biased run: median %v p95 %v missed %d of %d", b.MedianRelDelay, b.P95RelDelay, b.MissedLoss, all.LossFlows)
	}
	small := binOf(t, rep, "big-only", "1-9")
	if small.Covered != 0 || small.DelayFlows == 0 || binOf(t, rep, "big-only", ">=100").Coverage != 1 {
		t.Errorf("big-only run: small bin %+v", small)
	}
	if g := binOf(t, rep, BaselineLabel, "all"); !(g.MedianRelDelay > 0.02) {
		t.Errorf("global average unexpectedly good on a bimodal/ECMP scenario: median %v", g.MedianRelDelay)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| all | perfect | ", "| >=1000 | biased |", "| big-only |", BaselineLabel, "## Loss"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	files, err := WritePlots(dir, rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("only %d plots: %v", len(files), files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 1000 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG plot (%d bytes)", f, len(b))
		}
	}
	if os.Getenv("LDS_EVAL_KEEP") != "" {
		_ = os.WriteFile(filepath.Join(os.Getenv("LDS_EVAL_KEEP"), "report.md"), md.Bytes(), 0o644)
		for _, f := range files {
			b, _ := os.ReadFile(f)
			_ = os.WriteFile(filepath.Join(os.Getenv("LDS_EVAL_KEEP"), filepath.Base(f)), b, 0o644)
		}
	}
}
