package e2e

import (
	"time"

	"fmt"
	"io"
	"path/filepath"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/jsonl"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/results"
)

func realLostPath(dir string, p RealPair) string {
	return filepath.Join(dir, "lost-"+p.Name+".jsonl")
}

// LostID names a packet of a lost-packet list: its send interval, flow and
// own identifier (TCP sequence number, else IPv4 identification).
type LostID struct {
	Interval int64
	Key      capture.FlowKey
	Kind     capture.IDKind
	ID       uint32
	Extra    bool
}

// RealLost compares one pair's lost-packet list with the tcpdump captures.
type RealLost struct {
	Complete, Intervals int            // evaluated intervals whose list is complete; all evaluated intervals
	Truth               map[LostID]int // packets tap A saw and tap B did not (and extra), complete intervals only
	Listed              map[LostID]int // the receiver's list, complete intervals only
	TruthAll            int            // lost packets in all evaluated intervals
	ExactRecords        int            // records with loss_exact
	ExactWrong          []string       // records with loss_exact whose loss differs from the truth
	// Send times of the listed lost packets of complete intervals against
	// tcpdump's capture time at tap A: listed with none, listed with one
	// tcpdump never saw for that packet, and the largest difference (ns).
	Untimed, TimeUnmatched int
	MaxTimeDiff            int64
}

// realLostTruth joins the two captures packet by packet (flow key and
// packet hash, as the daemons compute them) and returns, per packet
// identity, how many more times tap A saw it than tap B (lost, > 0) or
// fewer (extra), with its interval by tap A's time.
func realLostTruth(pcapA, pcapB string, cc capture.Config, t int64) (map[LostID]int, map[LostID][]int64, error) {
	p, err := capture.NewParser(cc)
	if err != nil {
		return nil, nil, err
	}
	type ident struct {
		key  capture.FlowKey
		hash uint64
	}
	type fate struct {
		id   LostID
		a, b int
	}
	seen := map[ident]*fate{}
	sentAt := map[LostID][]int64{} // tap A's capture times of each identity
	if err := capture.EachPacket(pcapA, p, func(pk *capture.Packet) bool {
		k := ident{pk.Key, pk.PktHash}
		id := LostID{Interval: interval.ID(pk.TS, t), Key: pk.Key, Kind: pk.IDKind, ID: pk.ID}
		sentAt[id] = append(sentAt[id], pk.TS)
		f := seen[k]
		if f == nil {
			f = &fate{id: LostID{Interval: interval.ID(pk.TS, t), Key: pk.Key, Kind: pk.IDKind, ID: pk.ID}}
			seen[k] = f
		}
		f.a++
		return true
	}); err != nil {
		return nil, nil, fmt.Errorf("tap A capture: %w", err)
	}
	if err := capture.EachPacket(pcapB, p, func(pk *capture.Packet) bool {
		k := ident{pk.Key, pk.PktHash}
		f := seen[k]
		if f == nil {
			f = &fate{id: LostID{Interval: interval.ID(pk.TS, t), Key: pk.Key, Kind: pk.IDKind, ID: pk.ID, Extra: true}}
			seen[k] = f
		}
		f.b++
		return true
	}); err != nil {
		return nil, nil, fmt.Errorf("tap B capture: %w", err)
	}
	out := map[LostID]int{}
	for _, f := range seen {
		switch d := f.a - f.b; {
		case d > 0:
			id := f.id
			id.Extra = false
			out[id] += d
		case d < 0:
			id := f.id
			id.Extra = true
			out[id] -= d
		}
	}
	return out, sentAt, nil
}

// evaluateRealLost reads pr's lost-packet file and results and compares
// them with the captures over the pair's evaluated intervals.
func evaluateRealLost(opt RealOptions, res *RealResult, pr *RealPairResult) (*RealLost, error) {
	c := config.DefaultCommon()
	c.Sketch.Seed = opt.Seed
	c.Capture.Select = []match.Rule{{Name: "real", Src: []string{RealSndNet.String()}, Dst: []string{RealRcvNet.String()}}}
	truth, sentAt, err := realLostTruth(filepath.Join(res.Dir, "tap-a.pcap"), filepath.Join(res.Dir, "tap-b.pcap"), c.CaptureConfig(), int64(pr.Pair.Interval))
	if err != nil {
		return nil, err
	}
	// An interval's list is complete exactly when its records say loss_exact.
	complete, all := map[int64]bool{}, map[int64]bool{}
	for _, r := range pr.Results {
		all[r.Interval] = true
		if r.LossExact {
			complete[r.Interval] = true
		}
	}
	out := &RealLost{Complete: len(complete), Intervals: len(all), Truth: map[LostID]int{}, Listed: map[LostID]int{}}
	for id, n := range truth {
		if id.Interval < pr.FirstIv || id.Interval > pr.LastIv {
			continue
		}
		if !id.Extra {
			out.TruthAll += n
		}
		if complete[id.Interval] {
			out.Truth[id] += n
		}
	}
	lost, err := jsonl.ReadFile(realLostPath(res.Dir, pr.Pair), "lost-packet list", func(r io.Reader) ([]results.LostPacket, error) {
		return jsonl.Read(r, "lost-packet list", 1<<20, func(*results.LostPacket) error { return nil })
	})
	if err != nil {
		return nil, err
	}
	for _, p := range lost {
		if !complete[p.Interval] {
			continue
		}
		id := LostID{Interval: p.Interval, Key: p.Key, Kind: p.IDKind, ID: p.ID, Extra: p.Extra}
		out.Listed[id]++
		if p.Extra {
			continue
		}
		if p.SentNS == nil {
			out.Untimed++
			continue
		}
		best := int64(-1)
		for _, ts := range sentAt[id] {
			if d := abs64(*p.SentNS - ts); best < 0 || d < best {
				best = d
			}
		}
		if best < 0 {
			out.TimeUnmatched++
			continue
		}
		out.MaxTimeDiff = max(out.MaxTimeDiff, best)
	}
	perFlow := map[[2]any]int{}
	for id, n := range out.Truth {
		if !id.Extra {
			perFlow[[2]any{id.Interval, id.Key}] += n
		}
	}
	for _, r := range pr.Results {
		if !r.LossExact {
			continue
		}
		out.ExactRecords++
		if want := perFlow[[2]any{r.Interval, r.Key}]; r.Loss == nil || *r.Loss != float64(want) {
			out.ExactWrong = append(out.ExactWrong, fmt.Sprintf("interval %d flow %s: loss %v, tcpdump %d", r.Interval, r.Key, r.LossOr(-1), want))
		}
	}
	return out, nil
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// checkRealLost: in every evaluated interval whose lost-packet list is
// complete, the list is exactly the packets tcpdump saw at tap A and not at
// tap B (by interval, flow and identifier), every record's loss_exact loss
// is the tcpdump count, and the complete intervals hold most of the loss.
func checkRealLost(t interface {
	Helper()
	Fatalf(string, ...any)
	Errorf(string, ...any)
	Logf(string, ...any)
}, opt RealOptions, res *RealResult, pr *RealPairResult) {
	t.Helper()
	l, err := evaluateRealLost(opt, res, pr)
	if err != nil {
		t.Fatalf("%v", err)
	}
	truthN, listedN, missing, wrong := 0, 0, 0, 0
	for id, n := range l.Truth {
		truthN += n
		if d := n - l.Listed[id]; d > 0 {
			missing += d
			if missing <= 5 {
				t.Logf("%+v: tcpdump lost %d, listed %d", id, n, l.Listed[id])
			}
		}
	}
	for id, n := range l.Listed {
		listedN += n
		if d := n - l.Truth[id]; d > 0 {
			wrong += d
			if wrong <= 5 {
				t.Logf("%+v: listed %d, tcpdump lost %d", id, n, l.Truth[id])
			}
		}
	}
	for i, s := range l.ExactWrong {
		if i < 5 {
			t.Logf("loss_exact wrong: %s", s)
		}
	}
	t.Logf("%s: %d of %d evaluated intervals with a complete list; in them tcpdump lost %d packets (of %d in all intervals), the list has %d: %d missing, %d not lost; %d records with loss_exact, %d wrong",
		pr.Pair.Name, l.Complete, l.Intervals, truthN, l.TruthAll, listedN, missing, wrong, l.ExactRecords, len(l.ExactWrong))
	t.Logf("%s: sent_ns of the listed lost packets against tcpdump's capture time at tap A: %d without, %d matching no capture of the packet, largest difference %d ns",
		pr.Pair.Name, l.Untimed, l.TimeUnmatched, l.MaxTimeDiff)
	// Both capture the same frames at tap A; their timestamps are the
	// kernel's for the same packet, apart by at most scheduling (1 ms).
	if l.Untimed != 0 || l.TimeUnmatched != 0 || l.MaxTimeDiff > int64(time.Millisecond) {
		t.Errorf("send times: %d lost packets listed without sent_ns, %d matching no capture at tap A, largest difference %d ns (want 0, 0, <= 1 ms)",
			l.Untimed, l.TimeUnmatched, l.MaxTimeDiff)
	}
	if l.Complete == 0 || truthN == 0 {
		t.Fatalf("no complete interval with losses to judge")
	}
	if 2*truthN < l.TruthAll {
		t.Errorf("the complete intervals hold %d of %d lost packets, want at least half", truthN, l.TruthAll)
	}
	// A packet the receiver's own capture ring dropped is, to the
	// receiver, a packet tap B never saw: it is listed although tcpdump
	// saw it (until the receiver's ring drops mark its interval; an
	// interval with the sender's ring drops is never complete). Only
	// measured ring drops may explain a difference.
	rxDrops := max(0, pr.ReceiverKernelDrops)
	if missing != 0 || int64(wrong) > rxDrops || (len(l.ExactWrong) != 0 && rxDrops == 0) {
		t.Errorf("the lost list differs from tcpdump: %d missing, %d not lost (the receiver's ring dropped %d), %d wrong exact records",
			missing, wrong, rxDrops, len(l.ExactWrong))
	}
}
