package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// realTools are what the real-traffic tests run besides ip and tcpdump.
var realTools = []string{"tc", "ethtool", "iperf3", "curl", "ping"}

func realOptions(t *testing.T, pairs ...RealPair) RealOptions {
	t.Helper()
	opt := DefaultRealOptions()
	opt.BinDir, opt.WorkDir, opt.Prefix, opt.Log = prepareRun(t, "LDS_REAL_DIR", "LDS_REAL_PREFIX",
		fmt.Sprintf("ldsrl-%d-%d", os.Getpid(), time.Now().UnixNano()%100000))
	opt.Pairs = pairs
	if v := os.Getenv("LDS_REAL_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 5 {
			t.Fatalf("LDS_REAL_SECONDS=%q: want whole seconds >= 5", v)
		}
		opt.Duration = time.Duration(n) * time.Second
	}
	return opt
}

// The daemon pairs of the real-traffic runs.
var (
	pairWorkaround = RealPair{Name: "workaround", Interval: 2 * time.Second, MaxDelay: 900 * time.Millisecond}
	pairDefaults   = RealPair{Name: "defaults", Interval: time.Second}
	// For delays up to ~0.9 s today's code needs max_delay below half the
	// interval.
	pairDeepWorkaround = RealPair{Name: "workaround3s", Interval: 3 * time.Second, MaxDelay: 1400 * time.Millisecond}
)

func runReal(t *testing.T, opt RealOptions, title string) *RealResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opt.Duration+4*time.Minute)
	defer cancel()
	res, err := RunReal(ctx, opt)
	if err != nil {
		t.Fatalf("real-traffic run (files in %s): %v", opt.WorkDir, err)
	}
	var b bytes.Buffer
	res.WriteMarkdown(&b, opt, title)
	t.Logf("report:\n%s", b.String())
	if p := os.Getenv("LDS_TESTBED_REPORT"); p != "" {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(b.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	checkRealTruth(t, res)
	return res
}

// checkRealTruth asserts that the truth is whole: no packet appears at tap
// B only (but for identities seen twice at tap A, which the join leaves
// out), and the packets missing at tap B are exactly the ones the
// bottleneck's FIFO dropped (only measured packets cross it: the
// neighbours are permanent, so no ARP).
func checkRealTruth(t *testing.T, res *RealResult) {
	t.Helper()
	if res.JoinPackets == 0 {
		t.Fatal("tcpdump at tap A saw no packet")
	}
	if res.JoinUnmatched > res.JoinDup {
		t.Errorf("%d packets at tap B have no twin at tap A (%d identities seen twice at A): a tap lost packets?", res.JoinUnmatched, res.JoinDup)
	}
	lost := int64(res.JoinPackets - res.JoinMatched)
	if lost != res.QdiscDropped {
		t.Errorf("truth lost %d packets between the taps, the bottleneck's pfifo dropped %d: a tap lost packets?", lost, res.QdiscDropped)
	}
	if res.FetchErrors > res.Fetches/2 {
		t.Errorf("%d of %d curl fetches failed", res.FetchErrors, res.Fetches)
	}
}

// checkAcceptance asserts the real-traffic acceptance on one pair: zero false
// loss on loss-free flows of >= 100 packets, delay coverage >= 95 % and
// median relative error <= 1 % for flows of >= 100 packets, every true
// loss detected (or, in an interval flagged delay_beyond_window, withheld
// under that status: the record says its loss is unknown, never zero).
func checkAcceptance(t *testing.T, pr RealPairResult) { checkPair(t, pr, true) }

// checkComparison holds a comparison pair (longer intervals and a
// max_delay set by hand, not the defaults) to the same lines but
// coverage, which it logs: its intervals are two or three times longer,
// so each interval flagged at the onset of congestion weighs two or three
// times as much in a short run.
func checkComparison(t *testing.T, pr RealPairResult) { checkPair(t, pr, false) }

func checkPair(t *testing.T, pr RealPairResult, coverage bool) {
	t.Helper()
	s := pr.Score
	if pr.SenderKernelDrops != 0 || pr.ReceiverKernelDrops != 0 {
		// Not a failure by itself: the acceptance below says whether lds
		// stayed right; this says why it may not have.
		t.Logf("%s: the daemons' capture rings dropped packets (sender %d, receiver %d): the machine starved them", pr.Pair.Name, pr.SenderKernelDrops, pr.ReceiverKernelDrops)
	}
	if s.BigLossFree == 0 || s.Lossy == 0 {
		t.Fatalf("%s: nothing to judge: %d loss-free records with >= 100 packets, %d lossy records", pr.Pair.Name, s.BigLossFree, s.Lossy)
	}
	if s.FalseLossBig != 0 {
		t.Errorf("%s: %d of %d loss-free flows with >= 100 packets reported with loss", pr.Pair.Name, s.FalseLossBig, s.BigLossFree)
	}
	if c := s.LossFreeCoverage(); !coverage {
		t.Logf("%s: delay coverage of loss-free flows with >= 100 packets %d/%d (comparison pair: not held to 95 %%)", pr.Pair.Name, s.LossFreeBigCovered, s.BigLossFree)
	} else if !(c >= 0.95) {
		t.Errorf("%s: delay coverage of loss-free flows with >= 100 packets %d/%d, want >= 95%%", pr.Pair.Name, s.LossFreeBigCovered, s.BigLossFree)
	}
	if !(s.MedianRelBig <= 0.01) {
		t.Errorf("%s: median relative delay error of flows with >= 100 packets %.4f, want <= 0.01", pr.Pair.Name, s.MedianRelBig)
	}
	if s.LossyDetected+s.LossyWithheld != s.Lossy {
		t.Errorf("%s: %d of %d flows with true loss reported with loss (%d more flagged delay_beyond_window)", pr.Pair.Name, s.LossyDetected, s.Lossy, s.LossyWithheld)
	}
	t.Logf("%s: %d of %d flows with true loss reported with loss, %d flagged delay_beyond_window with their loss withheld", pr.Pair.Name, s.LossyDetected, s.Lossy, s.LossyWithheld)
}

func congestedPrecondition(t *testing.T, res *RealResult) {
	t.Helper()
	if res.QdiscDropped <= 0 || !(res.FlowDelayMaxMS > 100) {
		t.Fatalf("the bottleneck did not congest (pfifo drops %d, largest flow mean delay %.1f ms): nothing is tested", res.QdiscDropped, res.FlowDelayMaxMS)
	}
}

// TestRealCongested: real TCP (iperf3, 4 streams), UDP, ping and curl
// through a 20 Mbit/s HTB bottleneck with a 400-packet FIFO (one-way
// delays of 100-250 ms, tail drop), two daemon pairs side by side on the
// same taps: the workaround configuration (interval 2s, max_delay 900ms)
// and the defaults.
func TestRealCongested(t *testing.T) {
	needLive(t, realTools...)
	opt := realOptions(t, pairWorkaround, pairDefaults)
	if os.Getenv("LDS_REAL_SECONDS") == "" {
		// Long enough that the one or two intervals flagged while the
		// hold window grows at the onset weigh little in the coverage.
		opt.Duration = 60 * time.Second
	}
	res := runReal(t, opt, "congested")
	congestedPrecondition(t, res)
	t.Run("workaround_2s_900ms", func(t *testing.T) { checkComparison(t, res.Pairs[0]) })
	t.Run("defaults", func(t *testing.T) {
		checkAcceptance(t, res.Pairs[1])
	})
	t.Run("lost_list", func(t *testing.T) { checkRealLost(t, opt, res, &res.Pairs[1]) })
}

// TestRealLowDelay: the same kinds of traffic through a 50-packet FIFO
// (a full FIFO drains in 30 ms), the iperf3 TCP streams held at 2 Mbit/s
// each and a curl round every 2 s, so the link is not congested: the
// queue builds and tail-drops only in bursts (curl's slow starts).
// Default settings.
func TestRealLowDelay(t *testing.T) {
	needLive(t, realTools...)
	opt := lowDelay(realOptions(t, pairDefaults))
	if os.Getenv("LDS_REAL_SECONDS") == "" {
		opt.Duration = 20 * time.Second
	}
	res := runReal(t, opt, "low delay")
	if res.QdiscDropped <= 0 {
		t.Fatalf("no tail drop at the bottleneck: nothing lossy to judge")
	}
	// The run's regime is the queue's: a full FIFO drains in 30 ms. A
	// single packet can take longer when the host stalls the router's
	// namespace (54.6 ms seen on the 2-core machine, its acceptance met),
	// which this test does not control; the 99th percentile is the
	// queue's.
	if !(res.PacketDelayP99MS < 50) {
		t.Errorf("99 %% of the packets took up to %.1f ms between the taps (the slowest %.1f ms): not a low-delay run (below the 50 ms a hold window starts at)",
			res.PacketDelayP99MS, res.PacketDelayMaxMS)
	}
	checkAcceptance(t, res.Pairs[0])
}

// TestRealDeepQueue: the congested run with a 1450-packet FIFO (a full
// FIFO drains in 878 ms): one-way delays up to ~0.9 s, below the default
// max_delay of 1 s. The workaround pair (interval 3s, max_delay 1400ms)
// is the reference the defaults pair is compared with.
func TestRealDeepQueue(t *testing.T) {
	needLive(t, realTools...)
	opt := realOptions(t, pairDeepWorkaround, pairDefaults)
	opt.Bottleneck.Limit = 1450
	if os.Getenv("LDS_REAL_SECONDS") == "" {
		opt.Duration = 60 * time.Second // as TestRealCongested
	}
	res := runReal(t, opt, "deep queue")
	if !(res.PacketDelayMaxMS > 500) || res.QdiscDropped <= 0 {
		t.Fatalf("the queue did not fill (largest delay %.1f ms, pfifo drops %d): nothing is tested", res.PacketDelayMaxMS, res.QdiscDropped)
	}
	t.Run("workaround_3s_1400ms", func(t *testing.T) { checkComparison(t, res.Pairs[0]) })
	t.Run("defaults", func(t *testing.T) {
		checkAcceptance(t, res.Pairs[1])
	})
}

// lowDelay: a 50-packet FIFO, TCP streams at 2 Mbit/s each, a curl round
// every 2 s.
func lowDelay(opt RealOptions) RealOptions {
	opt.Bottleneck.Limit, opt.TCPRate, opt.FetchPause = 50, "2M", 2*time.Second
	return opt
}

// TestRealGRORefused: with GRO on at the taps, both daemons must refuse to
// start and say which ethtool command turns it off; after that command
// they must start.
func TestRealGRORefused(t *testing.T) {
	needLive(t, realTools...)
	opt := realOptions(t, pairDefaults)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A refusing daemon exits at once; the bound is generous for a loaded machine.
	out, err := RunRealGRO(ctx, opt, pairDefaults, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out {
		refused := r.Exited && r.ExitErr != nil && strings.Contains(r.Log, "ethtool -K")
		if refused {
			t.Logf("%s refused with gro on: %s", r.Daemon, refusalLine(r.Log))
			if !r.AdviceWorks {
				t.Errorf("%s: after the advised `%s` it still does not run; log:\n%s", r.Daemon, r.Advice, r.AdviceLog)
			}
		}
		if !refused {
			t.Errorf("%s with gro on at its tap: exited %v (%v); want a refusal naming `ethtool -K`; log:\n%s", r.Daemon, r.Exited, r.ExitErr, r.Log)
		}
	}
}

// TestRealLong is the longer run of `make e2e-real` (LDS_E2E_REAL_LONG=1;
// LDS_REAL_SECONDS sets the traffic's length, default 120): the congested
// run with both pairs, the deep-queue run with both of its pairs, then the
// low-delay run, reported into
// LDS_TESTBED_REPORT, with the same acceptance as the short runs.
func TestRealLong(t *testing.T) {
	if os.Getenv("LDS_E2E_REAL_LONG") != "1" {
		t.Skip("SKIPPED: the long real-traffic run needs LDS_E2E_REAL_LONG=1 (scripts/e2e-real.sh sets it)")
	}
	needLive(t, realTools...)
	long := func(opt RealOptions) RealOptions {
		if os.Getenv("LDS_REAL_SECONDS") == "" {
			opt.Duration = 120 * time.Second
		}
		return opt
	}
	sub := func(opt RealOptions, name string) RealOptions {
		if os.Getenv("LDS_REAL_DIR") != "" {
			opt.WorkDir = filepath.Join(opt.WorkDir, name) // both runs' files kept
		}
		return long(opt)
	}
	t.Run("congested", func(t *testing.T) {
		res := runReal(t, sub(realOptions(t, pairWorkaround, pairDefaults), "congested"), "congested")
		congestedPrecondition(t, res)
		checkComparison(t, res.Pairs[0])
		checkAcceptance(t, res.Pairs[1])
	})
	t.Run("deep_queue", func(t *testing.T) {
		opt := sub(realOptions(t, pairDeepWorkaround, pairDefaults), "deep-queue")
		opt.Bottleneck.Limit = 1450
		res := runReal(t, opt, "deep queue")
		checkComparison(t, res.Pairs[0])
		checkAcceptance(t, res.Pairs[1])
	})
	t.Run("low_delay", func(t *testing.T) {
		opt := sub(lowDelay(realOptions(t, pairDefaults)), "low-delay")
		checkAcceptance(t, runReal(t, opt, "low delay").Pairs[0])
	})
}

// refusalLine is the log line that names ethtool -K.
func refusalLine(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "ethtool -K") {
			return l
		}
	}
	return ""
}
