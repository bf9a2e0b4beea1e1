package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/gen"
)

// lostID names one lost packet as the generator knows it: its send
// interval, its flow and its own identifier (TCP sequence number, else
// IPv4 identification; none for other IPv6 packets).
type lostID struct {
	Interval int64
	Key      capture.FlowKey
	Kind     capture.IDKind
	ID       uint32
}

type flowIv struct {
	Interval int64
	Key      capture.FlowKey
}

// genTruth is the generator's own per-packet truth: every lost packet and
// every flow-interval's sent and lost counts.
type genTruth struct {
	lost   map[lostID]int // multiset: a TCP packet without payload shares its seq with the next
	sentNS map[lostID][]int64
	sent   map[flowIv]int
	lose   map[flowIv]int
}

func truthID(p *gen.PacketTruth) lostID {
	id := lostID{Interval: p.Interval, Key: *p.Key}
	switch {
	case p.Key.Proto == 6:
		id.Kind, id.ID = capture.IDTCPSeq, p.Seq
	case !p.Key.V6:
		id.Kind, id.ID = capture.IDIPv4, uint32(p.IPID)
	}
	return id
}

// lostRun is one replay with a lost-packet list against the generator's truth.
type lostRun struct {
	truth     genTruth
	recs      map[flowIv]results.FlowRecord
	list      []results.LostPacket
	summaries map[int64]*results.LostSummary
}

func replayLost(t *testing.T, sc gen.Scenario, configure func(*Options)) lostRun {
	return replayLostWith(t, sc, configure, nil)
}

// replayLostWith is replayLost that also hands every generated packet to
// also (nil: none).
func replayLostWith(t *testing.T, sc gen.Scenario, configure func(*Options), also func(*gen.PacketTruth)) lostRun {
	t.Helper()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr := genTruth{lost: map[lostID]int{}, sent: map[flowIv]int{}, lose: map[flowIv]int{}, sentNS: map[lostID][]int64{}}
	onPacket := func(p *gen.PacketTruth) {
		fi := flowIv{p.Interval, *p.Key}
		tr.sent[fi]++
		if also != nil {
			also(p)
		}
		if p.Lost {
			tr.lost[truthID(p)]++
			tr.sentNS[truthID(p)] = append(tr.sentNS[truthID(p)], p.SendNS)
			tr.lose[fi]++
		}
	}
	if _, err := gen.Generate(ctx, sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b, OnPacket: onPacket}, log); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	out, lostOut := filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "lost.jsonl")
	r := lostRun{truth: tr, recs: map[flowIv]results.FlowRecord{}, summaries: map[int64]*results.LostSummary{}}
	var mu sync.Mutex
	opt := Options{Config: cfg, SenderPcap: a, ReceiverPcap: b, Out: out, LostOut: lostOut,
		OnInterval: func(iv *results.Interval) {
			mu.Lock()
			defer mu.Unlock()
			if iv.Outcome == results.OutcomeMatched && iv.LostList != nil {
				s := *iv.LostList
				r.summaries[iv.Interval] = &s
			}
		}}
	if configure != nil {
		configure(&opt)
	}
	if _, err := Run(ctx, opt, log); err != nil {
		t.Fatal(err)
	}
	for _, rec := range readJSONL(t, out) {
		r.recs[flowIv{rec.Interval, rec.Key}] = rec
	}
	f, err := os.Open(lostOut)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc2 := bufio.NewScanner(f)
	for sc2.Scan() {
		var p results.LostPacket
		if err := json.Unmarshal(sc2.Bytes(), &p); err != nil {
			t.Fatalf("lost file line %q: %v", sc2.Text(), err)
		}
		r.list = append(r.list, p)
	}
	return r
}

// lossyScenario: uniform loss on every flow plus a few heavily lossy ones.
func lossyScenario(seed uint64, flows int, pps, uniform float64) gen.Scenario {
	sc := scenario(seed, 0)
	sc.Flows, sc.RatePPS, sc.Duration = flows, pps, 5*time.Second
	sc.FlowSize = gen.FlowSize{Dist: "pareto", Shape: 1.1, Scale: 8, Max: 40000}
	sc.Lifetime = gen.Lifetime{Min: 10 * time.Millisecond, Max: 5 * time.Second}
	sc.Classes[0].Loss = gen.LossModel{Kind: "uniform", P: uniform}
	sc.HeavyLoss = gen.HeavyLoss{Fraction: 0.02, P: 0.1}
	return sc
}

func nearCapacity() gen.Scenario {
	sc := lossyScenario(43, 6000, 80000, 0.006)
	sc.FlowSize.Max = 20000
	sc.HeavyLoss = gen.HeavyLoss{Fraction: 0.02, P: 0.05}
	return sc
}

// TestLostListWithinCapacity: with fewer lost packets an interval than
// lost.capacity, every lost packet is listed (matched by interval, flow and
// identifier to the generator's truth, precision and recall ≥ 99 %), no
// loss-free flow of ≥ 100 packets shows loss ≥ 1, and loss equals the
// truth, exactly, for ≥ 99 % of the flow-intervals of ≥ 100 packets.
func TestLostListWithinCapacity(t *testing.T) {
	for _, c := range []struct {
		name    string
		sc      gen.Scenario
		minLost int
	}{
		// ~0.3 % + 2 % of the flows losing 10 %: ~100 lost an interval.
		{"light", lossyScenario(41, 2000, 20000, 0.003), 300},
		// ~0.6 % at 80 kpps plus the lossy flows: 600-900 lost an
		// interval, near the capacity of 1000.
		{"near-capacity", nearCapacity(), 2000},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := replayLost(t, c.sc, nil)
			checkLostList(t, r, c.minLost)
		})
	}
}

func checkLostList(t *testing.T, r lostRun, minLost int) {
	t.Helper()
	complete := 0
	perIv := map[int64]int{}
	for id, n := range r.truth.lost {
		perIv[id.Interval] += n
	}
	for iv, s := range r.summaries {
		t.Logf("interval %d: %d lost", iv, perIv[iv])
		if s.Complete {
			complete++
		} else {
			t.Logf("interval %d: list incomplete (%s) with %d lost, %d listed", iv, s.Reason, perIv[iv], s.Lost)
		}
	}
	if len(r.summaries) == 0 || complete*100 < 99*len(r.summaries) {
		t.Fatalf("%d of %d matched intervals have a complete list", complete, len(r.summaries))
	}
	// Precision and recall of the list, by (interval, flow, identifier).
	want := map[lostID]int{}
	nTruth := 0
	for id, n := range r.truth.lost {
		if s := r.summaries[id.Interval]; s != nil && s.Complete {
			want[id] += n
			nTruth += n
		}
	}
	if nTruth < minLost {
		t.Fatalf("scenario too small: %d lost packets in complete intervals, want >= %d", nTruth, minLost)
	}
	matched, listed, timed := 0, 0, 0
	for _, p := range r.list {
		if p.Extra {
			t.Errorf("extra packet listed where the generator makes none: %+v", p)
			continue
		}
		if s := r.summaries[p.Interval]; s == nil || !s.Complete {
			continue
		}
		listed++
		id := lostID{Interval: p.Interval, Key: p.Key, Kind: p.IDKind, ID: p.ID}
		// A match is the generator's lost packet of that interval, flow
		// and identifier, sent at the listed sent_ns.
		if p.SentNS != nil && slices.Contains(r.truth.sentNS[id], *p.SentNS) && want[id] > 0 {
			want[id]--
			matched++
		}
		if p.SentNS != nil {
			timed++
			if !slices.Contains(r.truth.sentNS[id], *p.SentNS) {
				t.Errorf("lost packet %+v: sent_ns %d, the generator sent it at %v", id, *p.SentNS, r.truth.sentNS[id])
			}
		}
	}
	t.Logf("lost packets with sent_ns: %d of %d listed, each equal to the generator's send time", timed, listed)
	t.Logf("lost packets: %d true, %d listed, %d matched by interval, flow, identifier and send time; %d of %d intervals complete",
		nTruth, listed, matched, complete, len(r.summaries))
	if matched*100 < 99*nTruth || matched*100 < 99*listed {
		t.Errorf("recall %d/%d, precision %d/%d: want both >= 99 %%", matched, nTruth, matched, listed)
	}
	// Exact loss on the flow-intervals of >= 100 packets.
	var big, equal, clean, cried, exact int
	for fi, sent := range r.truth.sent {
		if sent < 100 {
			continue
		}
		if s := r.summaries[fi.Interval]; s == nil {
			continue // the partial edge intervals are not published
		}
		rec, ok := r.recs[fi]
		if !ok {
			t.Errorf("flow %v interval %d: no record", fi.Key, fi.Interval)
			continue
		}
		big++
		lost := r.truth.lose[fi]
		if rec.Loss != nil && *rec.Loss == float64(lost) {
			equal++
		}
		if rec.LossExact {
			exact++
			if rec.Loss == nil || *rec.Loss != float64(lost) {
				t.Errorf("flow %v interval %d: loss_exact with loss %v, truth %d", fi.Key, fi.Interval, deref(rec.Loss), lost)
			}
			if rec.Packets != float64(sent) {
				t.Errorf("flow %v interval %d: loss_exact with packets %v, truth %d", fi.Key, fi.Interval, rec.Packets, sent)
			}
		}
		if lost == 0 {
			clean++
			if rec.LossOr(0) >= 1 {
				cried++
			}
		}
	}
	t.Logf("flow-intervals of >= 100 packets: %d, loss equal to the truth: %d, loss_exact: %d; loss-free: %d, of which loss >= 1: %d",
		big, equal, exact, clean, cried)
	if big < 50 || clean < 20 {
		t.Fatalf("scenario too small: %d flow-intervals of >= 100 packets, %d loss-free", big, clean)
	}
	if cried > 0 {
		t.Errorf("%d loss-free flows of >= 100 packets show loss >= 1", cried)
	}
	if equal*100 < 99*big {
		t.Errorf("loss equals the truth on %d of %d flow-intervals, want >= 99 %%", equal, big)
	}
}

// TestLostListOverCapacity: with more lost packets an interval than the
// table holds, every such interval says its list is incomplete, no record
// claims exactness, and the records are those of a run without the table
// (today's estimates); what is listed is still true.
func TestLostListOverCapacity(t *testing.T) {
	sc := lossyScenario(47, 2000, 20000, 0.01) // ~200-300 lost an interval
	over := replayLost(t, sc, func(o *Options) { o.Config.Lost.Capacity = 50 })
	plain := replayLost(t, sc, func(o *Options) { o.Config.Lost.Capacity = 0 })
	flagged := 0
	for iv, s := range over.summaries {
		if s.Complete {
			continue
		}
		flagged++
		if s.Reason != "overflow" {
			t.Errorf("interval %d: incomplete for %q, want overflow", iv, s.Reason)
		}
	}
	if flagged < len(over.summaries)-1 || flagged == 0 {
		t.Fatalf("%d of %d intervals flagged incomplete with ~5x the capacity lost", flagged, len(over.summaries))
	}
	compared := 0
	for fi, rec := range over.recs {
		s := over.summaries[fi.Interval]
		if s == nil || s.Complete {
			continue
		}
		if rec.LossExact {
			t.Errorf("flow %v interval %d: loss_exact in an interval whose list is incomplete", fi.Key, fi.Interval)
		}
		p, ok := plain.recs[fi]
		if !ok {
			t.Errorf("flow %v interval %d: no record without the table", fi.Key, fi.Interval)
			continue
		}
		compared++
		if !sameFloat(rec.Loss, p.Loss) || !sameFloat(rec.LossBound, p.LossBound) || !sameFloat(rec.LossPoint, p.LossPoint) || rec.Packets != p.Packets {
			t.Errorf("flow %v interval %d: loss %v bound %v point %v packets %v, without the table %v %v %v %v", fi.Key, fi.Interval,
				deref(rec.Loss), deref(rec.LossBound), deref(rec.LossPoint), rec.Packets, deref(p.Loss), deref(p.LossBound), deref(p.LossPoint), p.Packets)
		}
	}
	if compared < 100 {
		t.Fatalf("only %d records compared", compared)
	}
	// What an incomplete list does list is true.
	want := map[lostID]int{}
	for id, n := range over.truth.lost {
		want[id] = n
	}
	wrong := 0
	for _, p := range over.list {
		id := lostID{Interval: p.Interval, Key: p.Key, Kind: p.IDKind, ID: p.ID}
		if p.Extra || want[id] == 0 {
			wrong++
			continue
		}
		want[id]--
	}
	t.Logf("%d of %d intervals flagged; %d records as without the table; %d packets listed, %d not lost", flagged, len(over.summaries), compared, len(over.list), wrong)
	if wrong > 0 {
		t.Errorf("%d listed packets were not lost", wrong)
	}
}

func sameFloat(a, b *float64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}
