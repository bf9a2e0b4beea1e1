package join

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/test/testutil"
	"github.com/lds-net/lds/tools/gen"
	"github.com/lds-net/lds/tools/truth"
)

// TestJoinEqualsGeneratorTruth: joining the two captures packet by packet
// gives exactly the per-(interval, flow) truth the generator recorded from
// the packets' fates (its own bookkeeping, independent of lds's parser).
func TestJoinEqualsGeneratorTruth(t *testing.T) {
	dir := t.TempDir()
	a, b, tr := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap"), filepath.Join(dir, "t.jsonl")
	sc := gen.DefaultScenario()
	sc.Headers.Random = true // header changes between the taps must not matter
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := gen.Generate(context.Background(), sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b, Truth: tr}, log); err != nil {
		t.Fatal(err)
	}
	want, err := truth.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	cc := capture.DefaultConfig()
	cc.Identity.Seed = "join-test"
	res, err := Files(a, b, cc, sc.Interval.Nanoseconds())
	if err != nil {
		t.Fatal(err)
	}
	if res.Unmatched != 0 || res.Duplicates != 0 {
		t.Fatalf("%d unmatched, %d duplicates", res.Unmatched, res.Duplicates)
	}
	got := res.Truth(sc.Interval.Nanoseconds())
	if len(got) != len(want) {
		t.Fatalf("%d records, generator has %d", len(got), len(want))
	}
	idx := map[string]int{}
	for i, w := range want {
		idx[key(w)] = i
	}
	lossy := 0
	for _, g := range got {
		i, ok := idx[key(g)]
		if !ok {
			t.Errorf("record %s not in the generator's truth", key(g))
			continue
		}
		w := want[i]
		if g.Sent != w.Sent || g.Received != w.Received || g.Lost != w.Lost {
			t.Errorf("%s: sent/received/lost %d/%d/%d, want %d/%d/%d", key(g), g.Sent, g.Received, g.Lost, w.Sent, w.Received, w.Lost)
		}
		if g.Lost > 0 {
			lossy++
		}
		for _, p := range [][2]*float64{{g.DelayNS, w.DelayNS}, {g.StddevNS, w.StddevNS}} {
			if (p[0] == nil) != (p[1] == nil) {
				t.Errorf("%s: null mismatch", key(g))
			} else if p[0] != nil && math.Abs(*p[0]-*p[1]) > 1e-6*math.Max(1, math.Abs(*p[1])) {
				t.Errorf("%s: %v, want %v", key(g), *p[0], *p[1])
			}
		}
	}
	if lossy == 0 {
		t.Error("the demo scenario should lose packets: loss accounting untested")
	}
}

func key(r truth.Record) string {
	return fmt.Sprintf("%d %s:%d>%s:%d/%d", r.Interval, r.Src, r.SPort, r.Dst, r.DPort, r.Proto)
}

// TestJoinDuplicates: the join is the truth of every end-to-end test, so
// a copy of a packet must never change it. A second copy at the receiver
// tap (a switch's duplicate, a capture seen twice) is unmatched and the
// first copy's receive time stands; an identity seen twice at the sender
// tap is not joinable: counted as a duplicate and measured nowhere, its
// receiver-tap copy unmatched.
func TestJoinDuplicates(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	sc := gen.DefaultScenario()
	sc.Duration, sc.Flows, sc.RatePPS = 2*time.Second, 50, 2000
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := gen.Generate(context.Background(), sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, log); err != nil {
		t.Fatal(err)
	}
	cc := capture.DefaultConfig()
	cc.Identity.Seed = "join-test"
	T := sc.Interval.Nanoseconds()
	want, err := Files(a, b, cc, T)
	if err != nil {
		t.Fatal(err)
	}
	if want.Unmatched != 0 || want.Duplicates != 0 || want.Packets < 1000 {
		t.Fatalf("clean join: %d unmatched, %d duplicates, %d packets", want.Unmatched, want.Duplicates, want.Packets)
	}

	// Every 10th receiver-tap packet again, 3 ms later: a later receive
	// time that would raise its flow's mean delay if it were joined.
	b2 := filepath.Join(dir, "b2.pcap")
	copies := rewritePcap(t, b, b2, func(i int) int { return b2i(i%10 == 0) })
	got, err := Files(a, b2, cc, T)
	if err != nil {
		t.Fatal(err)
	}
	if got.Unmatched != uint64(copies) || got.Duplicates != 0 || got.Packets != want.Packets {
		t.Errorf("%d second copies at the receiver tap: %d unmatched (want %d), %d duplicates (want 0), %d packets (want %d)",
			copies, got.Unmatched, copies, got.Duplicates, got.Packets, want.Packets)
	}
	sameFlows(t, got, want)

	// Every 50th sender-tap packet twice: none of those is measured.
	a2 := filepath.Join(dir, "a2.pcap")
	twice := rewritePcap(t, a, a2, func(i int) int { return b2i(i%50 == 0) })
	got, err = Files(a2, b, cc, T)
	if err != nil {
		t.Fatal(err)
	}
	if got.Duplicates != uint64(twice) || got.Packets != want.Packets-uint64(twice) || got.Unmatched+received(got) != received(want) {
		t.Errorf("%d packets twice at the sender tap: %d duplicates (want %d), %d packets (want %d), %d unmatched + %d received (want %d received in all)",
			twice, got.Duplicates, twice, got.Packets, want.Packets-uint64(twice), got.Unmatched, received(got), received(want))
	}
}

func received(r *Result) uint64 {
	var n uint64
	for _, f := range r.Flows {
		n += f.Received
	}
	return n
}

// rewritePcap copies the capture in to out, writing record i 1+extra(i)
// times, each copy 3 ms after the previous; it returns the copies added.
func rewritePcap(t *testing.T, in, out string, extra func(i int) int) int {
	t.Helper()
	added := 0
	testutil.RewritePcap(t, in, []string{out}, 0, func(r testutil.PcapRecord, write func(int, gopacket.CaptureInfo, []byte)) {
		for c := range 1 + extra(r.Index) {
			ci := r.CI
			ci.Timestamp = ci.Timestamp.Add(time.Duration(c) * 3 * time.Millisecond)
			write(0, ci, r.Data)
			added += b2i(c > 0)
		}
	})
	return added
}

// sameFlows requires got's per-(interval, flow) truth to be want's.
func sameFlows(t *testing.T, got, want *Result) {
	t.Helper()
	if len(got.Flows) != len(want.Flows) {
		t.Errorf("%d (interval, flow) pairs, want %d", len(got.Flows), len(want.Flows))
	}
	for id, w := range want.Flows {
		g := got.Flows[id]
		if g == nil {
			t.Errorf("flow %v interval %d missing", id.Key, id.Interval)
			continue
		}
		if g.Sent != w.Sent || g.Received != w.Received || !near(g.MeanNS, w.MeanNS) || !near(g.StddevNS, w.StddevNS) {
			t.Errorf("flow %v interval %d: sent/received %d/%d, mean %v, stddev %v; want %d/%d, %v, %v",
				id.Key, id.Interval, g.Sent, g.Received, g.MeanNS, g.StddevNS, w.Sent, w.Received, w.MeanNS, w.StddevNS)
		}
	}
}

// near: equal within 1e-9 relative (the join sums in map order), or both NaN.
func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) || math.IsNaN(a) && math.IsNaN(b)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
