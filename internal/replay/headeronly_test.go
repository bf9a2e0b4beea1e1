package replay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/test/testutil"
	"github.com/lds-net/lds/tools/gen"
	"github.com/lds-net/lds/tools/join"
)

// truncatePcap writes a copy of the pcap at src with every frame cut to
// snap bytes and snap as the file's snap length, as tcpdump -s snap
// would have captured it (wire lengths kept).
func truncatePcap(t *testing.T, src string, snap int) string {
	t.Helper()
	dst := strings.TrimSuffix(src, ".pcap") + fmt.Sprintf("-s%d.pcap", snap)
	testutil.RewritePcap(t, src, []string{dst}, uint32(snap), func(r testutil.PcapRecord, write func(int, gopacket.CaptureInfo, []byte)) {
		data, ci := r.Data[:min(len(r.Data), snap)], r.CI
		ci.CaptureLength = len(data)
		write(0, ci, data)
	})
	return dst
}

// replayPair replays a pair of captures and returns its records by
// (interval, flow) and the interval outcomes.
func replayPair(t *testing.T, a, b string, configure func(*Options)) (map[join.FlowID]results.FlowRecord, map[results.Outcome]int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "r.jsonl")
	opt := Options{Config: cfg, SenderPcap: a, ReceiverPcap: b, Out: out}
	if configure != nil {
		configure(&opt)
	}
	sum, err := Run(ctx, opt, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, nil, err
	}
	recs := map[join.FlowID]results.FlowRecord{}
	for _, rec := range readJSONL(t, out) {
		recs[join.FlowID{Interval: rec.Interval, Key: rec.Key}] = rec
	}
	return recs, sum.Intervals, nil
}

func same(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// TestReplayHeaderOnly: header-only captures (tcpdump -s 96 and -s 128 on
// Ethernet, and a pair that mixes them) of the same traffic replay like
// the whole-packet pair: no false loss against the per-packet join of the
// whole captures, and for every flow the very same record (delay,
// deviation, loss, packets).
func TestReplayHeaderOnly(t *testing.T) {
	sc := scenario(31, 0)
	sc.SnapLen = 0
	sc.Headers.VLAN = gen.VLANNone
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := gen.Generate(ctx, sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	cfg, _ := Load("")
	truth, err := join.Files(a, b, cfg.CaptureConfig(), cfg.Interval.Nanoseconds())
	if err != nil {
		t.Fatal(err)
	}
	if truth.Unmatched != 0 || truth.Duplicates != 0 {
		t.Fatalf("join: %d unmatched, %d duplicate identities", truth.Unmatched, truth.Duplicates)
	}
	whole, _, err := replayPair(t, a, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkNoFalseLoss(t, "-s 0", truth, whole)
	for _, p := range []struct{ sa, sb int }{{96, 96}, {128, 128}, {96, 128}, {128, 96}} {
		t.Run(fmt.Sprintf("s%d-s%d", p.sa, p.sb), func(t *testing.T) {
			recs, _, err := replayPair(t, truncatePcap(t, a, p.sa), truncatePcap(t, b, p.sb), nil)
			if err != nil {
				t.Fatal(err)
			}
			checkNoFalseLoss(t, fmt.Sprintf("-s %d / -s %d", p.sa, p.sb), truth, recs)
			differ := 0
			for id, w := range whole {
				r, ok := recs[id]
				if !ok || !same(r.DelayNS, w.DelayNS) || !same(r.StddevNS, w.StddevNS) || !same(r.Loss, w.Loss) || r.Packets != w.Packets {
					differ++
					if differ <= 5 {
						t.Errorf("flow %v interval %d: %+v, whole-packet replay %+v", id.Key, id.Interval, r, w)
					}
				}
			}
			if differ > 0 || len(recs) != len(whole) {
				t.Errorf("%d of %d records differ from the whole-packet replay; %d records against %d", differ, len(whole), len(recs), len(whole))
			}
		})
	}
}

// checkNoFalseLoss: every true (interval, flow) has a record, and none
// reports loss (the scenario loses nothing).
func checkNoFalseLoss(t *testing.T, what string, truth *join.Result, recs map[join.FlowID]results.FlowRecord) {
	t.Helper()
	falseLoss, missing, big, delays := 0, 0, 0, 0
	for id, f := range truth.Flows {
		if f.Lost() != 0 {
			t.Fatalf("the scenario lost %d packets of %v", f.Lost(), id.Key)
		}
		rec, ok := recs[id]
		if !ok {
			missing++
			continue
		}
		if rec.Loss == nil || *rec.Loss != 0 {
			falseLoss++
		}
		if f.Received >= 100 {
			big++
			if rec.DelayNS != nil {
				delays++
			}
		}
	}
	if falseLoss != 0 || missing != 0 {
		t.Errorf("%s: %d flows with false loss, %d without a record, of %d", what, falseLoss, missing, len(truth.Flows))
		return
	}
	if big < 20 || delays != big {
		t.Errorf("%s: %d of %d flows of >= 100 packets have a delay (want all, and >= 20)", what, delays, big)
		return
	}
	t.Logf("%s: %d (interval, flow) pairs, none with false loss; %d flows of >= 100 packets, all with a delay", what, len(truth.Flows), big)
}

// TestReplaySnaplenAdvice: a capture too short for the link header +
// capture.identity.ip_bytes is refused with advice, and each piece of it
// works: a longer snap length (covered above: -s 96), or the ip_bytes the
// message names, set on both ends, which replays with no false loss. A
// VLAN-tagged tap needs 4 more bytes, as the docs say.
func TestReplaySnaplenAdvice(t *testing.T) {
	sc := scenario(32, 0)
	sc.SnapLen = 0
	sc.Duration = 3 * time.Second
	sc.Headers.VLAN = gen.VLANPush // the receiver tap sees an 802.1Q tag
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := gen.Generate(ctx, sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	// Too short for even the smallest advised ip_bytes: only a longer
	// snap length is advised.
	// (Either file may be the one refused: the untagged sender's needs
	// -s 96, the tagged receiver's -s 100.)
	_, _, err := replayPair(t, truncatePcap(t, a, 64), truncatePcap(t, b, 64), nil)
	if err == nil || !(strings.Contains(err.Error(), "tcpdump -s 96") || strings.Contains(err.Error(), "tcpdump -s 100")) || strings.Contains(err.Error(), "ip_bytes:") {
		t.Fatalf("-s 64: %v, want a refusal advising tcpdump -s 96 or 100 and no ip_bytes", err)
	}
	a80 := truncatePcap(t, a, 80)
	_, _, err = replayPair(t, a80, b, nil)
	if err == nil {
		t.Fatal("-s 80 captures accepted with the default ip_bytes")
	}
	t.Logf("refused: %v", err)
	for _, want := range []string{"tcpdump -s 96", "capture.identity.ip_bytes: 66"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	// The second advice: ip_bytes 66 on both ends. A tagged tap needs
	// 4 bytes more: -s 84 at the receiver.
	set := func(o *Options) { o.Config.Capture.Identity.IPBytes = 66 }
	recs, _, err := replayPair(t, a80, truncatePcap(t, b, 84), set)
	if err != nil {
		t.Fatalf("with capture.identity.ip_bytes: 66: %v", err)
	}
	cfg, _ := Load("")
	cfg.Capture.Identity.IPBytes = 66
	truth, err := join.Files(a, b, cfg.CaptureConfig(), cfg.Interval.Nanoseconds())
	if err != nil {
		t.Fatal(err)
	}
	if truth.Unmatched != 0 || truth.Duplicates != 0 {
		t.Errorf("join at ip_bytes 66: %d unmatched, %d duplicate identities", truth.Unmatched, truth.Duplicates)
	}
	checkNoFalseLoss(t, "ip_bytes 66, -s 80 / tagged -s 84", truth, recs)

	// The VLAN rule of the docs: -s 96 at the tagged receiver is refused
	// (its first frames show the tag) and the advice names -s 100; with
	// the default ip_bytes, -s 96 at the untagged sender and -s 100 at the
	// tagged receiver replay with no false loss.
	_, _, err = replayPair(t, a, truncatePcap(t, b, 96), nil)
	if err == nil || !strings.Contains(err.Error(), "tcpdump -s 100") {
		t.Fatalf("a tagged -s 96 capture: %v, want a refusal advising tcpdump -s 100", err)
	}
	t.Logf("refused: %v", err)
	recs, _, err = replayPair(t, truncatePcap(t, a, 96), truncatePcap(t, b, 100), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ = Load("")
	if truth, err = join.Files(a, b, cfg.CaptureConfig(), cfg.Interval.Nanoseconds()); err != nil {
		t.Fatal(err)
	}
	checkNoFalseLoss(t, "-s 96 / tagged -s 100", truth, recs)
}
