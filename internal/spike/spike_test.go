package spike

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
)

const ms = 1e6 // ns

func rec(src string, delayNS, ci95NS float64) results.FlowRecord {
	r := results.FlowRecord{Key: capture.MustParseFlowKey(src, "192.0.2.7", 6, 51000, 443), Packets: 100}
	if !math.IsNaN(delayNS) {
		r.DelayNS = results.Float(delayNS)
	}
	if !math.IsNaN(ci95NS) {
		r.CI95NS = results.Float(ci95NS)
	}
	return r
}

func interval(id int64, recs ...results.FlowRecord) *results.Interval {
	iv := &results.Interval{Sender: "a", Interval: id, StartNS: id * 1e9, Outcome: results.OutcomeMatched}
	for _, r := range recs {
		r.Interval, r.StartNS = id, id*1e9
		iv.Flows = append(iv.Flows, r)
	}
	return iv
}

func newDetector(t *testing.T, mod func(*Config)) *Detector {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// warm feeds n intervals of a constant 1 ms delay for flow src: the baseline
// is then exactly 1 ms with zero deviation, so with the defaults the
// threshold is 1 ms + max(4·0, 1 ms, 0.5·1 ms) = 2 ms.
func warm(d *Detector, src string, from int64, n int) int64 {
	for i := range n {
		d.Observe(interval(from+int64(i), rec(src, 1*ms, 0.1*ms)), nil)
	}
	return from + int64(n)
}

func TestSpikeRuleUsesCI(t *testing.T) {
	tests := []struct {
		name        string
		delay, ci95 float64
		want        bool
	}{
		{"lower CI bound above threshold", 2.5 * ms, 0.4 * ms, true},
		{"CI reaches below threshold", 2.5 * ms, 0.6 * ms, false},
		{"just below threshold", 1.99 * ms, 0, false},
		{"no CI: never alarms", 50 * ms, math.NaN(), false},
		{"lower delay", 0.2 * ms, 0.01 * ms, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDetector(t, nil)
			next := warm(d, "10.0.0.1", 100, 5)
			iv := interval(next, rec("10.0.0.1", tc.delay, tc.ci95))
			ev := d.Observe(iv, nil)
			if got := len(ev) == 1; got != tc.want {
				t.Fatalf("spike = %v (%d events), want %v", got, len(ev), tc.want)
			}
			if iv.Flows[0].Spike != tc.want {
				t.Fatalf("FlowRecord.Spike = %v, want %v", iv.Flows[0].Spike, tc.want)
			}
			if tc.want {
				e := ev[0]
				if e.Baseline != 1*ms || e.Threshold != 2*ms || e.Value != tc.delay || e.Value-e.Low != tc.ci95 || e.Kind != KindLatency || e.Signal != "delay" ||
					e.Key.SrcAddr().String() != "10.0.0.1" || e.Sender != "a" || e.Interval != next || e.Key.DPort != 443 || e.Key.Proto != 6 {
					t.Fatalf("event = %+v, want baseline 1ms, threshold 2ms, delay %v", e, tc.delay)
				}
			}
		})
	}
}

func TestWarmupSuppressesAlarms(t *testing.T) {
	d := newDetector(t, func(c *Config) { c.Warmup = 5 })
	next := warm(d, "10.0.0.1", 0, 4) // one interval short of warm-up
	if ev := d.Observe(interval(next, rec("10.0.0.1", 100*ms, 0)), nil); len(ev) != 0 {
		t.Fatalf("alarm during warm-up: %+v", ev)
	}
}

func TestUnsyncedNeitherAlarmsNorUpdates(t *testing.T) {
	d := newDetector(t, nil)
	next := warm(d, "10.0.0.1", 0, 5)
	for i := range 50 {
		r := rec("10.0.0.1", 100*ms, 0)
		r.Unsynced = true
		if ev := d.Observe(interval(next, r), nil); len(ev) != 0 {
			t.Fatalf("unsynced record alarmed: %+v", ev)
		}
		next++
		iv := interval(next, rec("10.0.0.1", 100*ms, 0))
		iv.Outcome = results.OutcomeUnsynced
		if ev := d.Observe(iv, nil); len(ev) != 0 || iv.Flows[0].Spike {
			t.Fatalf("unsynced interval alarmed: %+v", ev)
		}
		next++
		if ev := d.Observe(interval(next, rec("10.0.0.1", math.NaN(), math.NaN())), nil); len(ev) != 0 {
			t.Fatalf("record without delay alarmed (%d)", i)
		}
		next++
	}
	// Had any of the 100 ms values been folded in, the baseline would be far
	// above 1 ms and this would not spike.
	if ev := d.Observe(interval(next, rec("10.0.0.1", 2.5*ms, 0.4*ms)), nil); len(ev) != 1 || ev[0].Baseline != 1*ms {
		t.Fatalf("baseline moved by unsynced data: %+v", ev)
	}
}

func TestTrackedFilter(t *testing.T) {
	d := newDetector(t, nil)
	only := func(r *results.FlowRecord) bool { return r.Key.SrcAddr().String() == "10.0.0.1" }
	for i := range 5 {
		d.Observe(interval(int64(i), rec("10.0.0.1", 1*ms, 0), rec("10.0.0.2", 1*ms, 0)), only)
	}
	if d.Len() != 1 {
		t.Fatalf("untracked flow got a baseline: %d baselines", d.Len())
	}
	iv := interval(5, rec("10.0.0.1", 10*ms, 0), rec("10.0.0.2", 10*ms, 0))
	ev := d.Observe(iv, only)
	if len(ev) != 1 || ev[0].Key.SrcAddr().String() != "10.0.0.1" || iv.Flows[1].Spike {
		t.Fatalf("events = %+v, want only 10.0.0.1", ev)
	}
}

func TestMaxFlowsEvictsLeastRecentlySeen(t *testing.T) {
	d := newDetector(t, func(c *Config) { c.MaxFlows = 2 })
	// Flows 1 and 2 warm up; 1 is seen last.
	for i := range 5 {
		d.Observe(interval(int64(i), rec("10.0.0.2", 1*ms, 0), rec("10.0.0.1", 1*ms, 0)), nil)
	}
	d.Observe(interval(5, rec("10.0.0.1", 1*ms, 0)), nil)
	// Flow 3 arrives: 2 is the least recently seen and goes.
	d.Observe(interval(6, rec("10.0.0.3", 1*ms, 0)), nil)
	if d.Len() != 2 {
		t.Fatalf("%d baselines, want 2", d.Len())
	}
	iv := interval(7, rec("10.0.0.1", 10*ms, 0), rec("10.0.0.2", 10*ms, 0))
	ev := d.Observe(iv, nil)
	if len(ev) != 1 || ev[0].Key.SrcAddr().String() != "10.0.0.1" {
		t.Fatalf("events = %+v: want 10.0.0.1 (kept) to spike and 10.0.0.2 (evicted, no history) not", ev)
	}
	if d.Len() != 2 {
		t.Fatalf("%d baselines after re-adding, want 2", d.Len())
	}
}

// A lasting level shift alarms at first and then becomes the new normal.
func TestLevelShiftAdapts(t *testing.T) {
	d := newDetector(t, nil)
	next := warm(d, "10.0.0.1", 0, 20)
	var alarms, lastAlarm int
	for i := range 300 {
		if ev := d.Observe(interval(next, rec("10.0.0.1", 5*ms, 0.1*ms)), nil); len(ev) > 0 {
			alarms++
			lastAlarm = i
		}
		next++
	}
	if alarms == 0 {
		t.Fatal("a jump from 1 ms to 5 ms never alarmed")
	}
	t.Logf("1 ms -> 5 ms shift: %d alarms, the last %d intervals in", alarms, lastAlarm)
	if lastAlarm > 100 {
		t.Fatalf("still alarming %d intervals into a lasting shift", lastAlarm)
	}
}

// A small flow whose estimate is noisy (true delay constant, estimate noise
// σ = 0.5 ms, reported CI95 = 1.96σ) must not alarm.
func TestNoisyFlowNeverAlarms(t *testing.T) {
	d := newDetector(t, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	const sigma = 0.5 * ms
	for i := range 3000 {
		x := 1*ms + rng.NormFloat64()*sigma
		if ev := d.Observe(interval(int64(i), rec("10.0.0.1", x, 1.96*sigma)), nil); len(ev) != 0 {
			t.Fatalf("interval %d: false alarm %+v", i, ev[0])
		}
	}
}

func TestDisabled(t *testing.T) {
	d := newDetector(t, func(c *Config) { c.Enabled = false })
	warm(d, "10.0.0.1", 0, 10)
	if ev := d.Observe(interval(10, rec("10.0.0.1", 100*ms, 0)), nil); ev != nil || d.Len() != 0 {
		t.Fatalf("disabled detector acted: %v, %d baselines", ev, d.Len())
	}
}

func TestValidateNamesKeys(t *testing.T) {
	tests := []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Alpha = 0 }, "spike.alpha"},
		{func(c *Config) { c.Alpha = 1.5 }, "spike.alpha"},
		{func(c *Config) { c.Warmup = 0 }, "spike.warmup"},
		{func(c *Config) { c.K = -1 }, "spike.k"},
		{func(c *Config) { c.K = math.NaN() }, "spike.k"},
		{func(c *Config) { c.MinAbs = -time.Second }, "spike.min_abs"},
		{func(c *Config) { c.Rel = -0.1 }, "spike.rel"},
		{func(c *Config) { c.MaxFlows = 0 }, "spike.max_flows"},
		{func(c *Config) { c.K, c.MinAbs, c.Rel = 0, 0, 0 }, "spike.k, spike.min_abs, spike.rel"},
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for _, tc := range tests {
		c := DefaultConfig()
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error naming %q", err, tc.want)
		}
		if _, err := New(c); err == nil {
			t.Errorf("New accepted invalid config (%s)", tc.want)
		}
	}
}

func TestObserveSteadyStateAllocatesNothing(t *testing.T) {
	d := newDetector(t, nil)
	var recs []results.FlowRecord
	for i := range 200 {
		recs = append(recs, rec("10.0.0."+strconv.Itoa(i%100), 1*ms, 0.1*ms))
		recs[i].Key.SPort = uint16(i)
	}
	iv := interval(1, recs...)
	d.Observe(iv, nil)
	if a := testing.AllocsPerRun(50, func() { d.Observe(iv, nil) }); a != 0 {
		t.Fatalf("Observe allocates %.1f per interval in steady state, want 0", a)
	}
}

func BenchmarkObserve10kFlows(b *testing.B) {
	d, _ := New(DefaultConfig())
	recs := make([]results.FlowRecord, 10000)
	for i := range recs {
		recs[i] = rec("10.0.0.1", 1*ms, 0.1*ms)
		recs[i].Key.SPort, recs[i].Key.DPort = uint16(i), uint16(i>>16)
	}
	iv := interval(1, recs...)
	b.ReportAllocs()
	for b.Loop() {
		d.Observe(iv, nil)
	}
}

// One outlier moves the baseline by at most alpha·margin and leaves the
// deviation (so the margin) unchanged: by hand, baseline 1 ms + 0.1·(2 ms −
// 1 ms) = 1.1 ms, dev 0, threshold 1.1 ms + max(0, 1 ms, 0.55 ms) = 2.1 ms.
func TestOutlierDoesNotWidenMargin(t *testing.T) {
	d := newDetector(t, nil)
	next := warm(d, "10.0.0.1", 0, 10)
	if ev := d.Observe(interval(next, rec("10.0.0.1", 50*ms, 0.1*ms)), nil); len(ev) != 1 {
		t.Fatalf("50 ms outlier: %d events, want 1", len(ev))
	}
	ev := d.Observe(interval(next+1, rec("10.0.0.1", 2.5*ms, 0.3*ms)), nil)
	if len(ev) != 1 {
		t.Fatal("2.5 ms ± 0.3 ms after the outlier did not spike")
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
	if !near(ev[0].Baseline, 1.1*ms) || ev[0].Dev != 0 || !near(ev[0].Threshold, 2.1*ms) {
		t.Fatalf("after one outlier: baseline %v dev %v threshold %v, want 1.1 ms, 0, 2.1 ms", ev[0].Baseline, ev[0].Dev, ev[0].Threshold)
	}
}

// lossRec is a record of n packets of which lost were lost (no delay).
func lossRec(src string, n, lost float64) results.FlowRecord {
	r := rec(src, math.NaN(), math.NaN())
	r.Packets, r.Loss = n, results.Float(lost)
	return r
}

func TestLossSpike(t *testing.T) {
	tests := []struct {
		name      string
		n, lost   float64
		status    results.Status
		wantSpike bool
	}{
		{"a fifth lost", 500, 100, "", true},
		{"3 of 500: below 2 points", 500, 3, "", false},
		{"5 of 20: 25 % but the Wilson bound is 11 %", 20, 5, "", true},
		{"2 of 10: bound 5.7 %", 10, 2, "", true},
		{"1 of 10: bound 1.8 %", 10, 1, "", false},
		{"capture drops: withheld", 500, 100, results.StatusCaptureDrops, false},
		{"beyond the window: withheld", 500, 100, results.StatusBeyondWindow, false},
		{"clock unsynced: withheld", 500, 100, results.StatusClockUnsynced, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDetector(t, nil)
			for i := range 5 {
				d.Observe(interval(int64(i), lossRec("10.0.0.1", 500, 0)), nil)
			}
			r := lossRec("10.0.0.1", tc.n, tc.lost)
			r.Status = tc.status
			iv := interval(5, r)
			ev := d.Observe(iv, nil)
			if got := len(ev) == 1; got != tc.wantSpike || iv.Flows[0].LossSpike != tc.wantSpike || iv.Flows[0].Spike {
				t.Fatalf("events %+v, loss_spike %v, spike %v; want loss spike %v", ev, iv.Flows[0].LossSpike, iv.Flows[0].Spike, tc.wantSpike)
			}
			if tc.wantSpike && (ev[0].Kind != KindLoss || ev[0].Value != tc.lost/tc.n || ev[0].Baseline != 0 || ev[0].Threshold != 0.02) {
				t.Fatalf("event %+v: want kind loss, value %v, baseline 0, threshold 0.02", ev[0], tc.lost/tc.n)
			}
		})
	}
}

// A withheld loss leaves the baseline as it was: the next measured
// interval is compared with the history before it.
func TestWithheldLossDoesNotUpdate(t *testing.T) {
	d := newDetector(t, nil)
	for i := range 5 {
		d.Observe(interval(int64(i), lossRec("10.0.0.1", 500, 0)), nil)
	}
	for i := range 20 {
		r := lossRec("10.0.0.1", 500, 250)
		r.Status = results.StatusCaptureDrops
		d.Observe(interval(int64(5+i), r), nil)
	}
	if ev := d.Observe(interval(25, lossRec("10.0.0.1", 500, 100)), nil); len(ev) != 1 {
		t.Fatalf("a fifth lost after withheld intervals: %d events, want 1 (the baseline must still be 0)", len(ev))
	}
}

// The p99 spikes where samples give one, even while the mean stays put
// (a tail that grows) or while there is no mean at all.
func TestP99Spike(t *testing.T) {
	d := newDetector(t, nil)
	p99 := func(id int64, delay, p float64) *results.Interval {
		r := rec("10.0.0.1", delay, 0.1*ms)
		r.P99NS, r.P99LowNS = results.Float(p), results.Float(p-0.5*ms)
		return interval(id, r)
	}
	for i := range 5 {
		d.Observe(p99(int64(i), 1*ms, 3*ms), nil)
	}
	iv := p99(5, 1.2*ms, 9*ms)
	ev := d.Observe(iv, nil)
	if len(ev) != 1 || ev[0].Signal != "p99" || ev[0].Kind != KindLatency || !iv.Flows[0].Spike {
		t.Fatalf("p99 3 ms -> 9 ms with the mean at 1.2 ms: events %+v", ev)
	}
	iv = p99(6, math.NaN(), 9*ms)
	if ev := d.Observe(iv, nil); len(ev) != 1 || ev[0].Signal != "p99" {
		t.Fatalf("p99 9 ms without a mean: events %+v", ev)
	}
	// Both the mean and the p99: one latency event.
	iv = p99(7, 20*ms, 40*ms)
	if ev := d.Observe(iv, nil); len(ev) != 1 || ev[0].Signal != "delay" {
		t.Fatalf("mean and p99 both up: events %+v, want one (delay)", ev)
	}
	// One slow packet makes the p99, not its lower bound (the third
	// largest of 50 samples): no alarm.
	r := rec("10.0.0.1", 1*ms, 0.1*ms)
	r.P99NS, r.P99LowNS = results.Float(30*ms), results.Float(3.1*ms)
	if ev := d.Observe(interval(8, r), nil); len(ev) != 0 {
		t.Fatalf("p99 30 ms with its lower bound at 3.1 ms: events %+v, want none", ev)
	}
	// Without a lower bound the p99 never alarms.
	r = rec("10.0.0.1", 1*ms, 0.1*ms)
	r.P99NS = results.Float(90 * ms)
	if ev := d.Observe(interval(9, r), nil); len(ev) != 0 {
		t.Fatalf("p99 without p99_low_ns: events %+v, want none", ev)
	}
}

// TestThresholdTradeoffs measures recall and false alarms of the rules on
// synthetic flows (docs/operations.md, "Spikes"): 2,000 flows of 500
// packets an interval over 60 intervals, delay 2 ms with per-packet
// spread 1 ms (interval mean noise ±45 µs, ci95 from it), background loss
// 0.5 % (binomial), p99 of 100 samples of the same spread (noise ±0.25 ms,
// its lower bound about 0.3 ms below); from interval
// 30 to 34 half of the flows get a step of the delay (× delayX, the p99
// moving with it) and of the loss (+ lossUp). Recall: stepped flows
// flagged in at least one stepped interval; false alarms: flagged
// flow-intervals outside the steps (and the five after each), per
// flow-interval.
func TestThresholdTradeoffs(t *testing.T) {
	type res struct{ recallDelay, recallLoss, faDelay, faLoss float64 }
	run := func(delayX, lossUp float64, mod func(*Config)) res {
		d := newDetector(t, func(c *Config) { c.MaxFlows = 5000; mod(c) })
		rng := rand.New(rand.NewPCG(7, 8))
		const flows, ivs, n = 2000, 60, 500.0
		hitD, hitL := make([]bool, flows), make([]bool, flows)
		var faD, faL, quiet int
		for id := range int64(ivs) {
			recs := make([]results.FlowRecord, flows)
			for f := range flows {
				step := f%2 == 0 && id >= 30 && id < 35
				mean, p := 2*ms, 0.005
				if step {
					mean, p = 2*ms*delayX, p+lossUp
				}
				lost := 0.0
				for range int(n) {
					if rng.Float64() < p {
						lost++
					}
				}
				se := 1 * ms / math.Sqrt(n-lost)
				r := lossRec("10.0.0.1", n, lost)
				r.Key.SPort = uint16(f)
				r.DelayNS, r.CI95NS = results.Float(mean+rng.NormFloat64()*se), results.Float(1.96*se)
				p99 := mean + 2.33*ms + rng.NormFloat64()*0.25*ms
				r.P99NS, r.P99LowNS = results.Float(p99), results.Float(p99-math.Abs(0.3*ms+rng.NormFloat64()*0.1*ms))
				recs[f] = r
			}
			iv := interval(id, recs...)
			d.Observe(iv, nil)
			for f := range flows {
				r := &iv.Flows[f]
				if f%2 == 0 && id >= 30 && id < 35 {
					hitD[f] = hitD[f] || r.Spike
					hitL[f] = hitL[f] || r.LossSpike
					continue
				}
				if f%2 == 0 && id >= 35 && id < 40 {
					continue // the step's end: not held to quiet
				}
				quiet++
				if r.Spike {
					faD++
				}
				if r.LossSpike {
					faL++
				}
			}
		}
		var rd, rl int
		for f := 0; f < flows; f += 2 {
			if hitD[f] {
				rd++
			}
			if hitL[f] {
				rl++
			}
		}
		return res{float64(rd) / (flows / 2), float64(rl) / (flows / 2), float64(faD) / float64(quiet), float64(faL) / float64(quiet)}
	}
	none := func(*Config) {}
	def := run(2, 0.05, none)
	t.Logf("defaults, delay x2, loss +5 points: delay recall %.3f, false alarms %.2g per flow-interval; loss recall %.3f, false alarms %.2g", def.recallDelay, def.faDelay, def.recallLoss, def.faLoss)
	for _, step := range [][2]float64{{1.5, 0.02}, {1.6, 0.025}, {3, 0.1}} {
		r := run(step[0], step[1], none)
		t.Logf("defaults, delay x%v, loss +%v: delay recall %.3f, false alarms %.2g; loss recall %.3f, false alarms %.2g", step[0], step[1], r.recallDelay, r.faDelay, r.recallLoss, r.faLoss)
	}
	for _, alt := range []struct {
		name string
		mod  func(*Config)
	}{
		{"k 1", func(c *Config) { c.K = 1 }},
		{"rel 0.1, min_abs 0.1ms, k 4", func(c *Config) { c.Rel, c.MinAbs = 0.1, 100*time.Microsecond }},
		{"rel 0.1, min_abs 0.1ms, k 1", func(c *Config) { c.Rel, c.MinAbs, c.K = 0.1, 100*time.Microsecond, 1 }},
		{"rel 0.25", func(c *Config) { c.Rel = 0.25 }},
		{"loss_min_abs 0.005, loss_rel 0", func(c *Config) { c.LossMinAbs, c.LossRel = 0.005, 0 }},
		{"loss_min_abs 0.01", func(c *Config) { c.LossMinAbs = 0.01 }},
		{"warmup 1", func(c *Config) { c.Warmup = 1 }},
	} {
		r := run(1.25, 0.015, alt.mod)
		t.Logf("%s, delay x1.25, loss +1.5 points: delay recall %.3f, false alarms %.2g; loss recall %.3f, false alarms %.2g", alt.name, r.recallDelay, r.faDelay, r.recallLoss, r.faLoss)
	}
	if def.recallDelay < 0.99 || def.recallLoss < 0.99 || def.faDelay > 1e-3 || def.faLoss > 1e-3 {
		t.Errorf("defaults: recall %.3f / %.3f (want >= 0.99), false alarms %.2g / %.2g (want <= 1e-3)", def.recallDelay, def.recallLoss, def.faDelay, def.faLoss)
	}
}
