package e2e

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/join"
)

// pairStall is the defaults pair with the daemons' default capture ring and
// lateness (a sender stopped for 3 s still delivers the interval it was
// shipping when it stopped), but blocks handed over every 10 ms instead of
// 50: the ring holds 2.56 s at these rates instead of 12.8 s, so that a
// stop of 3.56 s overflows it and a sender stopped that long is still
// within the 10 s lateness. The 1 s stop it holds, the default ring holds
// five times over.
var pairStall = RealPair{Name: "stall", Interval: time.Second, Defaults: true, BlockTimeout: 10 * time.Millisecond}

// TestRealStall: real traffic through the congested bottleneck (tail
// drop), one daemon stopped (SIGSTOP) for 1 s and, later, for 3 s, as a
// process starved of CPU is; one run stalls the receiver, another the
// sender. tcpdump at the same taps keeps every packet: the truth.
//   - The 1 s stop drops nothing with the default ring's blocks
//     (pairStall: a fifth of its hold at low rates).
//   - The 3 s stop overflows them; every record of the intervals it
//     overlaps says capture_drops and withholds its loss.
//   - No flow-interval that lost nothing on the wire reports loss >= 1.
//   - Of the flow-intervals outside the capture_drops intervals that lost
//     >= 3 packets, >= 95 % report loss >= 1.
func TestRealStall(t *testing.T) {
	needLive(t, realTools...)
	for _, daemon := range []string{"receiver", "sender"} {
		t.Run(daemon, func(t *testing.T) {
			opt := realOptions(t, pairStall)
			if os.Getenv("LDS_REAL_SECONDS") == "" {
				opt.Duration = 25 * time.Second
			}
			opt.WorkDir += "/" + daemon
			// The short stop first; the long one well inside the
			// traffic, so that its intervals and the ones after it are
			// evaluated. The long one lasts 3 s, and at least a second
			// longer than the pair's ring holds at low rates, so that it
			// overflows whatever the kernel's timer granularity.
			long := max(3*time.Second, lowRateHold(pairStall)+time.Second)
			opt.Stalls = []Stall{{Pair: 0, Daemon: daemon, At: 5 * time.Second, For: time.Second},
				{Pair: 0, Daemon: daemon, At: opt.Duration/2 + 2*time.Second, For: long}}
			res := runReal(t, opt, "stall of the "+daemon)
			congestedPrecondition(t, res)
			checkStall(t, res, res.Pairs[0])
		})
	}
}

// lowRateHold is how long a Defaults pair's capture ring holds at low
// packet rates: the default ring, with the pair's block_timeout if it sets
// one.
func lowRateHold(pr RealPair) time.Duration {
	c := config.DefaultCommon().Capture.Source
	return capture.RingHold(c.BlockSize, c.NumBlocks, cmp.Or(pr.BlockTimeout, c.BlockTimeout), 0)
}

// stallScore is what TestRealStall asserts, over the evaluated intervals.
type stallScore struct {
	falseLoss        []string // loss-free on the wire, loss >= 1 reported
	stalledIvs       int      // intervals overlapped by a stall that dropped packets
	stalledRecs      int      // their records
	stalledFlagged   int      // of those, status capture_drops with loss null
	flaggedIvs       int      // intervals with capture_drops records
	lossy3, found3   int      // outside flagged intervals: lost >= 3, reported with loss >= 1
	withheld3        int      // of lossy3, loss withheld (delay_beyond_window)
	missed3          []string // lossy3 not found
	nonNullFlagged   int      // capture_drops records with a loss
	lossyInFlagged   int      // truth records with loss inside flagged intervals
	truthInStalled   int      // truth records in stalled intervals
	recordsByStatusF map[results.Status]int
}

func scoreStall(pr RealPairResult, stalls []StallResult) stallScore {
	T := pr.Pair.Interval
	s := stallScore{recordsByStatusF: map[results.Status]int{}}
	stalled := map[int64]bool{}
	for _, st := range stalls {
		if st.Drops() <= 0 {
			continue
		}
		first, last := st.Intervals(T)
		for id := first; id <= last; id++ {
			if id >= pr.FirstIv && id <= pr.LastIv {
				stalled[id] = true
			}
		}
	}
	s.stalledIvs = len(stalled)
	recs := map[join.FlowID]*results.FlowRecord{}
	flagged := map[int64]bool{}
	for i := range pr.Results {
		r := &pr.Results[i]
		recs[join.FlowID{Interval: r.Interval, Key: r.Key}] = r
		if r.Status == results.StatusCaptureDrops {
			flagged[r.Interval] = true
			if r.Loss != nil || r.LossBound != nil || r.LossPoint != nil {
				s.nonNullFlagged++
			}
		}
		if stalled[r.Interval] {
			s.stalledRecs++
			s.recordsByStatusF[r.Status]++
			if r.Status == results.StatusCaptureDrops && r.Loss == nil {
				s.stalledFlagged++
			}
		}
	}
	s.flaggedIvs = len(flagged)
	for _, tr := range pr.Truth {
		k, _ := tr.Key()
		r := recs[join.FlowID{Interval: tr.Interval, Key: k}]
		desc := func() string {
			st, loss := "no record", "-"
			if r != nil {
				st, loss = string(r.Status), fmtLoss(r.Loss)
			}
			return fmt.Sprintf("interval %d %s: sent %d lost %d, loss %s status %q", tr.Interval, capture.FlowKey(k), tr.Sent, tr.Lost, loss, st)
		}
		if stalled[tr.Interval] {
			s.truthInStalled++
		}
		if tr.Lost == 0 {
			if r != nil && r.LossOr(0) >= 1 {
				s.falseLoss = append(s.falseLoss, desc())
			}
			continue
		}
		if flagged[tr.Interval] {
			s.lossyInFlagged++
			continue
		}
		if tr.Lost >= 3 {
			s.lossy3++
			switch {
			case r != nil && r.LossOr(0) >= 1:
				s.found3++
			default:
				if r != nil && r.Status == results.StatusBeyondWindow {
					s.withheld3++
				}
				s.missed3 = append(s.missed3, desc())
			}
		}
	}
	return s
}

// packetsBetween counts the measured packets of a capture file with
// timestamps in [from, to].
func packetsBetween(path string, from, to time.Time) (int, error) {
	c := config.DefaultCommon()
	c.Capture.Select = nil // the file holds only what tcpdump's filter kept
	p, err := capture.NewParser(c.CaptureConfig())
	if err != nil {
		return 0, err
	}
	n := 0
	err = capture.EachPacket(path, p, func(pk *capture.Packet) bool {
		if pk.TS >= from.UnixNano() && pk.TS <= to.UnixNano() {
			n++
		}
		return true
	})
	return n, err
}

func fmtLoss(v *float64) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprintf("%.2f", *v)
}

func checkStall(t *testing.T, res *RealResult, pr RealPairResult) {
	t.Helper()
	if len(res.Stalls) != 2 {
		t.Fatalf("%d stalls carried out, want 2", len(res.Stalls))
	}
	short, long := res.Stalls[0], res.Stalls[1]
	for _, st := range res.Stalls {
		first, last := st.Intervals(pr.Pair.Interval)
		// tcpdump at the same tap: the packets that came while the daemon
		// was stopped, and so how long its ring held them.
		pcap := filepath.Join(res.Dir, "tap-b.pcap")
		if st.Daemon == "sender" {
			pcap = filepath.Join(res.Dir, "tap-a.pcap")
		}
		n, err := packetsBetween(pcap, st.Stop, st.Cont)
		if err != nil {
			t.Fatal(err)
		}
		stopped := st.Cont.Sub(st.Stop)
		held := time.Duration(float64(stopped) * (1 - float64(st.Drops())/float64(max(1, n))))
		t.Logf("%s stopped %v (intervals %d-%d, evaluated %d-%d): kernel ring drops %d (%d before, %d after) of %d packets into its tap meanwhile: the ring held at least ~%v (tcpdump -Q in leaves out the packets going out of the tap, which share the ring and its drops)",
			st.Daemon, stopped.Round(time.Millisecond), first, last, pr.FirstIv, pr.LastIv, st.Drops(), st.DropsBefore, st.DropsAfter, n, held.Round(10*time.Millisecond))
	}
	hold := lowRateHold(pr.Pair)
	if short.Drops() != 0 {
		t.Errorf("a %v stop dropped %d packets with the default ring's blocks (the ring holds %v at low rates)", short.For, short.Drops(), hold)
	}
	if long.Drops() <= 0 {
		t.Fatalf("a %v stop dropped nothing with the default ring's blocks (the ring holds %v at low rates): nothing to judge", long.For, hold)
	}
	s := scoreStall(pr, res.Stalls)
	t.Logf("intervals overlapped by a stall with drops %d (%d records: %v); intervals with capture_drops records %d; "+
		"truth records in stalled intervals %d, lossy truth records in flagged intervals %d",
		s.stalledIvs, s.stalledRecs, s.recordsByStatusF, s.flaggedIvs, s.truthInStalled, s.lossyInFlagged)
	if s.stalledIvs == 0 || s.stalledRecs == 0 {
		t.Fatalf("no record in the intervals the %v stop overlapped: nothing to judge", long.For)
	}
	if s.stalledFlagged != s.stalledRecs {
		t.Errorf("%d of %d records of the stalled intervals say capture_drops with loss null (%v)", s.stalledFlagged, s.stalledRecs, s.recordsByStatusF)
	}
	if s.nonNullFlagged != 0 {
		t.Errorf("%d capture_drops records carry a loss, loss_point or loss_bound", s.nonNullFlagged)
	}
	if len(s.falseLoss) != 0 {
		t.Errorf("%d flow-intervals that lost nothing on the wire report loss >= 1:\n%v", len(s.falseLoss), s.falseLoss)
	}
	if s.lossy3 == 0 {
		t.Fatalf("no flow-interval lost >= 3 packets outside the capture_drops intervals: nothing to judge")
	}
	t.Logf("flow-intervals that lost >= 3 packets outside the capture_drops intervals: %d found of %d (%d withheld as delay_beyond_window)", s.found3, s.lossy3, s.withheld3)
	if float64(s.found3) < 0.95*float64(s.lossy3) {
		t.Errorf("only %d of %d flow-intervals that lost >= 3 packets outside the capture_drops intervals report loss >= 1, want >= 95 %%:\n%v", s.found3, s.lossy3, s.missed3)
	}
}
