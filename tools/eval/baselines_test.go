package eval

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/gen"
	"github.com/lds-net/lds/tools/truth"
)

// slicePackets turns a send-ordered slice into a Packets iterator.
func slicePackets(ps []PacketDelay) Packets {
	return func(yield func(*PacketDelay) bool) error {
		for i := range ps {
			if !yield(&ps[i]) {
				return nil
			}
		}
		return nil
	}
}

var (
	flowX = capture.MustParseFlowKey("10.0.0.1", "192.0.2.1", 6, 1000, 443)
	flowY = capture.MustParseFlowKey("2001:db8::1", "2001:db8::2", 17, 53, 5353)
)

func meanStd(v []float64) (float64, float64) {
	var m float64
	for _, x := range v {
		m += x
	}
	m /= float64(len(v))
	var s float64
	for _, x := range v {
		s += (x - m) * (x - m)
	}
	return m, math.Sqrt(s / float64(len(v)))
}

func recFor(t *testing.T, recs []results.FlowRecord, iv int64, k capture.FlowKey) results.FlowRecord {
	t.Helper()
	for _, r := range recs {
		if r.Interval == iv && r.Key == k {
			return r
		}
	}
	t.Fatalf("no record for interval %d flow %v", iv, k)
	return results.FlowRecord{}
}

func approx(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(1, math.Abs(b)) }

// TestRLIHandWorked: ten packets, 1 kHz references (1 ms ticks), T = 2 ms;
// the expected per-packet estimates below are worked out by hand (µs).
func TestRLIHandWorked(t *testing.T) {
	const us = int64(time.Microsecond)
	t0 := int64(1000 * time.Second) // on a tick and an interval boundary
	p := func(k capture.FlowKey, send, delay int64, lost bool) PacketDelay {
		return PacketDelay{Key: k, SendNS: t0 + send*us, RecvNS: t0 + (send+delay)*us, Lost: lost}
	}
	pkts := []PacketDelay{
		p(flowX, 0, 100, false),    // P1 tick 0 first: reference (recv 100, d 100)
		p(flowY, 10, 20, false),    // P2 recv 30: before the first reference -> 100 flat
		p(flowY, 200, 300, false),  // P3 recv 500
		p(flowX, 400, 200, false),  // P4 recv 600
		p(flowY, 1000, 400, false), // P5 tick 1 first: reference (1400, 400)
		p(flowX, 1100, 50, false),  // P6 recv 1150
		p(flowY, 2000, 0, true),    // P7 tick 2 first, lost: no reference in tick 2
		p(flowX, 2100, 100, false), // P8 recv 2200 (tick 2, not first: regular)
		p(flowY, 3000, 600, false), // P9 tick 3 first: reference (3600, 600)
		p(flowX, 3100, 700, false), // P10 recv 3800: after the last reference -> 600 flat
	}
	ns := func(v float64) float64 { return v * 1000 }
	p3 := 100 + 300*(500.0-100)/(1400-100)
	p4 := 100 + 300*(600.0-100)/(1400-100)
	p6 := 100 + 300*(1150.0-100)/(1400-100)
	p8 := 400 + 200*(2200.0-1400)/(3600-1400)
	want := []struct {
		iv  int64
		k   capture.FlowKey
		est []float64 // µs
	}{
		{0, flowX, []float64{100, p4, p6}},  // P1, P4, P6
		{0, flowY, []float64{100, p3, 400}}, // P2, P3, P5
		{1, flowX, []float64{p8, 600}},      // P8, P10
		{1, flowY, []float64{600}},          // P9 (P7 lost)
	}
	T := int64(2 * time.Millisecond)
	recs, st, err := RLIBaseline(slicePackets(pkts), 1000, T)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	base := t0 / T
	for _, w := range want {
		r := recFor(t, recs, base+w.iv, w.k)
		m, s := meanStd(w.est)
		if r.DelayNS == nil || !approx(*r.DelayNS, ns(m), 1e-12) {
			t.Errorf("iv %d %v: delay %v, want %v", w.iv, w.k.SrcAddr(), r.DelayNS, ns(m))
		}
		if r.StddevNS == nil || !approx(*r.StddevNS, ns(s), 1e-9) {
			t.Errorf("iv %d %v: stddev %v, want %v", w.iv, w.k.SrcAddr(), r.StddevNS, ns(s))
		}
		if r.Samples != float64(len(w.est)) || r.Packets != float64(len(w.est)) || r.Loss == nil || *r.Loss != 0 {
			t.Errorf("iv %d %v: samples %v packets %v loss %v, want %d, %d, 0", w.iv, w.k.SrcAddr(), r.Samples, r.Packets, r.Loss, len(w.est), len(w.est))
		}
		if r.StartNS != (base+w.iv)*T || r.Estimator != "rli-1khz" {
			t.Errorf("start %d estimator %q", r.StartNS, r.Estimator)
		}
	}
	wantSt := RLIStats{RateHz: 1000, TickNS: 1e6, Packets: 10, Received: 9, Ticks: 4, References: 3, LostReferences: 1,
		Interpolated: 4, Extrapolated: 2, MaxBuffered: 3, FirstSendNS: t0, LastSendNS: t0 + 3100*us}
	if st != wantSt {
		t.Errorf("stats\n got %+v\nwant %+v", st, wantSt)
	}
}

func TestInterpolate(t *testing.T) {
	for _, tc := range []struct {
		t1     int64
		d1     float64
		t2     int64
		d2     float64
		at     int64
		want   float64
		reason string
	}{
		{0, 10, 100, 20, 50, 15, "midpoint"},
		{0, 10, 100, 20, 0, 10, "at left reference"},
		{0, 10, 100, 20, 100, 20, "at right reference"},
		{0, 10, 100, 20, 25, 12.5, "quarter"},
		{100, 50, 200, -50, 175, -25, "falling, negative (clock offset)"},
		{0, 10, 100, 20, -5, 10, "before: clamped"},
		{0, 10, 100, 20, 150, 20, "after: clamped"},
		{7, 10, 7, 30, 7, 30, "equal times: right reference"},
	} {
		if got := interpolate(tc.t1, tc.d1, tc.t2, tc.d2, tc.at); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.reason, got, tc.want)
		}
	}
}

// synth builds a send-ordered stream: packets at exponential gaps (mean
// 1/pps) over dur, flows round-robin among nFlows, loss with probability
// loss, delay from delayAt(send).
func synth(seed uint64, pps float64, dur time.Duration, nFlows int, loss float64, delayAt func(int64) int64) []PacketDelay {
	rng := rand.New(rand.NewPCG(seed, 7))
	t0 := int64(1_763_000_000 * time.Second)
	var out []PacketDelay
	for s := t0; s < t0+int64(dur); s += 1 + int64(rng.ExpFloat64()*1e9/pps) {
		i := len(out) % nFlows
		k := capture.FlowKey{Src: [16]byte{10, 0, byte(i >> 8), byte(i)}, Dst: [16]byte{192, 0, 2, 9}, SPort: uint16(2000 + i), DPort: 80, Proto: 6}
		lost := rng.Float64() < loss
		d := delayAt(s)
		out = append(out, PacketDelay{Key: k, SendNS: s, RecvNS: s + d, Lost: lost})
	}
	return out
}

// TestRLIReferenceSelection: the references are exactly the first packet
// sent in each tick (counted here from the stream), at most rate per second.
func TestRLIReferenceSelection(t *testing.T) {
	const constDelay = 100_000
	for _, tc := range []struct {
		name  string
		pps   float64
		rate  float64
		loss  float64
		minHz float64 // usable references per second at least
		maxHz float64
	}{
		{"dense 20kpps at 1kHz", 20000, 1000, 0, 990, 1001},
		{"dense 20kpps at 250Hz", 20000, 250, 0, 248, 251},
		{"sparse 200pps at 1kHz: rate limited by traffic", 200, 1000, 0, 150, 210},
		{"dense with 10% loss", 20000, 1000, 0.1, 850, 950},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pk := synth(3, tc.pps, time.Second, 50, tc.loss, func(int64) int64 { return constDelay })
			tick := int64(math.Round(1e9 / tc.rate))
			firstLost := map[int64]bool{}
			for _, p := range pk {
				if _, seen := firstLost[p.SendNS/tick]; !seen {
					firstLost[p.SendNS/tick] = p.Lost
				}
			}
			var refs, lostRefs uint64
			for _, l := range firstLost {
				if l {
					lostRefs++
				} else {
					refs++
				}
			}
			recs, st, err := RLIBaseline(slicePackets(pk), tc.rate, int64(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if st.Ticks != uint64(len(firstLost)) || st.References != refs || st.LostReferences != lostRefs {
				t.Errorf("ticks %d refs %d lost refs %d, want %d %d %d", st.Ticks, st.References, st.LostReferences, len(firstLost), refs, lostRefs)
			}
			if hz := st.AchievedHz(); !(hz >= tc.minHz && hz <= tc.maxHz) {
				t.Errorf("achieved %v references/s, want [%v, %v]", hz, tc.minHz, tc.maxHz)
			}
			if st.Interpolated+st.Extrapolated+st.References != st.Received {
				t.Errorf("received %d != interpolated %d + extrapolated %d + references %d", st.Received, st.Interpolated, st.Extrapolated, st.References)
			}
			// Constant delay: interpolation between equal delays is exact.
			for _, r := range recs {
				if r.DelayNS == nil || *r.DelayNS != constDelay || *r.StddevNS != 0 {
					t.Fatalf("constant delay %d ns, flow got %v ± %v", constDelay, r.DelayNS, r.StddevNS)
				}
			}
			if got := st.ShippedBytes(int64(time.Second)); got != float64(12*refs) {
				t.Errorf("shipped %v bytes, want 12 per reference = %d", got, 12*refs)
			}
		})
	}
}

// TestRLIExactOnLinearDelay: when the delay is linear in time, receive
// time is too, so linear interpolation is exact for every packet between
// two references; the stream ends on a reference so none is extrapolated.
func TestRLIExactOnLinearDelay(t *testing.T) {
	t0 := int64(1_763_000_000 * time.Second)
	delayAt := func(s int64) int64 { return 200_000 + (s-t0)/1000 } // 200 µs rising 1 µs per ms
	pk := synth(5, 10000, 900*time.Millisecond, 40, 0, delayAt)
	last := t0 + int64(time.Second) // first packet of a new tick: the last reference
	pk = append(pk, PacketDelay{Key: flowX, SendNS: last, RecvNS: last + delayAt(last)})
	rl, st, err := RLIBaseline(slicePackets(pk), 1000, int64(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if st.Extrapolated != 0 || st.Interpolated == 0 {
		t.Fatalf("stats %+v", st)
	}
	ex, err := ExactJoin(slicePackets(pk), int64(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if len(ex) != len(rl) {
		t.Fatalf("%d exact records, %d rli", len(ex), len(rl))
	}
	for _, e := range ex {
		r := recFor(t, rl, e.Interval, e.Key)
		// Delays are whole ns: interpolation is within 1 ns of the truth.
		if math.Abs(*r.DelayNS-*e.DelayNS) > 1 {
			t.Errorf("interval %d %s: rli %v exact %v", e.Interval, e.Key, *r.DelayNS, *e.DelayNS)
		}
	}
}

func TestBaselineConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c  BaselineConfig
		ok bool
	}{
		{BaselineConfig{T: 1e9, RLI: true}, true},
		{BaselineConfig{T: 1e9, Exact: true, RLIRateHz: 500}, true},
		{BaselineConfig{T: 0, RLI: true}, false},
		{BaselineConfig{T: 1e9}, false},
		{BaselineConfig{T: 1e9, RLI: true, RLIRateHz: -1}, false},
		{BaselineConfig{T: 1e9, RLI: true, RLIRateHz: math.Inf(1)}, false},
	} {
		if err := tc.c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: err %v, want ok=%v", tc.c, err, tc.ok)
		}
	}
	if _, _, err := RLIBaseline(slicePackets(nil), 0, 1e9); err == nil {
		t.Error("RLI at 0 Hz accepted")
	}
	for _, tc := range []struct {
		t    int64
		want int
	}{{1, 1}, {256, 1}, {257, 2}, {int64(time.Second), 4}, {1 << 32, 4}, {1<<32 + 1, 5}, {int64(300 * time.Second), 5}} {
		if got := ExportTimeBytes(tc.t); got != tc.want {
			t.Errorf("ExportTimeBytes(%d) = %d, want %d", tc.t, got, tc.want)
		}
	}
	for _, tc := range []struct {
		list       string
		rli, exact bool
		ok         bool
	}{{"rli", true, false, true}, {"exact, rli", true, true, true}, {"", false, false, true}, {"rli,mpe", false, false, false}} {
		var c BaselineConfig
		err := c.ParseBaselineList(tc.list)
		if (err == nil) != tc.ok || tc.ok && (c.RLI != tc.rli || c.Exact != tc.exact) {
			t.Errorf("%q: %+v, err %v", tc.list, c, err)
		}
	}
	if RLILabel(1000) != "rli-1khz" || RLILabel(2000) != "rli-2khz" || RLILabel(250) != "rli-250hz" {
		t.Errorf("labels %q %q %q", RLILabel(1000), RLILabel(2000), RLILabel(250))
	}
}

// TestCostTable: the exact join's bytes on a hand-made truth, and the
// report's cost rows.
func TestCostTable(t *testing.T) {
	a := tr(5, 0, 10, 9, 1000, 10)                                                  // IPv4, 10 sent
	b := truth.Record{Interval: 6, Src: "2001:db8::1", Dst: "2001:db8::2", Sent: 3} // IPv6, all lost
	recs := []truth.Record{a, b}
	// (13 + 4 + 12*10) + (37 + 4 + 12*3)
	const exactBytes = 137 + 77
	opt := DefaultOptions()
	opt.ShippedBytes = map[string]float64{"lds": 107, "rli-1khz": 24}
	rep, err := EvaluateWith(recs, map[string][]results.FlowRecord{}, opt)
	if err != nil {
		t.Fatal(err)
	}
	want := []CostRow{
		{Label: ExactLabel, Bytes: exactBytes, PerInterval: exactBytes / 2.0, PerPacket: exactBytes / 13.0, VsExact: 1},
		{Label: "lds", Bytes: 107, PerInterval: 53.5, PerPacket: 107 / 13.0, VsExact: 0.5},
		{Label: "rli-1khz", Bytes: 24, PerInterval: 12, PerPacket: 24 / 13.0, VsExact: 24.0 / exactBytes},
	}
	if len(rep.Cost) != len(want) {
		t.Fatalf("cost rows %+v", rep.Cost)
	}
	for i, w := range want {
		g := rep.Cost[i]
		if g.Label != w.Label || !near(g.Bytes, w.Bytes) || !near(g.PerInterval, w.PerInterval) || !near(g.PerPacket, w.PerPacket) || !near(g.VsExact, w.VsExact) {
			t.Errorf("row %d: got %+v, want %+v", i, g, w)
		}
	}
}

func runGen(t *testing.T, sc gen.Scenario) (gen.Outputs, []truth.Record, *Baselines, [2]int64) {
	t.Helper()
	dir := t.TempDir()
	out := gen.Outputs{SenderPcap: filepath.Join(dir, "a.pcap"), ReceiverPcap: filepath.Join(dir, "b.pcap"), Truth: filepath.Join(dir, "truth.jsonl")}
	src := PerPacketFromGen(context.Background(), sc, out, nil)
	minMax := [2]int64{math.MaxInt64, math.MinInt64}
	watch := func(yield func(*PacketDelay) bool) error {
		return src(func(p *PacketDelay) bool {
			if !p.Lost {
				minMax[0], minMax[1] = min(minMax[0], p.Delay()), max(minMax[1], p.Delay())
			}
			return yield(p)
		})
	}
	b, err := RunBaselines(watch, BaselineConfig{T: int64(sc.Interval), RLI: true, Exact: true})
	if err != nil {
		t.Fatal(err)
	}
	truth, err := ReadTruthFile(out.Truth)
	if err != nil {
		t.Fatal(err)
	}
	return out, truth, &b, minMax
}

// TestBaselinesOnGeneratedTrace: on the demo trace (per-flow delay modes,
// ECMP, bursty loss) the exact join reproduces the generator's truth, RLI
// gives every flow a finite estimate inside the trace's delay range and is
// worse than exact; the capture join gives the same per-packet stream.
func TestBaselinesOnGeneratedTrace(t *testing.T) {
	sc := gen.DefaultScenario()
	sc.Duration = 2 * time.Second
	out, truth, b, minMax := runGen(t, sc)
	ex := b.Runs[ExactLabel]
	if len(ex) != len(truth) {
		t.Fatalf("exact join: %d records, truth %d", len(ex), len(truth))
	}
	for i := range truth {
		tt := &truth[i]
		k, err := tt.Key()
		if err != nil {
			t.Fatal(err)
		}
		e := recFor(t, ex, tt.Interval, k)
		if int64(e.Packets) != tt.Sent || e.Loss == nil || int64(*e.Loss) != tt.Lost {
			t.Fatalf("exact %+v vs truth %+v", e, tt)
		}
		if (tt.DelayNS == nil) != (e.DelayNS == nil) || tt.DelayNS != nil && (!approx(*e.DelayNS, *tt.DelayNS, 1e-9) || !approx(*e.StddevNS, *tt.StddevNS, 1e-6)) {
			t.Fatalf("exact delay %v±%v vs truth %v±%v", e.DelayNS, e.StddevNS, tt.DelayNS, tt.StddevNS)
		}
	}
	for _, r := range b.Runs["rli-1khz"] {
		if r.DelayNS == nil || *r.DelayNS < float64(minMax[0]) || *r.DelayNS > float64(minMax[1]) {
			t.Fatalf("rli estimate %v outside the trace's delays [%d, %d]", r.DelayNS, minMax[0], minMax[1])
		}
	}
	// The demo's traffic is bursty: ticks without a packet have no reference.
	if st := b.RLI; st.References+st.LostReferences != st.Ticks || st.Ticks > 2001 || st.AchievedHz() < 500 || st.AchievedHz() > 1001 {
		t.Errorf("rli references %v/s at ~4 kpkt/s: %+v", st.AchievedHz(), *st)
	}
	opt := DefaultOptions()
	runs := map[string][]results.FlowRecord{}
	if err := b.Apply(runs, &opt); err != nil {
		t.Fatal(err)
	}
	rep, err := EvaluateWith(truth, runs, opt)
	if err != nil {
		t.Fatal(err)
	}
	exAll := binOf(t, rep, ExactLabel, "all")
	if exAll.Coverage != 1 || exAll.P95RelDelay > 1e-9 || exAll.MeanAbsLossErr != 0 || exAll.MissedLoss != 0 {
		t.Errorf("exact join not exact: %+v", exAll)
	}
	rl := binOf(t, rep, "rli-1khz", "all")
	if rl.Coverage != 1 || math.IsNaN(rl.MedianRelDelay) || math.IsInf(rl.P95RelDelay, 0) || !(rl.MedianRelDelay > 1e-3) || !(rl.P95RelDelay < 10) {
		t.Errorf("rli on the demo trace: coverage %v median %v p95 %v", rl.Coverage, rl.MedianRelDelay, rl.P95RelDelay)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Baselines", "## Cost", "| rli-1khz | ", "not estimated", "zero error by definition", "| references (usable) |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}

	// The same per-packet truth from the two captures.
	var jc JoinCounts
	pk, err := PerPacketFromCaptures(out.SenderPcap, out.ReceiverPcap, capture.DefaultConfig(), &jc)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := RunBaselines(pk, BaselineConfig{T: int64(sc.Interval), RLI: true, Exact: true})
	if err != nil {
		t.Fatal(err)
	}
	if *b2.RLI != *b.RLI {
		t.Errorf("rli stats from captures %+v, from the generator %+v", *b2.RLI, *b.RLI)
	}
	if jc.Sent != b.RLI.Packets || jc.Received != b.RLI.Received || jc.Unmatched != 0 || jc.Duplicates != 0 {
		t.Errorf("capture join counts %+v, generator sent %d received %d", jc, b.RLI.Packets, b.RLI.Received)
	}
	for _, l := range []string{"rli-1khz", ExactLabel} {
		g, c := b.Runs[l], b2.Runs[l]
		if len(g) != len(c) {
			t.Fatalf("%s: %d records from the generator, %d from captures", l, len(g), len(c))
		}
		for i := range g {
			if g[i].Key != c[i].Key || g[i].Interval != c[i].Interval || *g[i].DelayNS != *c[i].DelayNS {
				t.Fatalf("%s record %d: generator %+v, captures %+v", l, i, g[i], c[i])
			}
		}
	}
}

// TestRLIOnCorrelatedDelay: one time-correlated queue (RLI's assumption
// holds): RLI must beat the global average by far.
func TestRLIOnCorrelatedDelay(t *testing.T) {
	sc := gen.DefaultScenario()
	sc.Duration = time.Second
	sc.Classes = []gen.Class{{Name: "queue", Weight: 1,
		Delay: gen.DelayModel{Kind: gen.DelayPriority, HighFraction: 0, High: &gen.DelayModel{Kind: gen.DelayConstant, Value: 100 * time.Microsecond},
			Low: &gen.DelayModel{Kind: gen.DelayConstant, Value: 100 * time.Microsecond}, Queue: 2 * time.Millisecond, Period: 200 * time.Millisecond},
		Loss: gen.LossModel{Kind: gen.LossNone}}}
	sc.HeavyLoss.Fraction = 0
	_, truth, b, _ := runGen(t, sc)
	opt := DefaultOptions()
	runs := map[string][]results.FlowRecord{}
	if err := b.Apply(runs, &opt); err != nil {
		t.Fatal(err)
	}
	rep, err := EvaluateWith(truth, runs, opt)
	if err != nil {
		t.Fatal(err)
	}
	rl, ga := binOf(t, rep, "rli-1khz", "all"), binOf(t, rep, BaselineLabel, "all")
	if !(rl.MedianRelDelay < ga.MedianRelDelay/5) || !(rl.MedianRelDelay > 0) {
		t.Errorf("correlated queue: rli median %v, global average %v", rl.MedianRelDelay, ga.MedianRelDelay)
	}
	t.Logf("correlated queue: rli median %.3g p95 %.3g; global average median %.3g", rl.MedianRelDelay, rl.P95RelDelay, ga.MedianRelDelay)
}

func TestRLIAllocs(t *testing.T) {
	pk := synth(9, 20000, 200*time.Millisecond, 100, 0.01, func(s int64) int64 { return 50_000 + s%7919 })
	r, err := newRLI(1000, int64(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range pk { // warm up: every flow seen, buffers grown
		r.add(&pk[i])
	}
	i := 0
	allocs := testing.AllocsPerRun(5000, func() {
		p := pk[i%len(pk)]
		p.SendNS, p.RecvNS = r.maxSend+1000, r.maxSend+1000+(p.RecvNS-p.SendNS)
		r.add(&p)
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocs per packet", allocs)
	}
}

func BenchmarkRLI(b *testing.B) {
	pk := synth(11, 30000, time.Second, 2000, 0.001, func(s int64) int64 { return 100_000 + s%100_003 })
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for n < b.N {
		m := min(len(pk), b.N-n)
		if _, _, err := RLIBaseline(slicePackets(pk[:m]), 1000, int64(time.Second)); err != nil {
			b.Fatal(err)
		}
		n += m
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

// TestPerPacketSources: early stop, and errors said where they belong.
func TestPerPacketSources(t *testing.T) {
	dir := t.TempDir()
	sc := gen.DefaultScenario()
	sc.Duration = time.Second
	out := gen.Outputs{SenderPcap: filepath.Join(dir, "a.pcap"), ReceiverPcap: filepath.Join(dir, "b.pcap")}
	n := 0
	var prev int64
	err := PerPacketFromGen(context.Background(), sc, out, nil)(func(p *PacketDelay) bool {
		if p.SendNS < prev {
			t.Errorf("packet %d sent at %d before %d: not in send order", n, p.SendNS, prev)
		}
		prev = p.SendNS
		n++
		return n < 100
	})
	if err != nil || n != 100 {
		t.Errorf("stopped after %d packets, err %v; want 100, nil", n, err)
	}
	n = 0
	var jc JoinCounts
	pk, err := PerPacketFromCaptures(out.SenderPcap, out.ReceiverPcap, capture.DefaultConfig(), &jc)
	if err != nil {
		t.Fatal(err)
	}
	if err := pk(func(*PacketDelay) bool { n++; return n < 10 }); err != nil || n != 10 || jc.Sent != 10 {
		t.Errorf("captures: stopped after %d packets (counted %d), err %v", n, jc.Sent, err)
	}
	bad := capture.DefaultConfig()
	bad.Identity.PayloadBytes = -1
	if _, err := PerPacketFromCaptures(out.SenderPcap, out.ReceiverPcap, bad, nil); err == nil {
		t.Error("negative payload bytes accepted")
	}
	pk, err = PerPacketFromCaptures(filepath.Join(dir, "missing.pcap"), out.ReceiverPcap, capture.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pk(func(*PacketDelay) bool { return true }); err == nil || !strings.Contains(err.Error(), "missing.pcap") {
		t.Errorf("missing capture: %v", err)
	}
}
