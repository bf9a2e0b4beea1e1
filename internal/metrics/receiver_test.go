package metrics

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/spike"
)

func f(v float64) *float64 { return &v }

func newReceiver(t testing.TB, mod func(*Config)) *Receiver {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	r, err := NewReceiver(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return time.Unix(1763000002, 500_000_000) }
	return r
}

func flow(src, dst string, proto uint8, sport, dport uint16, packets float64, delayNS *float64) results.FlowRecord {
	return results.FlowRecord{Interval: 1763000000, StartNS: 1763000000_000000000, Sender: "a",
		Key: capture.MustParseFlowKey(src, dst, proto, sport, dport), Packets: packets, DelayNS: delayNS, Loss: f(0)}
}

// goldenInterval: flows by packets are v6-dns (2000), f1 (1500), f2 (1000),
// f3-dns (10), f4 (5). With top_n = 2 and a watch rule on UDP port 53, the
// tracked set is v6-dns (top, watch "dns"), f1 (top) and f3 (watch "dns").
func goldenInterval() *results.Interval {
	f1 := flow("10.0.0.1", "192.0.2.7", 6, 51000, 443, 1500, f(412345.5))
	f1.StddevNS, f1.Loss, f1.Samples, f1.CI95NS = f(80211), f(15), 1498, f(4020.1)
	f1.P50NS, f1.P90NS, f1.P99NS, f1.DelaySamples = f(400000), f(500000), f(700000), 256
	f2 := flow("10.0.0.2", "192.0.2.7", 6, 51001, 443, 1000, f(2_000_000))
	f2.StddevNS, f2.Samples, f2.CI95NS = f(100000), 900, f(5000)
	f3 := flow("10.0.0.3", "192.0.2.8", 17, 40000, 53, 10, f(50_000))
	f3.Samples = 10
	f4 := flow("10.0.0.4", "192.0.2.9", 6, 1234, 80, 5, nil)
	f4.Loss = f(1)
	f5 := flow("2001:db8::1", "2001:db8::2", 17, 5000, 53, 2000, f(20_000_000))
	f5.StddevNS, f5.Samples, f5.CI95NS = f(1_000_000), 1900, f(100_000)
	return &results.Interval{
		Sender: "a", Interval: 1763000000, StartNS: 1763000000_000000000, Outcome: results.OutcomeMatched,
		Flows: []results.FlowRecord{f1, f2, f3, f4, f5},
		Links: []results.LinkRecord{
			{Class: "all", Sent: 4515, Received: 4499, LossRatio: f(16.0 / 4515), DelayNS: f(1_000_000), StddevNS: f(500_000), CI95NS: f(1000), Samples: 4000,
				Delays: []float64{50_000, 200_000, 2_000_000}},
			{Class: "ef", Sent: 100, Received: 100, LossRatio: f(0)},
		},
		UsableCellRatio: 0.75, SenderDrops: 3, ReceiverDrops: 5, SketchBytes: 65536,
	}
}

func goldenConfig(c *Config) {
	c.TopN = 2
	c.Watch = []match.Rule{{Name: "dns", Proto: []int{17}, DPort: []string{"53"}}}
	c.Buckets = []float64{0.0001, 0.001, 0.01}
}

// ldsNames lists the lds_ metric families in the registry.
func ldsNames(t *testing.T, reg prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "lds_") {
			names = append(names, mf.GetName())
		}
	}
	return names
}

func TestReceiverGolden(t *testing.T) {
	r := newReceiver(t, goldenConfig)
	iv := goldenInterval()
	ev := []spike.Event{{Sender: "a", Interval: iv.Interval, Key: capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443),
		Kind: spike.KindLatency, Signal: "delay", Value: 412345.5, Low: 412345.5 - 4020.1, Baseline: 200000, Threshold: 300000},
		{Sender: "a", Interval: iv.Interval, Key: capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443),
			Kind: spike.KindLoss, Signal: "loss", Value: 0.2, Low: 0.15, Baseline: 0.001, Threshold: 0.021}}
	r.SenderConnected("a", true)
	r.IntervalOutcome("a", results.OutcomeVoidedGap)
	r.IntervalOutcome("a", iv.Outcome)
	r.ObserveInterval(iv, ev)
	r.SketchBytes("a", 70000)
	r.EstimationDuration("a", 180*time.Millisecond)
	r.BoundaryMisassigned("a")
	r.BoundaryWindow("a", 250*time.Millisecond)
	r.FrameError("a", "bad_seq")
	r.SetClock("sender", "a", "holdover", 1200, 5000)
	r.SetClock("receiver", "", "unsynced", 99, 99) // SetOwnClock takes its place
	// and that of every other receiver-end series: the receiver's clock is
	// exported once (sender=""), never again per sender or as "unknown".
	r.SetClock("receiver", "a", "synced", 5, 5)
	r.SetClock("receiver", "unknown", "unknown", 0, 0)
	r.SetOwnClock(func() OwnClock { return OwnClock{State: "synced", OffsetNS: -300, HaveOffset: true} })
	r.CaptureCounters(123456, map[string]uint64{"kernel": 7, "truncated": 2})
	r.ResultsFileReasons([]string{"no_space", "io"})
	r.ResultsWriteError("no_space", 250)

	fh, err := os.Open("testdata/receiver.prom")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	names := ldsNames(t, r.Registry())
	if err := testutil.GatherAndCompare(r.Registry(), fh, names...); err != nil {
		t.Fatal(err)
	}
	// Every lds_ family the registry has must be in the golden file, so a
	// new series cannot slip in untested.
	want, _ := os.ReadFile("testdata/receiver.prom")
	for _, n := range names {
		if !bytes.Contains(want, []byte("# TYPE "+n+" ")) {
			t.Errorf("%s is exported but not in testdata/receiver.prom", n)
		}
	}
}

// TestOwnClockFromStart: the receiver's own clock is exported before any
// sender or interval, read live at each scrape; no offset before ptp4l
// has answered.
func TestOwnClockFromStart(t *testing.T) {
	r := newReceiver(t, goldenConfig)
	if got := series(t, r.Registry(), "lds_ptp_state"); len(got) != 0 {
		t.Fatalf("lds_ptp_state without a clock source: %v", got)
	}
	now := OwnClock{State: "unknown"}
	r.SetOwnClock(func() OwnClock { return now })
	steps := []struct {
		clock      OwnClock
		wantState  map[string]float64
		wantOffset map[string]float64
	}{
		{OwnClock{State: "unknown"}, map[string]float64{"end=receiver,sender=,state=unknown": 1}, map[string]float64{}},
		{OwnClock{State: "synced", OffsetNS: -1500, HaveOffset: true}, map[string]float64{"end=receiver,sender=,state=synced": 1},
			map[string]float64{"end=receiver,sender=": -1.5e-06}},
		{OwnClock{State: "unsynced", OffsetNS: 2e6, HaveOffset: true}, map[string]float64{"end=receiver,sender=,state=unsynced": 1},
			map[string]float64{"end=receiver,sender=": 0.002}},
	}
	for i, s := range steps {
		now = s.clock
		if got := series(t, r.Registry(), "lds_ptp_state"); !maps.Equal(got, s.wantState) {
			t.Errorf("step %d: lds_ptp_state %v, want %v", i, got, s.wantState)
		}
		if got := series(t, r.Registry(), "lds_ptp_offset_seconds"); !maps.Equal(got, s.wantOffset) {
			t.Errorf("step %d: lds_ptp_offset_seconds %v, want %v", i, got, s.wantOffset)
		}
	}
}

// series returns the label sets (as "k=v,...") of family name.
func series(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(ls, ",")] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return math.NaN()
}

func hasSrc(set map[string]float64, src string) bool {
	for k := range set {
		if strings.Contains(k, "src="+src+",") {
			return true
		}
	}
	return false
}

func TestFlowLeavingTopNLeavesNoSeries(t *testing.T) {
	r := newReceiver(t, func(c *Config) { c.TopN = 2 })
	mk := func(id int64, pa, pb, pc float64) *results.Interval {
		return &results.Interval{Sender: "a", Interval: id, Outcome: results.OutcomeMatched, Flows: []results.FlowRecord{
			flow("10.0.0.1", "10.9.9.9", 6, 1, 1, pa, f(1e6)),
			flow("10.0.0.2", "10.9.9.9", 6, 1, 1, pb, f(2e6)),
			flow("10.0.0.3", "10.9.9.9", 6, 1, 1, pc, f(3e6)),
		}}
	}
	r.ObserveInterval(mk(1, 100, 50, 10), nil)
	for _, name := range []string{"lds_flow_delay_seconds", "lds_flow_packets", "lds_flow_loss_ratio"} {
		s := series(t, r.Registry(), name)
		if len(s) != 2 || !hasSrc(s, "10.0.0.1") || !hasSrc(s, "10.0.0.2") {
			t.Fatalf("interval 1 %s = %v, want 10.0.0.1 and 10.0.0.2", name, s)
		}
	}
	// 10.0.0.2 drops to 5 packets, 10.0.0.3 climbs to 200: .2 must vanish.
	r.ObserveInterval(mk(2, 100, 5, 200), nil)
	for _, name := range []string{"lds_flow_delay_seconds", "lds_flow_packets", "lds_flow_loss_ratio"} {
		s := series(t, r.Registry(), name)
		if len(s) != 2 || !hasSrc(s, "10.0.0.1") || !hasSrc(s, "10.0.0.3") || hasSrc(s, "10.0.0.2") {
			t.Fatalf("interval 2 %s = %v, want only 10.0.0.1 and 10.0.0.3", name, s)
		}
	}
	// A flow whose delay estimate disappears keeps its packets series but
	// loses its delay series (no stale value).
	iv := mk(3, 100, 5, 200)
	iv.Flows[0].DelayNS = nil
	r.ObserveInterval(iv, nil)
	if s := series(t, r.Registry(), "lds_flow_delay_seconds"); hasSrc(s, "10.0.0.1") {
		t.Fatalf("stale delay series for 10.0.0.1: %v", s)
	}
	if s := series(t, r.Registry(), "lds_flow_packets"); !hasSrc(s, "10.0.0.1") {
		t.Fatalf("packets series of 10.0.0.1 missing: %v", s)
	}
}

func TestOlderIntervalKeepsLatestState(t *testing.T) {
	r := newReceiver(t, nil)
	newer := &results.Interval{Sender: "a", Interval: 10, Outcome: results.OutcomeMatched,
		Flows: []results.FlowRecord{flow("10.0.0.1", "10.9.9.9", 6, 1, 1, 10, f(1e6))}}
	older := &results.Interval{Sender: "a", Interval: 9, Outcome: results.OutcomeMatched,
		Flows: []results.FlowRecord{flow("10.0.0.2", "10.9.9.9", 6, 1, 1, 10, f(1e6))}}
	r.ObserveInterval(newer, nil)
	r.ObserveInterval(older, nil) // a resend after a reconnect
	r.IntervalOutcome("a", results.OutcomeMatched)
	s := series(t, r.Registry(), "lds_flow_packets")
	if len(s) != 1 || !hasSrc(s, "10.0.0.1") {
		t.Fatalf("latest state replaced by an older interval: %v", s)
	}
	if got := testutil.ToFloat64(r.intervals.WithLabelValues("a", string(results.OutcomeMatched))); got != 1 {
		t.Fatalf("matched intervals = %v, want 1 (counted by IntervalOutcome only)", got)
	}
}

func TestUnsyncedHidesDelays(t *testing.T) {
	r := newReceiver(t, nil)
	iv := goldenInterval()
	iv.Outcome = results.OutcomeUnsynced
	r.ObserveInterval(iv, nil)
	for _, name := range []string{"lds_flow_delay_seconds", "lds_flow_delay_stddev_seconds", "lds_link_delay_seconds"} {
		if s := series(t, r.Registry(), name); len(s) != 0 {
			t.Errorf("%s has series for a clock-unsynced interval: %v", name, s)
		}
	}
	if s := series(t, r.Registry(), "lds_flow_packets"); len(s) == 0 {
		t.Error("packets series missing: they do not depend on the clocks")
	}
	if n := testutil.CollectAndCount(r.delayHist); n != 1 {
		t.Fatalf("histogram children = %d", n)
	}
	if c := histCount(t, r, "a"); c != 0 {
		t.Fatalf("histogram observed %d unsynced delays, want 0", c)
	}
}

func histCount(t *testing.T, r *Receiver, sender string) uint64 {
	t.Helper()
	m := &dto.Metric{}
	if err := r.delayHist.WithLabelValues(sender).(prometheus.Metric).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func TestTrackedMatchesSeries(t *testing.T) {
	r := newReceiver(t, goldenConfig)
	iv := goldenInterval()
	tr := r.Tracked(iv)
	var got []string
	for i := range iv.Flows {
		if tr(&iv.Flows[i]) {
			got = append(got, iv.Flows[i].Key.SrcAddr().String())
		}
	}
	want := []string{"10.0.0.1", "10.0.0.3", "2001:db8::1"} // in Flows order
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tracked = %v, want %v", got, want)
	}
	if tr(&results.FlowRecord{Key: capture.MustParseFlowKey("10.0.0.1", "192.0.2.1", 6, 0, 0)}) {
		t.Fatal("a record outside the interval is not tracked")
	}
}

// 100k flows, 1/4 of them watched: the per-flow series stay at top_n plus
// top_n watched, and the rest of the watched flows are counted as cut.
func TestCardinalityBounded(t *testing.T) {
	const n = 100_000
	r := newReceiver(t, func(c *Config) {
		c.TopN = 100
		c.Watch = []match.Rule{{Name: "web", DPort: []string{"443"}}}
	})
	iv := &results.Interval{Sender: "a", Interval: 1, Outcome: results.OutcomeMatched, Flows: make([]results.FlowRecord, n)}
	watched, watchedInTop := 0, 0
	for i := range iv.Flows {
		dport := uint16(80)
		if i%4 == 0 {
			dport = 443
			watched++
			if i >= n-100 { // packets = i+1: the top 100 are the last 100
				watchedInTop++
			}
		}
		iv.Flows[i] = flow(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), "192.0.2.1", 6, uint16(i), dport, float64(i+1), f(float64(i)))
	}
	r.ObserveInterval(iv, nil)
	s := series(t, r.Registry(), "lds_flow_packets")
	if len(s) != 200 {
		t.Fatalf("%d lds_flow_packets series, want 100 top + 100 watched", len(s))
	}
	top := 0
	for k, v := range s {
		if strings.HasSuffix(k, "watch=") || v > n-100 {
			top++
		}
		if !strings.HasSuffix(k, "watch=web") && !strings.HasSuffix(k, "watch=") {
			t.Fatalf("unexpected watch label in %s", k)
		}
	}
	if top != 100 {
		t.Fatalf("%d series for top-N flows, want 100", top)
	}
	wantCut := float64(watched - watchedInTop - 100)
	if got := testutil.ToFloat64(r.watchCut.WithLabelValues("a")); got != wantCut {
		t.Fatalf("watch cut = %v, want %v", got, wantCut)
	}
	total, err := testutil.GatherAndCount(r.Registry())
	if err != nil {
		t.Fatal(err)
	}
	// 200 tracked flows x 5 per-flow families, plus fixed health series.
	if total > 200*5+400 {
		t.Fatalf("%d series in total for 100k flows", total)
	}
	if c := histCount(t, r, "a"); c != n {
		t.Fatalf("histogram count = %d, want all %d flows", c, n)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"listen", func(c *Config) { c.Listen = "9465" }, "metrics.listen"},
		{"top_n zero", func(c *Config) { c.TopN = 0 }, "metrics.top_n"},
		{"top_n huge", func(c *Config) { c.TopN = MaxTopN + 1 }, "metrics.top_n"},
		{"watch bad prefix", func(c *Config) { c.Watch = []match.Rule{{Name: "x", Src: []string{"10.0.0.0/33"}}} }, "metrics.watch[0].src"},
		{"watch no name", func(c *Config) { c.Watch = []match.Rule{{DPort: []string{"53"}}} }, "metrics.watch[0].name"},
		{"watch dup name", func(c *Config) { c.Watch = []match.Rule{{Name: "a"}, {Name: "a"}} }, "metrics.watch[1].name"},
		{"buckets empty", func(c *Config) { c.Buckets = nil }, "metrics.delay_buckets"},
		{"buckets order", func(c *Config) { c.Buckets = []float64{0.1, 0.01} }, "metrics.delay_buckets[1]"},
		{"buckets nan", func(c *Config) { c.Buckets = []float64{math.NaN()} }, "metrics.delay_buckets[0]"},
		{"web config missing", func(c *Config) { c.WebConfig = "/nonexistent/web.yml" }, "metrics.web_config"},
		{"spike window", func(c *Config) { c.SpikeWindow = 0 }, "metrics.spike_window"},
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.want)
			}
			if _, err := NewReceiver(c, nil); err == nil {
				t.Fatal("NewReceiver accepted it")
			}
		})
	}
}

// promtool returns promtool's path, or skips (fails under LDS_E2E_REQUIRED=1).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool not found (Debian package `prometheus`): exposition and alert rules NOT checked"
		if os.Getenv("LDS_E2E_REQUIRED") == "1" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPED: " + msg)
	}
	return p
}

// promtool check metrics lints the whole exposition (names, units, help).
func TestPromtoolCheckMetrics(t *testing.T) {
	pt := promtool(t)
	r := newReceiver(t, goldenConfig)
	r.SenderConnected("a", true)
	r.ObserveInterval(goldenInterval(), []spike.Event{{Sender: "a", Key: capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443)}})
	r.SetClock("sender", "a", "synced", 1, 1)
	r.CaptureCounters(1, map[string]uint64{"kernel": 1})
	r.ExportUp("kafka", "k1:9092", true)
	r.ExportSent("kafka", "k1:9092", 3)
	r.ExportDropped("kafka", "k1:9092", "send_error", 1)
	r.ExportError("kafka", "k1:9092")
	r.ExportQueued("kafka", "k1:9092", 2)
	s, err := NewSender(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.IntervalSent(10)
	s.CaptureCounters(1, map[string]uint64{"kernel": 1})
	s.SetClock("synced", 1, 1)
	for name, reg := range map[string]prometheus.Gatherer{"receiver": r.Registry(), "sender": s.Registry()} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(pt, "check", "metrics")
		cmd.Stdin = &buf
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("%s: promtool check metrics: %v\n%s", name, err, out)
		}
	}
}

func BenchmarkObserveInterval100k(b *testing.B) {
	r := newReceiver(b, func(c *Config) {
		c.Watch = []match.Rule{{Name: "web", DPort: []string{"443"}}}
	})
	iv := &results.Interval{Sender: "a", Interval: 1, Outcome: results.OutcomeMatched, Flows: make([]results.FlowRecord, 100_000)}
	for i := range iv.Flows {
		iv.Flows[i] = flow(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), "192.0.2.1", 6, uint16(i), uint16(i%1000), float64(i%5000), f(float64(i)))
	}
	b.ReportAllocs()
	for b.Loop() {
		r.ObserveInterval(iv, nil)
	}
}

func TestSpikeWindow(t *testing.T) {
	r := newReceiver(t, func(c *Config) { c.TopN = 2; c.SpikeWindow = 3 })
	ev := func(src string) spike.Event {
		return spike.Event{Sender: "a", Key: capture.MustParseFlowKey(src, "10.9.9.9", 6, 1, 1)}
	}
	iv := func(id int64) *results.Interval {
		return &results.Interval{Sender: "a", Interval: id, Outcome: results.OutcomeMatched,
			Flows: []results.FlowRecord{flow("10.0.0.1", "10.9.9.9", 6, 1, 1, 10, f(1e6))}}
	}
	key := "dport=1,dst=10.9.9.9,proto=6,sender=a,sport=1,src=10.0.0.1,watch="
	steps := []struct {
		id     int64
		spikes []spike.Event
		want   float64 // spiking intervals of 10.0.0.1 within the last 3; 0 = no series
	}{
		{1, []spike.Event{ev("10.0.0.1")}, 1},
		{2, []spike.Event{ev("10.0.0.1")}, 2},
		{3, nil, 2},
		{4, nil, 1}, // interval 1 left the window (2..4)
		{5, nil, 0}, // interval 2 left too: no series at all
	}
	for _, st := range steps {
		r.ObserveInterval(iv(st.id), st.spikes)
		got := series(t, r.Registry(), "lds_flow_spike")
		if st.want == 0 {
			if len(got) != 0 {
				t.Fatalf("interval %d: lds_flow_spike = %v, want no series", st.id, got)
			}
			continue
		}
		if len(got) != 1 || got[key] != st.want {
			t.Fatalf("interval %d: lds_flow_spike = %v, want %s = %v", st.id, got, key, st.want)
		}
	}
	// At most top_n flows are remembered.
	r.ObserveInterval(iv(6), []spike.Event{ev("10.0.0.1"), ev("10.0.0.2"), ev("10.0.0.3")})
	if got := series(t, r.Registry(), "lds_flow_spike"); len(got) != 2 {
		t.Fatalf("%d lds_flow_spike series, want top_n = 2: %v", len(got), got)
	}
	if got := series(t, r.Registry(), "lds_spiking_flows"); got["sender=a"] != 3 {
		t.Fatalf("lds_spiking_flows = %v, want 3 (uncapped count of the latest interval)", got)
	}
}

// Scrapes run while intervals are published (run with -race).
func TestConcurrentScrape(t *testing.T) {
	r := newReceiver(t, goldenConfig)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			iv := goldenInterval()
			iv.Interval += int64(i)
			r.IntervalOutcome("a", iv.Outcome)
			r.ObserveInterval(iv, []spike.Event{{Sender: "a", Key: capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443)}})
			r.SetClock("sender", "a", "synced", int64(i), 1)
			r.SenderConnected("a", i%2 == 0)
		}
	}()
	for range 50 {
		if _, err := r.Registry().Gather(); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	if got := testutil.ToFloat64(r.intervals.WithLabelValues("a", string(results.OutcomeMatched))); got != 50 {
		t.Fatalf("matched = %v, want 50", got)
	}
}
