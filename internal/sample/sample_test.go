package sample

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lds-net/lds/internal/capture"
)

type pkt struct {
	p     capture.Packet
	rx    int64
	lost  bool
	delay int64
}

// trace makes flows of Pareto-ish sizes over a few 100 ms intervals, with
// delays up to 15 ms and some loss: packets near every boundary straddle it.
func trace(seed uint64, flows int, loss float64) []pkt {
	r := rand.New(rand.NewPCG(seed, 1))
	const t = int64(100e6)
	var out []pkt
	for f := range flows {
		n := 5 + int(20/math.Pow(r.Float64()+1e-3, 0.9))
		fh := r.Uint64()
		base := int64(r.IntN(5e6))
		for range n {
			ts := t + r.Int64N(4*t)
			d := base + r.Int64N(10e6)
			out = append(out, pkt{p: capture.Packet{TS: ts, FlowHash: fh, PktHash: r.Uint64(), Class: uint16(f % 2)},
				rx: ts + d, delay: d, lost: r.Float64() < loss})
		}
	}
	slices.SortFunc(out, func(a, b pkt) int { return int(a.p.TS - b.p.TS) })
	return out
}

// TestJoinExact: every joined delay is the packet's true delay, every
// sample called lost was lost, and every sampled lost packet is called lost.
func TestJoinExact(t *testing.T) {
	const T, md, guard = int64(100e6), int64(20e6), int64(1e6)
	for _, tc := range []struct {
		name string
		loss float64
		cfg  Config
	}{
		{"no-loss", 0, Config{OneIn: 4, PerFlow: 64, MaxPerInterval: 1 << 20, LinkOneIn: 16, MaxCandidates: 1 << 20}},
		{"loss", 0.05, Config{OneIn: 4, PerFlow: 64, MaxPerInterval: 1 << 20, LinkOneIn: 16, MaxCandidates: 1 << 20}},
		{"halving", 0.05, Config{OneIn: 1, PerFlow: 32, MaxPerInterval: 3000, LinkOneIn: 4, MaxCandidates: 1024}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := trace(7, 400, tc.loss)
			type key struct {
				flow uint64
				ts   int64
			}
			bySend := map[key][]*pkt{}
			sm := NewSampler(tc.cfg, T, nil)
			for i := range tr {
				k := key{tr[i].p.FlowHash, tr[i].p.TS}
				bySend[k] = append(bySend[k], &tr[i])
				sm.Add(&tr[i].p)
			}
			sets := map[int64]*Set{}
			for id := int64(1); id <= 4; id++ {
				c := sm.Take(id)
				if c == nil {
					t.Fatalf("no candidates for interval %d", id)
				}
				s := Select(c, id*T, tc.cfg)
				b, err := s.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				if sets[id], err = Unmarshal(b, T); err != nil {
					t.Fatal(err)
				}
				if n := sets[id].Samples(); n > tc.cfg.MaxPerInterval {
					t.Fatalf("interval %d: %d samples over the budget %d", id, n, tc.cfg.MaxPerInterval)
				}
			}
			rx := slices.Clone(tr)
			slices.SortFunc(rx, func(a, b pkt) int { return int(a.rx - b.rx) })
			st := NewReceiverStore(tc.cfg, 0)
			ps := NewPieces(16)
			next := int64(0)
			for i := range rx {
				if rx[i].lost {
					continue
				}
				for (next+1)*T+md <= rx[i].rx {
					st.Cut(next, ps.Put)
					next++
				}
				p := rx[i].p
				p.TS = rx[i].rx
				st.Add(&p)
			}
			for ; next <= 4; next++ {
				st.Cut(next, ps.Put)
			}
			var joined, lost, amb int
			for id := int64(1); id <= 4; id++ {
				j := Join(ps, id, sets[id], Window{T: T, MaxDelay: md, Guard: guard})
				for _, l := range sets[id].Flows {
					d := j.Flows[l.Flow]
					// Every received sampled packet of the flow shows up.
					var want []float64
					wantLost := 0
					for _, smp := range l.Samples {
						var p *pkt
						for _, q := range bySend[key{l.Flow, id*T + smp.SendTime}] {
							if Mix(q.p.PktHash)>>l.Shift == smp.Q {
								p = q
							}
						}
						if p == nil {
							t.Fatalf("sample %+v of flow %x matches no sent packet", smp, l.Flow)
						}
						if p.lost {
							wantLost++
						} else {
							want = append(want, float64(p.delay))
						}
					}
					slices.Sort(want)
					if d.Ambiguous == 0 && (!slices.Equal(d.Delays, want) || d.Lost != wantLost) {
						t.Fatalf("interval %d flow %x: joined %v lost %d, truth %v lost %d", id, l.Flow, d.Delays, d.Lost, want, wantLost)
					}
					joined += len(d.Delays)
					lost += d.Lost
					amb += d.Ambiguous
				}
				if len(j.Link) == 0 {
					t.Fatalf("interval %d: empty link sample", id)
				}
			}
			if joined == 0 || (tc.loss > 0) != (lost > 0) || amb*100 > joined {
				t.Fatalf("joined %d, lost %d, ambiguous %d", joined, lost, amb)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5}
	for _, tc := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {0.9, 4.6}, {1, 5}} {
		if got := Quantile(v, tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := Stddev([]float64{2, 4, 4, 4, 5, 5, 7, 9}); math.Abs(got-2.138089935) > 1e-6 {
		t.Errorf("Stddev = %v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	floor := DefaultConfig()
	floor.MinPerFlow = -1
	for _, c := range []Config{{OneIn: 3, PerFlow: 1, LinkOneIn: 0, MaxCandidates: 1 << 20}, {OneIn: 8, PerFlow: 1, LinkOneIn: 4, MaxCandidates: 1 << 20}, floor} {
		if c.Validate() == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// cands makes an interval's sender candidates: n[flow] of each flow, with
// distinct sampling values and send times.
func cands(n map[uint64]int) *SenderCands {
	c := &SenderCands{Limit: 1 << 62, Drop: 30, T: 1e9}
	r := rand.New(rand.NewPCG(uint64(len(n)), 2))
	for f, k := range n {
		for range k {
			c.C = append(c.C, SenderCand{Flow: f, X: r.Uint64()>>32<<32 | uint64(r.Uint32N(1e9))})
		}
	}
	return c
}

// TestSelectBudget: each shipped flow ships its smallest S; the flows of
// at least min_per_flow (and MinP50) candidates get min_per_flow,
// heaviest first, while the floors stay within half the budget; the max_per_interval / per_flow heaviest of them (the tracked
// share) are raised to a common cap with what the floors leave; the next
// such flows are raised up to per_flow each from what that cap leaves (a
// flow without a floor only while MinP50 are left), and the flows too
// light for any figure get what is left after them, whole; the budget is
// never exceeded. Floor 0 is the rule without a floor.
func TestSelectBudget(t *testing.T) {
	for _, tc := range []struct {
		name  string
		floor int
		n     map[uint64]int
		want  map[uint64]int // samples per flow (absent: none)
	}{
		// Without the light flows, flow 2 ships whole and flow 1 gets
		// the rest (cap 65); shipping six of the 9-candidate flows, as
		// admission by weight alone would, leaves flow 1 at 23.
		{"light flows skipped", 0, map[uint64]int{1: 200, 2: 35, 3: 9, 4: 9, 5: 9, 6: 9, 7: 9, 8: 9, 9: 9, 10: 9, 11: 1},
			map[uint64]int{1: 65, 2: 35}},
		// Exactly MinP50 is enough for a p50 and shares the cap; one
		// fewer waits for what the cap leaves (nothing).
		{"at the minimum", 0, map[uint64]int{1: 200, 2: MinP50, 3: MinP50 - 1}, map[uint64]int{1: 90, 2: MinP50}},
		// Flows 2-5 fill the tracked share of 5 flows with flow 1, whose
		// cap (40) takes the rest of the budget; sharing it with flows 6
		// and 7 too would leave flow 1 at 25.
		{"tracked share first", 0, map[uint64]int{1: 300, 2: 15, 3: 15, 4: 15, 5: 15, 6: 15, 7: 15},
			map[uint64]int{1: 40, 2: 15, 3: 15, 4: 15, 5: 15}},
		// The tracked share ships whole (78): the next flow gets its 12,
		// the one after the 10 left (MinP50), the light flow nothing.
		{"after the tracked share", 0, map[uint64]int{1: 30, 2: 12, 3: 12, 4: 12, 5: 12, 6: 12, 7: 12, 8: 9},
			map[uint64]int{1: 30, 2: 12, 3: 12, 4: 12, 5: 12, 6: 12, 7: MinP50}},
		// More flows than fit at per_flow: the heaviest 5 at 20 each.
		{"budget short", 0, map[uint64]int{1: 90, 2: 80, 3: 70, 4: 60, 5: 50, 6: 40, 7: 30},
			map[uint64]int{1: 20, 2: 20, 3: 20, 4: 20, 5: 20}},
		// Water-filling: the budget left by the 12-candidate flow goes
		// to the two heavy ones.
		{"water-fill", 0, map[uint64]int{1: 500, 2: 400, 3: 12}, map[uint64]int{1: 44, 2: 44, 3: 12}},
		// Flow 1 ships whole (80); of the 20 left, two light flows fit.
		{"light flows after the cap", 0, map[uint64]int{1: 80, 2: 9, 3: 8, 4: 7, 5: 1}, map[uint64]int{1: 80, 2: 9, 3: 8}},
		{"only light flows", 0, map[uint64]int{1: 9, 2: 3}, map[uint64]int{1: 9, 2: 3}},
		// "tracked share first" with a floor of 5: flows 1-10 get 5 each
		// (50, half the budget; flow 11 would exceed it), then the
		// tracked share (flows 1-5) is raised to a common cap of 15 with
		// the 50 left; flows 6-10 keep their floor.
		{"floor first", 5, map[uint64]int{1: 300, 2: 15, 3: 15, 4: 15, 5: 15, 6: 15, 7: 15, 8: 15, 9: 15, 10: 15, 11: 15},
			map[uint64]int{1: 15, 2: 15, 3: 15, 4: 15, 5: 15, 6: 5, 7: 5, 8: 5, 9: 5, 10: 5}},
		// Floors of 5 for all 8 flows (40); the tracked share ships
		// whole (53 more), flow 6 is raised to its 12 with the 7 left,
		// flows 7 and 8 keep their floor.
		{"raised from the floor", 5, map[uint64]int{1: 30, 2: 12, 3: 12, 4: 12, 5: 12, 6: 12, 7: 12, 8: 12},
			map[uint64]int{1: 30, 2: 12, 3: 12, 4: 12, 5: 12, 6: 12, 7: 5, 8: 5}},
		// A flow of fewer than MinP50 candidates gets no floor, nor what
		// the cap leaves (nothing); flow 2's floor of 8 is raised with
		// the tracked share's cap (90).
		{"no floor for light flows", 8, map[uint64]int{1: 200, 2: MinP50, 3: 3},
			map[uint64]int{1: 90, 2: MinP50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cands(tc.n)
			bySmallest := map[uint64][]uint64{}
			for _, x := range c.C {
				bySmallest[x.Flow] = append(bySmallest[x.Flow], c.S(x))
			}
			cfg := Config{OneIn: 4, PerFlow: 20, MinPerFlow: tc.floor, MaxPerInterval: 100, MaxCandidates: 1 << 20}
			s := Select(c, 0, cfg)
			if n := s.Samples(); n > cfg.MaxPerInterval {
				t.Fatalf("%d samples over the budget %d", n, cfg.MaxPerInterval)
			}
			got := map[uint64]int{}
			for _, l := range s.Flows {
				got[l.Flow] = len(l.Samples)
				all := bySmallest[l.Flow]
				slices.Sort(all)
				for i, smp := range l.Samples {
					if want := all[i] >> l.Shift; smp.Q != want {
						t.Fatalf("flow %d sample %d: Q %x, want the %d-th smallest S %x", l.Flow, i, smp.Q, i, want)
					}
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("samples per flow %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzUnmarshal(f *testing.F) {
	s := Select(cands(map[uint64]int{1: MinP50, 2: MinP50 + 3}), 0, DefaultConfig())
	b, _ := s.MarshalBinary()
	f.Add(b)
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Unmarshal(b, 1e9)
		if err != nil {
			return
		}
		again, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Unmarshal(again, 1e9)
		if err != nil || s2.Samples() != s.Samples() {
			t.Fatalf("re-encoding changed the set: %v", err)
		}
	})
}

// TestSamplerRecord: the sender's 16-byte candidate keeps s to Drop bits
// and the send time exactly up to 4.29 s intervals, within half a unit
// and inside the interval beyond; the buffer grows past its first size.
func TestSamplerRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		T    int64
		unit uint8
	}{{"100ms", 100e6, 0}, {"1s", 1e9, 0}, {"4s", 4e9, 0}, {"300s", 300e9, 7}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			sm := NewSampler(cfg, tc.T, nil)
			r := rand.New(rand.NewPCG(3, 4))
			const n = 40000
			sent := map[uint64]int64{} // s (Drop bits cleared) -> send time
			id := int64(5)
			var ts []int64
			for range n {
				ts = append(ts, id*tc.T+r.Int64N(tc.T))
			}
			ts = append(ts, id*tc.T, (id+1)*tc.T-1)
			slices.Sort(ts)
			for _, x := range ts {
				p := capture.Packet{TS: x, FlowHash: r.Uint64N(50), PktHash: r.Uint64()}
				if s := Mix(p.PktHash); s < limitOf(cfg.level()) {
					sent[s>>sm.drop<<sm.drop] = x - id*tc.T
				}
				sm.Add(&p)
			}
			c := sm.Take(id)
			if c == nil || len(c.C) != len(sent) || c.Unit != tc.unit {
				t.Fatalf("took %v candidates (unit %d), want %d (unit %d)", c != nil, c.Unit, len(sent), tc.unit)
			}
			half := int64(0)
			if c.Unit > 0 {
				half = 1 << (c.Unit - 1)
			}
			for _, x := range c.C {
				want, ok := sent[c.S(x)]
				if !ok {
					t.Fatalf("candidate s %x was not sent", c.S(x))
				}
				if got := c.SendTime(x); got < 0 || got >= tc.T || got-want > half || want-got > half {
					t.Fatalf("send time %d, want %d within %d, in [0, %d)", got, want, half, tc.T)
				}
			}
		})
	}
}

// TestMeanDelay: the mean of joined delays with Student's t half-width,
// by hand; nothing below MinMean.
func TestMeanDelay(t *testing.T) {
	d := FlowDist{Delays: []float64{1, 2, 3, 4, 5}}
	m := d.MeanDelay()
	// s = √2.5, s/√5 = √0.5, t(0.975, 4) = 2.776.
	if m.N != 5 || m.Mean != 3 || math.Abs(m.CI95-2.776*math.Sqrt(0.5)) > 1e-12 || math.Abs(m.Var-0.5) > 1e-12 {
		t.Fatalf("mean %+v, want 3 ± %v", m, 2.776*math.Sqrt(0.5))
	}
	short := FlowDist{Delays: []float64{1, 2, 3, 4}}
	if m := short.MeanDelay(); !math.IsNaN(m.Mean) || !math.IsNaN(m.CI95) {
		t.Fatalf("4 samples: %+v, want NaN", m)
	}
	for _, tc := range []struct {
		df   int
		want float64
	}{{1, 12.706}, {30, 2.042}, {40, 2.021}, {60, 2.000}, {120, 1.980}, {1000, 1.962}} {
		if got := T975(tc.df); math.Abs(got-tc.want) > 1.5e-3 {
			t.Errorf("T975(%d) = %v, want %v", tc.df, got, tc.want)
		}
	}
}

// TestP99LowRank: the rank is a 95 % lower bound of the p99 (checked
// against the exact binomial tail) and never the largest sample.
func TestP99LowRank(t *testing.T) {
	// P(Binomial(n, 0.99) >= k) = P(at most n−k failures of p = 0.01).
	atLeast := func(n, k int) float64 {
		var p float64
		for f := 0; f <= n-k; f++ {
			p += math.Exp(lgamma(n+1)-lgamma(f+1)-lgamma(n-f+1)) * math.Pow(0.01, float64(f)) * math.Pow(0.99, float64(n-f))
		}
		return p
	}
	for _, n := range []int{MinP99, 83, 100, 160, 1000} {
		k := P99LowRank(n)
		if k >= n || atLeast(n, k) < 0.95 {
			t.Errorf("n %d: rank %d covers the p99 with probability %.3f, want >= 0.95 and below the largest", n, k, atLeast(n, k))
		}
	}
	d := FlowDist{Delays: make([]float64, 50)}
	for i := range d.Delays {
		d.Delays[i] = float64(i)
	}
	d.Delays[49] = 1e9 // one slow packet moves the p99, not its bound
	if s := d.Summarize(); s.P99Low != 47 || !(s.P99 > 1e8) {
		t.Fatalf("p99 %v, bound %v; want above 1e8 and 47", s.P99, s.P99Low)
	}
}

func lgamma(n int) float64 { v, _ := math.Lgamma(float64(n)); return v }
