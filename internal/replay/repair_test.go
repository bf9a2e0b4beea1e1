package replay

import (
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/gen"
	"github.com/lds-net/lds/tools/join"
)

// repairRun is one replay of the heavy-loss trace with the lost-packet
// summaries of its intervals.
type repairRun struct {
	run
	lists map[int64]results.LostSummary
	links map[int64]results.LinkRecord // the default class's
}

func replayRepair(t *testing.T, sc gen.Scenario, capacity int, repair bool) repairRun {
	t.Helper()
	var mu sync.Mutex
	lists := map[int64]results.LostSummary{}
	links := map[int64]results.LinkRecord{}
	r := replayScenario(t, sc, func(o *Options) {
		o.Config.Lost.Capacity = capacity
		o.NoLostRepair = !repair
		o.OnInterval = func(iv *results.Interval) {
			mu.Lock()
			defer mu.Unlock()
			if iv.LostList != nil {
				lists[iv.Interval] = *iv.LostList
			}
			if len(iv.Links) == 1 {
				links[iv.Interval] = iv.Links[0]
			}
		}
	})
	return repairRun{run: r, lists: lists, links: links}
}

// relErr is |delay − truth| / truth of a flow-interval's record, NaN
// without a record or a delay.
func relErr(r run, id join.FlowID, f *join.Flow) float64 {
	rec, ok := r.recs[id]
	if !ok || rec.DelayNS == nil || !(f.MeanNS > 0) {
		return math.NaN()
	}
	return math.Abs(*rec.DelayNS-f.MeanNS) / f.MeanNS
}

func pct(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[min(len(v)-1, int(q*float64(len(v))))]
}

// TestReplayLostRepair: on the heavy-loss trace (a fifth of the flows
// losing 20–50 % of their packets, bimodal delays), with a lost-packet
// table large enough to list every loss and every lost packet given its
// exact send time by the sender's answer (the second round), every
// flow-interval of >= 100 packets in an interval whose list is complete
// has a mean delay within 5 % of the exact join's, from the sketch; the
// same run without the repair is measured beside it. With a table too small (every list incomplete), the records are the
// same with and without the repair.
//
// LDS_REPAIR=flows,packets/s,seconds,seed runs that trace instead.
func TestReplayLostRepair(t *testing.T) {
	tc := heavyLossCase{21, 600, 30000, 4 * time.Second}
	if v := os.Getenv("LDS_REPAIR"); v != "" {
		var secs float64
		if _, err := fmt.Sscanf(v, "%d,%g,%g,%d", &tc.flows, &tc.pps, &secs, &tc.seed); err != nil {
			t.Fatalf("LDS_REPAIR=%q: %v (want flows,packets/s,seconds,seed)", v, err)
		}
		tc.d = time.Duration(secs * float64(time.Second))
	}
	sc := heavyLossScenario(tc.seed, tc.flows, tc.pps, tc.d)
	const capacity = 50000 // lists every loss of these traces (up to about 30,000 an interval)
	after := replayRepair(t, sc, capacity, true)
	before := replayRepair(t, sc, capacity, false)

	var errAfter, errBefore, lossyAfter, lossyBefore []float64
	var big, complete, within, repaired int
	for id, f := range after.truth.Flows {
		if f.Sent < 100 {
			continue
		}
		big++
		l, ok := after.lists[id.Interval]
		if !ok || !l.Complete {
			continue
		}
		complete++
		ea, eb := relErr(after.run, id, f), relErr(before.run, id, f)
		rec := after.recs[id]
		if rec.RepairedCells > 0 {
			repaired++
		}
		if math.IsNaN(ea) || !(ea <= 0.05) {
			t.Errorf("flow %v interval %d (%d sent, %d lost): repaired delay error %.4f (from %q, %d repaired cells), want <= 0.05",
				id.Key, id.Interval, f.Sent, f.Lost(), ea, rec.DelayFrom, rec.RepairedCells)
			continue
		}
		within++
		errAfter = append(errAfter, ea)
		if !math.IsNaN(eb) {
			errBefore = append(errBefore, eb)
		}
		if float64(f.Lost()) >= 0.2*float64(f.Sent) {
			lossyAfter = append(lossyAfter, ea)
			if !math.IsNaN(eb) {
				lossyBefore = append(lossyBefore, eb)
			}
		}
	}
	// Every flow-interval, small ones too: the decoder's joint solve and
	// the paper fallback's choice of cell (for flows the decoder cannot
	// tell apart) move some the other way; logged, not held.
	var worse, worseBig, betterAll int
	var maxWorse, maxWorseBig float64
	for id, f := range after.truth.Flows {
		ea, eb := relErr(after.run, id, f), relErr(before.run, id, f)
		switch {
		case math.IsNaN(ea) || math.IsNaN(eb):
		case ea > eb+1e-12:
			worse++
			maxWorse = max(maxWorse, ea-eb)
			if f.Sent >= 100 {
				worseBig++
				maxWorseBig = max(maxWorseBig, ea-eb)
			}
		case ea < eb-1e-12:
			betterAll++
		}
	}
	t.Logf("every flow-interval with a delay in both runs: %d better, %d worse by at most %.6f (%d of >= 100 packets, by at most %.6f)",
		betterAll, worse, maxWorse, worseBig, maxWorseBig)
	for iv, l := range after.lists {
		t.Logf("interval %d: list complete %v (%s), %d lost, %d extra listed; %d cells repaired", iv, l.Complete, l.Reason, l.Lost, l.Extra, l.RepairedCells)
	}
	t.Logf("%d flows, %.0f packets/s, seed %d: %d flow-intervals of >= 100 packets, %d in intervals with a complete list, %d within 5 %%, %d with repaired cells",
		tc.flows, tc.pps, tc.seed, big, complete, within, repaired)
	t.Logf("relative error, all: median %.5f p95 %.5f max %.5f after; median %.5f p95 %.5f max %.5f before",
		pct(errAfter, 0.5), pct(errAfter, 0.95), pct(errAfter, 1), pct(errBefore, 0.5), pct(errBefore, 0.95), pct(errBefore, 1))
	t.Logf("relative error, lost >= 20 %% (%d): median %.5f p95 %.5f max %.5f after; median %.5f p95 %.5f max %.5f before",
		len(lossyAfter), pct(lossyAfter, 0.5), pct(lossyAfter, 0.95), pct(lossyAfter, 1), pct(lossyBefore, 0.5), pct(lossyBefore, 0.95), pct(lossyBefore, 1))
	if complete*10 < big*9 || len(lossyAfter) < 20 {
		t.Fatalf("%d of %d flow-intervals in complete intervals, %d lost >= 20 %%: the trace does not test the repair", complete, big, len(lossyAfter))
	}

	checkLinks(t, after, before)

	t.Run("incomplete-unchanged", func(t *testing.T) { checkIncompleteUnchanged(t, sc) })
}

// checkLinks: in every interval whose list is complete, the link's mean
// delay (one traffic class: its LDA is repaired too) equals the exact
// join's mean over every received packet sent in the interval, within
// 0.1 %; its sent count and loss ratio are those without the repair.
func checkLinks(t *testing.T, after, before repairRun) {
	t.Helper()
	sum, n := map[int64]float64{}, map[int64]float64{}
	for id, f := range after.truth.Flows {
		if f.Received > 0 {
			sum[id.Interval] += f.MeanNS * float64(f.Received)
			n[id.Interval] += float64(f.Received)
		}
	}
	checked := 0
	for iv, l := range after.lists {
		a, b := after.links[iv], before.links[iv]
		if !l.Complete || a.DelayNS == nil || n[iv] == 0 {
			continue
		}
		checked++
		want := sum[iv] / n[iv]
		e := math.Abs(*a.DelayNS-want) / want
		eb := math.NaN()
		if b.DelayNS != nil {
			eb = math.Abs(*b.DelayNS-want) / want
		}
		t.Logf("interval %d: link delay error %.6f with the repair (%d repaired cells, from %s), %.6f without", iv, e, a.RepairedCells, a.DelayFrom, eb)
		if !(e <= 0.001) {
			t.Errorf("interval %d: link delay %.0f ns, truth %.0f (error %.4f), want within 0.1 %%", iv, *a.DelayNS, want, e)
		}
		if a.Sent != b.Sent || a.Received != b.Received || !sameFloat(a.LossRatio, b.LossRatio) {
			t.Errorf("interval %d: link counts %d/%d (loss ratio %v) with the repair, %d/%d (%v) without", iv, a.Sent, a.Received, deref(a.LossRatio), b.Sent, b.Received, deref(b.LossRatio))
		}
	}
	if checked == 0 {
		t.Error("no interval with a complete list and a link delay")
	}
}

// checkIncompleteUnchanged: with a table too small for the interval's
// losses the list is incomplete, and the records are the same with and
// without the repair.
func checkIncompleteUnchanged(t *testing.T, sc gen.Scenario) {
	after := replayRepair(t, sc, 50, true)
	before := replayRepair(t, sc, 50, false)
	for iv, l := range after.lists {
		if l.Complete || l.RepairedCells != 0 {
			t.Errorf("interval %d: list complete %v with %d repaired cells at capacity 50, want incomplete and none", iv, l.Complete, l.RepairedCells)
		}
	}
	n := 0
	for id, a := range after.recs {
		b, ok := before.recs[id]
		if !ok {
			t.Errorf("flow %v interval %d: published only with the repair on", id.Key, id.Interval)
			continue
		}
		ja, _ := a.MarshalJSON()
		jb, _ := b.MarshalJSON()
		if string(ja) != string(jb) {
			t.Errorf("flow %v interval %d: records differ with an incomplete list:\n%s\n%s", id.Key, id.Interval, ja, jb)
		}
		n++
	}
	if n == 0 || len(after.recs) != len(before.recs) {
		t.Errorf("%d and %d records, %d compared", len(after.recs), len(before.recs), n)
	}
}
