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
	"github.com/lds-net/lds/test/testutil"
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
	l := newTapDownLink(t) // B's end stays down: the receiver starts on a tap whose link is down.
	d := startTapDown(t, l)
	defer d.stop()
	defer l.traffic(t)()

	rx := d.rx
	start := time.Now()
	d.wait("the receiver to report the tap down", func() bool {
		return gaugeValue(t, rx, "lds_capture_link_up") == 0 && gaugeValue(t, rx, "lds_capture_link_down_total") == 1
	})
	time.Sleep(1500 * time.Millisecond)
	sh(t, "ip", "-n", l.nsB, "link", "set", l.ifB, "up")
	up1 := time.Now()
	d.wait("the tap up", func() bool { return gaugeValue(t, rx, "lds_capture_link_up") == 1 })
	d.wait("measured intervals after the tap came up", d.measuredAfter(d.ivOf(up1)+1))
	if !d.partialIn(d.ivOf(start), d.ivOf(up1)) {
		t.Errorf("no interval between %d and %d (tap down at start) flagged partial", d.ivOf(start), d.ivOf(up1))
	}

	down := time.Now()
	sh(t, "ip", "-n", l.nsB, "link", "set", l.ifB, "down")
	d.wait("the second outage counted", func() bool {
		return gaugeValue(t, rx, "lds_capture_link_up") == 0 && gaugeValue(t, rx, "lds_capture_link_down_total") == 2
	})
	time.Sleep(1500 * time.Millisecond)
	sh(t, "ip", "-n", l.nsB, "link", "set", l.ifB, "up")
	up2 := time.Now()
	d.wait("the tap up again", func() bool { return gaugeValue(t, rx, "lds_capture_link_up") == 1 })
	d.wait("measured intervals after the second outage", d.measuredAfter(d.ivOf(up2)+1))
	if !d.partialIn(d.ivOf(down), d.ivOf(up2)) {
		t.Errorf("no interval between %d and %d (the outage) flagged partial", d.ivOf(down), d.ivOf(up2))
	}
	d.alive()
	d.logMu.Lock()
	n := strings.Count(d.logBuf.String(), `capture interface is down: waiting for it; intervals are flagged partial until it is up" interface=`+l.ifB)
	d.logMu.Unlock()
	if n != 2 {
		t.Errorf("%d log lines saying the receiver's capture interface is down, want 2 (one per outage)", n)
	}
	// The sender's tap lost its carrier with each outage of B's end: its
	// own series say so once an interval has been shipped since.
	d.wait("the sender's series", func() bool {
		resp, err := http.Get("http://" + d.senderMetrics + "/metrics")
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

// tapDownLink is a veth between two network namespaces: A's end up with
// B's address resolved, B's end down.
type tapDownLink struct{ nsA, nsB, ifA, ifB string }

func newTapDownLink(t *testing.T) tapDownLink {
	tag := fmt.Sprintf("%d-%d", os.Getpid(), rand.IntN(100000))
	l := tapDownLink{nsA: "ldsrxdown-" + tag + "-a", nsB: "ldsrxdown-" + tag + "-b", ifA: fmt.Sprintf("ld%d%da", os.Getpid()%100000, rand.IntN(1000))}
	l.ifB = l.ifA[:len(l.ifA)-1] + "b"
	for _, ns := range []string{l.nsA, l.nsB} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	sh(t, "ip", "-n", l.nsA, "link", "add", l.ifA, "type", "veth", "peer", "name", l.ifB, "netns", l.nsB)
	sh(t, "ip", "-n", l.nsB, "link", "set", l.ifB, "address", "02:00:00:00:21:02")
	sh(t, "ip", "-n", l.nsA, "addr", "add", "10.214.0.1/24", "dev", l.ifA)
	sh(t, "ip", "-n", l.nsB, "addr", "add", "10.214.0.2/24", "dev", l.ifB)
	sh(t, "ip", "-n", l.nsA, "neigh", "replace", "10.214.0.2", "lladdr", "02:00:00:00:21:02", "dev", l.ifA, "nud", "permanent")
	sh(t, "ip", "-n", l.nsA, "link", "set", l.ifA, "up")
	return l
}

// traffic sends 200 UDP packets a second from A to B until the function
// it returns is called.
func (l tapDownLink) traffic(t *testing.T) (stop func()) {
	var conn net.Conn
	var sink net.PacketConn
	if err := testutil.InNetns(l.nsB, func() (err error) { sink, err = net.ListenPacket("udp4", "10.214.0.2:9999"); return err }); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := sink.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	if err := testutil.InNetns(l.nsA, func() (err error) { conn, err = net.Dial("udp4", "10.214.0.2:9999"); return err }); err != nil {
		sink.Close()
		t.Fatal(err)
	}
	stopTraffic := make(chan struct{})
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopTraffic:
				return
			case <-tick.C:
				_, _ = conn.Write(fmt.Appendf(nil, "packet %d of the link-down test", i)) // errors while the link is down are expected
			}
		}
	}()
	return func() { close(stopTraffic); conn.Close(); sink.Close() }
}

// tapDownDaemons are the sender on A's end and the receiver on B's, with
// the receiver's intervals and both daemons' log.
type tapDownDaemons struct {
	t             *testing.T
	rx            *receiver.Receiver
	interval      int64
	senderMetrics string // the sender's metrics address
	srcA, srcB    capture.Source
	cancel        context.CancelFunc
	rxDone        chan error
	txDone        chan error
	t0            time.Time

	mu  sync.Mutex
	got map[int64]*results.Interval

	logMu  sync.Mutex
	logBuf strings.Builder
}

func startTapDown(t *testing.T, l tapDownLink) *tapDownDaemons {
	d := &tapDownDaemons{t: t, got: map[int64]*results.Interval{}, rxDone: make(chan error, 1), txDone: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(lockedWriter{&d.logMu, &d.logBuf}, nil))
	open := func(ns, ifname string) capture.Source {
		var s capture.Source
		src := capture.DefaultConfig().Source
		src.Kind, src.Interface, src.BlockSize, src.NumBlocks = "afpacket", ifname, 1<<18, 8
		if err := testutil.InNetns(ns, func() (err error) { s, err = capture.OpenAFPacket(src, 0, log); return err }); err != nil {
			t.Fatal(err)
		}
		return s
	}
	d.srcA, d.srcB = open(l.nsA, l.ifA), open(l.nsB, l.ifB)

	rc := config.DefaultReceiver()
	rc.PTP.Enabled = false
	rc.Sketch.Seed = "link-down-test-seed"
	rc.Receiver.TLS.Plaintext = true
	rc.Receiver.Lateness = 3 * time.Second
	rc.Capture.Source.Kind, rc.Capture.Source.Interface = "afpacket", l.ifB
	d.interval = int64(rc.Interval)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if d.rx, err = receiver.New(rc, receiver.Options{Sources: []capture.Source{d.srcB}, Listener: lis, NoHTTP: true,
		OnInterval: func(iv *results.Interval) { d.mu.Lock(); d.got[iv.Interval] = iv; d.mu.Unlock() }}, log); err != nil {
		t.Fatal(err)
	}
	scfg := config.DefaultSender()
	scfg.Common = rc.Common
	scfg.Capture.Source.Interface = l.ifA
	scfg.Sender.ID, scfg.Sender.Receiver, scfg.Sender.TLS.Plaintext = "edge-a", lis.Addr().String(), true
	metricsLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.senderMetrics = metricsLis.Addr().String()
	tx, err := sender.New(scfg, sender.Options{Sources: []capture.Source{d.srcA}, HTTPListener: metricsLis}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.rxDone <- d.rx.Run(ctx) }()
	go func() { d.txDone <- tx.Run(ctx) }()
	d.t0 = time.Now()
	return d
}

// stop stops both daemons, checks that they ended without an error, and
// logs what they logged if the test failed.
func (d *tapDownDaemons) stop() {
	d.cancel()
	for what, ch := range map[string]chan error{"receiver": d.rxDone, "sender": d.txDone} {
		if err := <-ch; err != nil {
			d.t.Errorf("%s: %v", what, err)
		}
	}
	d.srcA.Close()
	d.srcB.Close()
	if d.t.Failed() {
		d.logMu.Lock()
		d.t.Log(d.logBuf.String())
		d.logMu.Unlock()
	}
}

// alive fails the test if a daemon has exited.
func (d *tapDownDaemons) alive() {
	d.t.Helper()
	select {
	case err := <-d.rxDone:
		d.t.Fatalf("receiver exited: %v", err)
	case err := <-d.txDone:
		d.t.Fatalf("sender exited: %v", err)
	default:
	}
}

// wait polls cond for up to a minute while both daemons run.
func (d *tapDownDaemons) wait(what string, cond func() bool) {
	d.t.Helper()
	defer func() { d.t.Logf("%5.1fs %s", time.Since(d.t0).Seconds(), what) }()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		d.alive()
		if time.Now().After(deadline) {
			d.mu.Lock()
			for id, iv := range d.got {
				d.t.Logf("interval %d: %s, %d flows", id, iv.Outcome, len(iv.Flows))
			}
			d.mu.Unlock()
			d.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// measuredAfter: an interval after the given one matched, with a delay
// and no loss.
func (d *tapDownDaemons) measuredAfter(after int64) func() bool {
	return func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for id, iv := range d.got {
			if id > after && iv.Outcome == results.OutcomeMatched && len(iv.Flows) > 0 && iv.Flows[0].DelayNS != nil && iv.Flows[0].Loss != nil && *iv.Flows[0].Loss == 0 {
				return true
			}
		}
		return false
	}
}

// partialIn: an interval in [lo, hi] was published partial.
func (d *tapDownDaemons) partialIn(lo, hi int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := lo; id <= hi; id++ {
		if iv := d.got[id]; iv != nil && iv.Outcome == results.OutcomePartial {
			return true
		}
	}
	return false
}

func (d *tapDownDaemons) ivOf(tm time.Time) int64 { return tm.UnixNano() / d.interval }

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
