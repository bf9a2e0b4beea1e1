package replay

import (
	"cmp"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/tools/gen"
)

// reorderTruth is, per (send interval, flow), the packets received after a
// packet of the flow sent later (RFC 4737), from the generator's own send
// and receive times.
func reorderTruth(pkts map[capture.FlowKey][]gen.PacketTruth) map[flowIv]int {
	out := map[flowIv]int{}
	for k, ps := range pkts {
		slices.SortFunc(ps, func(a, b gen.PacketTruth) int { return cmp.Compare(b.SendNS, a.SendNS) })
		first := int64(math.MaxInt64) // earliest receive time of the packets sent later
		for _, p := range ps {
			if p.Lost {
				continue
			}
			if p.RecvNS > first {
				out[flowIv{p.Interval, k}]++
			}
			first = min(first, p.RecvNS)
		}
	}
	return out
}

// reorderScenario: 40 long flows at 60 kpps (~1500 packets a flow and
// interval), each packet's delay drawn independently from delay.
func reorderScenario(seed uint64, delay gen.DelayModel) gen.Scenario {
	sc := scenario(seed, 0)
	sc.Flows, sc.RatePPS, sc.Duration = 40, 60000, 4*time.Second
	sc.FlowSize = gen.FlowSize{Dist: "fixed", Sizes: []int{6000}}
	sc.Lifetime = gen.Lifetime{Min: 4 * time.Second, Max: 4 * time.Second}
	sc.Classes[0].Delay = delay
	sc.Classes[0].Loss = gen.LossModel{Kind: "uniform", P: 0.002}
	return sc
}

// replayReorder replays sc and returns the reordering truth, the flows'
// packets per interval, and the records.
func replayReorder(t *testing.T, sc gen.Scenario) (map[flowIv]int, lostRun) {
	t.Helper()
	pkts := map[capture.FlowKey][]gen.PacketTruth{}
	r := replayLostWith(t, sc, nil, func(p *gen.PacketTruth) {
		c := *p
		c.Key = nil
		pkts[*p.Key] = append(pkts[*p.Key], c)
	})
	return reorderTruth(pkts), r
}

// TestReorderingPerFlow: on a trace whose per-packet delays are drawn
// independently (uniform 0.1–20 ms: heavy reordering), at least 90 % of
// the flow-intervals of >= 1000 packets carry reordered, with a median
// relative error of at most 25 % against the generator's truth; on a trace
// with one constant delay, every flow reports none.
func TestReorderingPerFlow(t *testing.T) {
	truth, r := replayReorder(t, reorderScenario(51, gen.DelayModel{Kind: gen.DelayUniform, Min: 100 * time.Microsecond, Max: 20 * time.Millisecond}))
	var big, carried int
	var rel []float64
	for fi, sent := range r.truth.sent {
		if sent < 1000 || r.summaries[fi.Interval] == nil {
			continue
		}
		big++
		rec, ok := r.recs[fi]
		if !ok || rec.Reordered == nil {
			continue
		}
		carried++
		if want := truth[fi]; want > 0 {
			rel = append(rel, math.Abs(*rec.Reordered-float64(want))/float64(want))
		}
	}
	slices.Sort(rel)
	med := math.NaN()
	if len(rel) > 0 {
		med = rel[len(rel)/2]
	}
	t.Logf("independent delays: %d flow-intervals of >= 1000 packets, %d carry reordered; median relative error %.3f over %d with true reordering",
		big, carried, med, len(rel))
	if big < 50 {
		t.Fatalf("scenario too small: %d flow-intervals of >= 1000 packets", big)
	}
	if carried*10 < 9*big {
		t.Errorf("reordered on %d of %d flow-intervals of >= 1000 packets, want >= 90 %%", carried, big)
	}
	if !(med <= 0.25) {
		t.Errorf("median relative error of reordered %.3f, want <= 0.25", med)
	}

	truth, r = replayReorder(t, reorderScenario(53, gen.DelayModel{Kind: gen.DelayConstant, Value: 3 * time.Millisecond}))
	var none, some int
	for fi, rec := range r.recs {
		if truth[fi] != 0 {
			t.Fatalf("constant delay: the generator reordered %d packets of %v", truth[fi], fi)
		}
		if rec.Reordered != nil && *rec.Reordered != 0 {
			some++
			t.Errorf("constant delay: flow %v interval %d reports reordered %v", fi.Key, fi.Interval, *rec.Reordered)
		} else if rec.Reordered != nil {
			none++
		}
	}
	t.Logf("constant delay: %d records report reordered 0, %d more", none, some)
	if none < 50 {
		t.Errorf("constant delay: only %d records report reordered 0", none)
	}
}
