package receiver_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sender"
	"github.com/lds-net/lds/test/testutil"
	"github.com/lds-net/lds/tools/gen"
	"github.com/lds-net/lds/tools/join"
)

// TestTwoSendersWithTheirOwnSelection: one receiver tap sees the traffic of
// two upstream taps; each sender sees only its own share (by source
// prefix), and the receiver's senders[].select gives each the same share
// of its own capture. Both are measured exactly, none mixed with the other.
func TestTwoSendersWithTheirOwnSelection(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc := gen.DefaultScenario()
	sc.Traffic.IPv6 = 0 // shares are split by IPv4 source prefix
	sc.HeavyLoss = gen.HeavyLoss{}
	if _, err := gen.Generate(ctx, sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, log); err != nil {
		t.Fatal(err)
	}
	shares := []match.Rule{{Src: []string{"10.0.0.0/9"}}, {Src: []string{"10.128.0.0/9"}}}
	parts := []string{filepath.Join(dir, "a0.pcap"), filepath.Join(dir, "a1.pcap")}
	splitBySource(t, a, parts, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/9"), netip.MustParsePrefix("10.128.0.0/9")})

	rc := config.DefaultReceiver()
	rc.Sketch.Seed = testSeed
	rc.Receiver.TLS.Plaintext = true
	rc.Receiver.Lateness = 3 * time.Second
	rc.PTP.Enabled = false
	rc.Capture.Source.Kind, rc.Capture.Source.File = "file", b
	rc.Receiver.Senders = []config.SenderEntry{{ID: "edge-0", Select: []match.Rule{shares[0]}}, {ID: "edge-1", Select: []match.Rule{shares[1]}}}
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	start := sc.StartNS
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srcB, err := capture.OpenFile(b)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string][]results.FlowRecord{}
	rx, err := receiver.New(rc, receiver.Options{Sources: []capture.Source{srcB}, Listener: lis, NoHTTP: true, CaptureStart: start, Clock: traceClock(start),
		OnInterval: func(iv *results.Interval) {
			mu.Lock()
			defer mu.Unlock()
			if iv.Outcome == results.OutcomeMatched {
				got[iv.Sender] = append(got[iv.Sender], iv.Flows...)
			}
		}}, log)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = rx.Run(ctx) }() // a failed receiver shows as intervals missing below
	for i, part := range parts {
		scfg := config.DefaultSender()
		scfg.Common = rc.Common
		scfg.Capture.Source.File = part
		scfg.Sender.ID, scfg.Sender.Receiver, scfg.Sender.TLS.Plaintext = []string{"edge-0", "edge-1"}[i], lis.Addr().String(), true
		src, err := capture.OpenFile(part)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := sender.New(scfg, sender.Options{Sources: []capture.Source{src}, NoHTTP: true, CaptureStart: start}, log)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = tx.Run(ctx) }()
	}
	truth, err := join.Files(a, b, rc.CaptureConfig(), int64(rc.Interval))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, f := range truth.Flows {
		want[[]string{"edge-0", "edge-1"}[f.Key.SrcAddr().As4()[1]>>7]]++
	}
	deadline := time.Now().Add(40 * time.Second)
	for {
		mu.Lock()
		n0, n1 := len(got["edge-0"]), len(got["edge-1"])
		mu.Unlock()
		if n0 >= want["edge-0"] && n1 >= want["edge-1"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("records: edge-0 %d of %d, edge-1 %d of %d", n0, want["edge-0"], n1, want["edge-1"])
		}
		time.Sleep(200 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, id := range []string{"edge-0", "edge-1"} {
		pfx := netip.MustParsePrefix(shares[i].Src[0])
		exact := 0
		for _, r := range got[id] {
			k := r.Key
			if !pfx.Contains(k.SrcAddr()) {
				t.Errorf("%s published flow %s, outside its share %s", id, k.SrcAddr(), pfx)
				continue
			}
			f := truth.Flows[join.FlowID{Interval: r.Interval, Key: k}]
			if f == nil {
				t.Errorf("%s: flow %v interval %d not in the truth", id, k, r.Interval)
				continue
			}
			if r.LossBound == nil || *r.LossBound+1e-9 < float64(f.Lost()) || r.Loss == nil || *r.Loss > *r.LossBound {
				t.Errorf("%s: flow %v loss %v, bound %v: the bound below the true %d or the loss above it", id, k, r.Loss, r.LossBound, f.Lost())
			}
			if r.DelayNS != nil && f.Lost() == 0 && abs(*r.DelayNS-f.MeanNS) <= 1e-6*f.MeanNS {
				exact++
			}
		}
		if exact < want[id]/2 {
			t.Errorf("%s: only %d of %d flows measured exactly", id, exact, want[id])
		}
		t.Logf("%s: %d records, %d exact (truth %d flows)", id, len(got[id]), exact, want[id])
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// splitBySource writes the packets of in whose IPv4 source falls in
// prefixes[i] to outs[i].
func splitBySource(t *testing.T, in string, outs []string, prefixes []netip.Prefix) {
	t.Helper()
	p, err := capture.NewParser(capture.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	testutil.RewritePcap(t, in, outs, 0, func(r testutil.PcapRecord, write func(int, gopacket.CaptureInfo, []byte)) {
		pk, reason := p.Identify(r.Data, r.CI.Length, r.Link)
		if reason != capture.ReasonOK {
			return
		}
		for i, pfx := range prefixes {
			if pfx.Contains(pk.Key.SrcAddr()) {
				write(i, gopacket.CaptureInfo{Timestamp: r.CI.Timestamp, CaptureLength: len(r.Data), Length: r.CI.Length}, r.Data)
			}
		}
	})
}
