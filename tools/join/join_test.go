package join

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"testing"

	"github.com/lds-net/lds/internal/capture"
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
