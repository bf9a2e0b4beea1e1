package export_test

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/export"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sender"
	"github.com/lds-net/lds/tools/eval"
	"github.com/lds-net/lds/tools/gen"
)

// liveRun is a daemon-mode receiver (not replay: exporters drop rather
// than wait) and a sender over plaintext gRPC on loopback, each reading one
// capture file.
type liveRun struct {
	rx     *receiver.Receiver
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	ivs    int // complete intervals published
	out    string
	once   sync.Once
}

func startLiveRun(t *testing.T, dir, a, b string, configure func(*config.Receiver)) *liveRun {
	t.Helper()
	rc := config.DefaultReceiver()
	rc.PTP.Enabled = false
	rc.Sketch.Seed = "export-live-test-seed"
	rc.Receiver.TLS.Plaintext = true
	rc.Capture.Source.Kind, rc.Capture.Source.File = "file", b
	rc.Receiver.ResultsFile = filepath.Join(dir, "live.jsonl")
	// A live receiver picks each boundary's hold window from the delay
	// evidence that has arrived when its capture reaches the boundary, and
	// the window sets where its sample pieces begin: two live runs can keep
	// different samples. max_delay at the smallest window (these captures'
	// delays stay below 20 ms) fixes every window, so that runs compare.
	rc.MaxDelay = time.Duration(interval.DefaultMinWindow)
	configure(&rc)
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	sa, err := capture.OpenFile(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := capture.OpenFile(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sa.Close(); sb.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	start := gen.DefaultScenario().StartNS
	l := &liveRun{done: make(chan error, 2), out: rc.Receiver.ResultsFile}
	l.rx, err = receiver.New(rc, receiver.Options{Sources: []capture.Source{sb}, Listener: lis, NoHTTP: true, CaptureStart: start,
		Clock: func() time.Time { return time.Unix(0, start) }, // the captures' time: receiver.max_interval_skew
		OnInterval: func(iv *results.Interval) {
			if iv.Outcome == results.OutcomeMatched {
				l.mu.Lock()
				l.ivs++
				l.mu.Unlock()
			}
		}}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	sc := config.DefaultSender()
	sc.Common = rc.Common
	sc.Capture.Source.File = a
	sc.Sender.ID, sc.Sender.Receiver, sc.Sender.TLS.Plaintext = "edge-a", lis.Addr().String(), true
	tx, err := sender.New(sc, sender.Options{Sources: []capture.Source{sa}, NoHTTP: true, CaptureStart: start}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go func() { l.done <- l.rx.Run(ctx) }()
	go func() { l.done <- tx.Run(ctx) }()
	t.Cleanup(func() { cancel(); l.stopWait(t) })
	return l
}

// waitIntervals waits until n intervals were matched and published: the
// captures of captures() span 3, all of which must be final before a stop
// for the results to be the same from run to run.
func (l *liveRun) waitIntervals(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		k := l.ivs
		l.mu.Unlock()
		if k >= n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("fewer than %d intervals matched within 90s", n)
}

// stop stops both daemons (the receiver flushes its exporters) and returns
// the JSONL the receiver wrote.
func (l *liveRun) stop(t *testing.T) []results.FlowRecord {
	t.Helper()
	l.cancel()
	l.stopWait(t)
	recs, err := eval.ReadResultsFile(l.out)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatal("the live receiver published no flow record")
	}
	return recs
}

func (l *liveRun) stopWait(t *testing.T) {
	l.once.Do(func() {
		for range 2 {
			select {
			case err := <-l.done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("daemon: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Error("daemons did not stop within 60s")
				return
			}
		}
	})
}

// tcpCollector is an in-repo IPFIX collector over TCP (the Debian
// collectors listen on UDP only): RFC 7011 framing by the message length.
type tcpCollector struct {
	lis  net.Listener
	mu   sync.Mutex
	recs []nfacctdRecord
	msgs []*export.Message
	errs []error
}

func startTCPCollector(t *testing.T) *tcpCollector {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &tcpCollector{lis: lis}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go c.serve(conn)
		}
	}()
	return c
}

func (c *tcpCollector) serve(conn net.Conn) {
	defer conn.Close()
	dec := export.NewDecoder()
	hdr := make([]byte, 16)
	for {
		if _, err := io.ReadFull(conn, hdr); err != nil {
			return
		}
		n, err := export.MessageLength(hdr)
		if err != nil {
			c.fail(err)
			return
		}
		buf := append(make([]byte, 0, n), hdr...)
		buf = buf[:n]
		if _, err := io.ReadFull(conn, buf[16:]); err != nil {
			return
		}
		m, err := dec.Decode(buf)
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		c.msgs = append(c.msgs, m)
		for _, r := range m.Records {
			c.recs = append(c.recs, fromIPFIX(r))
		}
		c.mu.Unlock()
	}
}

func (c *tcpCollector) fail(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

func (c *tcpCollector) records() []nfacctdRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]nfacctdRecord(nil), c.recs...)
}

// fromIPFIX reads a decoded data record into the fields the checks compare.
func fromIPFIX(r map[export.FieldKey][]byte) nfacctdRecord {
	ent := func(id uint16) export.FieldKey { return export.FieldKey{PEN: export.DefaultEnterpriseNumber, ID: id} }
	var g nfacctdRecord
	src, ok := export.Addr(r, export.IANA(export.IESourceIPv4Address))
	if !ok {
		src, _ = export.Addr(r, export.IANA(export.IESourceIPv6Address))
	}
	dst, ok := export.Addr(r, export.IANA(export.IEDestinationIPv4Address))
	if !ok {
		dst, _ = export.Addr(r, export.IANA(export.IEDestinationIPv6Address))
	}
	g.Src, g.Dst = src.String(), dst.String()
	sp, _ := export.Uint(r, export.IANA(export.IESourceTransportPort))
	dp, _ := export.Uint(r, export.IANA(export.IEDestinationTransportPort))
	pr, _ := export.Uint(r, export.IANA(export.IEProtocolIdentifier))
	g.SPort, g.DPort, g.Proto = uint16(sp), uint16(dp), strconv.FormatUint(pr, 10)
	g.Packets, _ = export.Uint(r, export.IANA(export.IEPacketDeltaCount))
	st, _ := export.Uint(r, export.IANA(export.IEFlowStartMilliseconds))
	g.Start = strconv.FormatUint(st/1000, 10)
	if v, ok := export.Uint(r, export.IANA(export.IEPathDelayMeanDeltaMicrosecs)); ok {
		g.MeanUS = &v
	}
	if v, ok := export.Uint(r, export.IANA(export.IEPathDelaySumDeltaMicrosecs)); ok {
		g.SumUS = &v
	}
	iv, _ := export.Uint(r, ent(export.EntIntervalID))
	g.Interval = int64(iv)
	g.DelayNS = export.Float(r, ent(export.EntDelayMeanNS))
	g.Loss = export.Float(r, ent(export.EntLostPackets))
	g.PacketsEst = export.Float(r, ent(export.EntPackets))
	g.Flags, _ = export.Uint(r, ent(export.EntFlags))
	g.Status = string(r[ent(export.EntStatus)])
	g.Estimator = string(r[ent(export.EntEstimator)])
	g.Sender = string(r[ent(export.EntSender)])
	return g
}
