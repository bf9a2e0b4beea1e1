package receiver_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sender"
	"github.com/lds-net/lds/internal/testutil"
)

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// gaugeValue reads one unlabelled series of the receiver's registry (-1
// when it does not exist).
func gaugeValue(t *testing.T, rx *receiver.Receiver, name string) float64 {
	t.Helper()
	mfs, err := rx.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestLiveReceiverTapDown runs a sender and a receiver on AF_PACKET taps
// of a real veth (sender: A's end, receiver: B's end). B's end is down
// when the receiver starts, comes up, goes down and up again: the daemons
// never exit, the receiver counts two outages and exports the link state,
// the intervals an outage touched are flagged partial, and measured
// intervals resume after each outage.
func TestLiveReceiverTapDown(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		testutil.SkipOrFail(t, "%s", "needs iproute2 (ip)")
	}
	tag := fmt.Sprintf("%d-%d", os.Getpid(), rand.IntN(100000))
	nsA, nsB := "ldsrxdown-"+tag+"-a", "ldsrxdown-"+tag+"-b"
	ifA := fmt.Sprintf("ld%d%da", os.Getpid()%100000, rand.IntN(1000))
	ifB := ifA[:len(ifA)-1] + "b"
	for _, ns := range []string{nsA, nsB} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	sh(t, "ip", "-n", nsA, "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", nsB)
	sh(t, "ip", "-n", nsB, "link", "set", ifB, "address", "02:00:00:00:21:02")
	sh(t, "ip", "-n", nsA, "addr", "add", "10.214.0.1/24", "dev", ifA)
	sh(t, "ip", "-n", nsB, "addr", "add", "10.214.0.2/24", "dev", ifB)
	sh(t, "ip", "-n", nsA, "neigh", "replace", "10.214.0.2", "lladdr", "02:00:00:00:21:02", "dev", ifA, "nud", "permanent")
	sh(t, "ip", "-n", nsA, "link", "set", ifA, "up")
	// B's end stays down: the receiver starts on a tap whose link is down.

	var logBuf strings.Builder
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logBuf}, nil))
	open := func(ns, ifname string) capture.Source {
		var s capture.Source
		src := capture.DefaultConfig().Source
		src.Kind, src.Interface, src.BlockSize, src.NumBlocks = "afpacket", ifname, 1<<18, 8
		if err := testutil.InNetns(ns, func() (err error) { s, err = capture.OpenAFPacket(src, 0, log); return err }); err != nil {
			t.Fatal(err)
		}
		return s
	}
	srcA, srcB := open(nsA, ifA), open(nsB, ifB)

	rc := config.DefaultReceiver()
	rc.PTP.Enabled = false
	rc.Sketch.Seed = "link-down-test-seed"
	rc.Receiver.TLS.Plaintext = true
	rc.Receiver.Lateness = 3 * time.Second
	rc.Capture.Source.Kind, rc.Capture.Source.Interface = "afpacket", ifB
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[int64]*results.Interval{}
	rx, err := receiver.New(rc, receiver.Options{Sources: []capture.Source{srcB}, Listener: lis, NoHTTP: true,
		OnInterval: func(iv *results.Interval) { mu.Lock(); got[iv.Interval] = iv; mu.Unlock() }}, log)
	if err != nil {
		t.Fatal(err)
	}
	scfg := config.DefaultSender()
	scfg.Common = rc.Common
	scfg.Capture.Source.Interface = ifA
	scfg.Sender.ID, scfg.Sender.Receiver, scfg.Sender.TLS.Plaintext = "edge-a", lis.Addr().String(), true
	metricsLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := sender.New(scfg, sender.Options{Sources: []capture.Source{srcA}, HTTPListener: metricsLis}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rxDone, txDone := make(chan error, 1), make(chan error, 1)
	go func() { rxDone <- rx.Run(ctx) }()
	go func() { txDone <- tx.Run(ctx) }()
	defer func() {
		cancel()
		for what, ch := range map[string]chan error{"receiver": rxDone, "sender": txDone} {
			if err := <-ch; err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
		srcA.Close()
		srcB.Close()
		if t.Failed() {
			logMu.Lock()
			t.Log(logBuf.String())
			logMu.Unlock()
		}
	}()
	alive := func() {
		t.Helper()
		select {
		case err := <-rxDone:
			t.Fatalf("receiver exited: %v", err)
		case err := <-txDone:
			t.Fatalf("sender exited: %v", err)
		default:
		}
	}
	t0 := time.Now()
	wait := func(what string, cond func() bool) {
		t.Helper()
		defer func() { t.Logf("%5.1fs %s", time.Since(t0).Seconds(), what) }()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			alive()
			if time.Now().After(deadline) {
				mu.Lock()
				for id, iv := range got {
					t.Logf("interval %d: %s, %d flows", id, iv.Outcome, len(iv.Flows))
				}
				mu.Unlock()
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	measuredAfter := func(after int64) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for id, iv := range got {
				if id > after && iv.Outcome == results.OutcomeMatched && len(iv.Flows) > 0 && iv.Flows[0].DelayNS != nil && iv.Flows[0].Loss == 0 {
					return true
				}
			}
			return false
		}
	}
	partialIn := func(lo, hi int64) bool {
		mu.Lock()
		defer mu.Unlock()
		for id := lo; id <= hi; id++ {
			if iv := got[id]; iv != nil && iv.Outcome == results.OutcomePartial {
				return true
			}
		}
		return false
	}
	ivOf := func(tm time.Time) int64 { return tm.UnixNano() / int64(rc.Interval) }

	// Traffic from A to B throughout: 200 UDP packets a second.
	var conn net.Conn
	var sink net.PacketConn
	if err := testutil.InNetns(nsB, func() (err error) { sink, err = net.ListenPacket("udp4", "10.214.0.2:9999"); return err }); err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := sink.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	if err := testutil.InNetns(nsA, func() (err error) { conn, err = net.Dial("udp4", "10.214.0.2:9999"); return err }); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stopTraffic := make(chan struct{})
	defer close(stopTraffic)
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopTraffic:
				return
			case <-tick.C:
				conn.Write(fmt.Appendf(nil, "packet %d of the link-down test", i)) // errors while the link is down are expected
			}
		}
	}()

	start := time.Now()
	wait("the receiver to report the tap down", func() bool {
		return gaugeValue(t, rx, "lds_capture_link_up") == 0 && gaugeValue(t, rx, "lds_capture_link_down_total") == 1
	})
	time.Sleep(1500 * time.Millisecond)
	sh(t, "ip", "-n", nsB, "link", "set", ifB, "up")
	up1 := time.Now()
	wait("the tap up", func() bool { return gaugeValue(t, rx, "lds_capture_link_up") == 1 })
	wait("measured intervals after the tap came up", measuredAfter(ivOf(up1)+1))
	if !partialIn(ivOf(start), ivOf(up1)) {
		t.Errorf("no interval between %d and %d (tap down at start) flagged partial", ivOf(start), ivOf(up1))
	}

	down := time.Now()
	sh(t, "ip", "-n", nsB, "link", "set", ifB, "down")
	wait("the second outage counted", func() bool {
		return gaugeValue(t, rx, "lds_capture_link_up") == 0 && gaugeValue(t, rx, "lds_capture_link_down_total") == 2
	})
	time.Sleep(1500 * time.Millisecond)
	sh(t, "ip", "-n", nsB, "link", "set", ifB, "up")
	up2 := time.Now()
	wait("the tap up again", func() bool { return gaugeValue(t, rx, "lds_capture_link_up") == 1 })
	wait("measured intervals after the second outage", measuredAfter(ivOf(up2)+1))
	if !partialIn(ivOf(down), ivOf(up2)) {
		t.Errorf("no interval between %d and %d (the outage) flagged partial", ivOf(down), ivOf(up2))
	}
	alive()
	logMu.Lock()
	n := strings.Count(logBuf.String(), `capture interface is down: waiting for it; intervals are flagged partial until it is up" interface=`+ifB)
	logMu.Unlock()
	if n != 2 {
		t.Errorf("%d log lines saying the receiver's capture interface is down, want 2 (one per outage)", n)
	}
	// The sender's tap lost its carrier with each outage of B's end: its
	// own series say so once an interval has been shipped since.
	wait("the sender's series", func() bool {
		resp, err := http.Get("http://" + metricsLis.Addr().String() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "\nlds_capture_link_down_total 2\n") && strings.Contains(string(b), "\nlds_capture_link_up 1\n") &&
			strings.Contains(string(b), "\nlds_capture_oversize_frames_total 0\n")
	})
	t.Logf("outages counted by the receiver: %v", gaugeValue(t, rx, "lds_capture_link_down_total"))
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
