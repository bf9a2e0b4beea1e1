package receiver_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/wire"
	"github.com/lds-net/lds/test/e2e"
	"github.com/lds-net/lds/test/testutil"
)

// TestReceiverIdleFlood: the receiver daemon's own wiring (mTLS, the
// default receiver.max_connections of 64) under a sustained flood of idle
// TCP connections, five times that many: a sender with a valid certificate
// still connects and has its interval acknowledged, and the refused
// connections are counted in lds_connection_refusals_total.
func TestReceiverIdleFlood(t *testing.T) {
	pki, err := e2e.NewPKI(t.TempDir(), net.IPv4(127, 0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	rc := config.DefaultReceiver()
	rc.Sketch.Seed = testSeed
	rc.Capture.Identity.Seed = testSeed
	rc.PTP.Enabled = false
	rc.Capture.Source.Kind, rc.Capture.Source.File = "file", "(test)"
	rc.Receiver.TLS.Cert, rc.Receiver.TLS.Key, rc.Receiver.TLS.ClientCA = pki.ServerCert, pki.ServerKey, pki.CA
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rx, err := receiver.New(rc, receiver.Options{Version: "test", Sources: []capture.Source{idleSource{ctx}}, Listener: lis, NoHTTP: true},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rxDone := make(chan error, 1)
	go func() { rxDone <- rx.Run(ctx) }()
	defer func() { cancel(); <-rxDone }()

	n := 5 * rc.Receiver.MaxConnections
	var open atomic.Int64
	for range n {
		go func() {
			for ctx.Err() == nil {
				c, err := net.Dial("tcp", lis.Addr().String())
				if err != nil {
					time.Sleep(10 * time.Millisecond) // a full backlog: try again
					continue
				}
				open.Add(1)
				stop := context.AfterFunc(ctx, func() { c.Close() })
				_, _ = io.Copy(io.Discard, c) // sends nothing; until the receiver closes it
				stop()
				c.Close()
				open.Add(-1)
			}
		}()
	}
	testutil.WaitFor(t, "the flood's connections", time.Minute, func() bool { return open.Load() >= int64(n) })

	creds, err := wire.ClientTLS(pki.ClientCert, pki.ClientKey, pki.CA, e2e.ReceiverServerName)
	if err != nil {
		t.Fatal(err)
	}
	c, err := wire.NewClient(wire.ClientConfig{Addr: lis.Addr().String(), SenderID: "testbed", Version: "test", Fingerprint: rc.Fingerprint(),
		Seed: rc.Sketch.Seed, Creds: creds, ResendBuffer: 4, BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Keepalive: 30 * time.Second, RPCTimeout: 5 * time.Second, ChunkBytes: 64 << 10}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() { _ = c.Run(cctx) }()
	p := interval.Params{T: int64(rc.Interval), MaxDelay: int64(rc.MaxDelay), Guard: int64(rc.Guard), Sketch: rc.SketchParams(),
		LDA: rc.LDAParams(), Classes: len(rc.CaptureConfig().Classes) + 1, Heavy: rc.Sketch.Heavy, FlowCap: rc.Sketch.MaxFlows,
		LostCells: rc.Lost.Cells()}
	sk, err := interval.NewSketches(p)
	if err != nil {
		t.Fatal(err)
	}
	si := &interval.SenderInterval{ID: interval.ID(time.Now().UnixNano(), p.T) - 1, Sk: sk}
	if err := si.Finish(); err != nil { // as the sender's ship stage does before encoding
		t.Fatal(err)
	}
	if err := c.Submit(si,
		interval.SenderMeta{Clock: interval.ClockStatus{State: "disabled"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Bounded on the event, below the 10 s handshake deadline for which a
	// cap taken before TLS would let idle sockets hold every slot.
	testutil.WaitFor(t, "the sender's interval acknowledged under the flood", 10*time.Second, func() bool { return c.Stats().Acked == 1 })
	t.Logf("acknowledged %v after submitting, with %d idle connections open", time.Since(start).Round(time.Millisecond), open.Load())
	testutil.WaitFor(t, "refused flood connections counted", time.Minute, func() bool { return refusals(t, rx) > 0 })
}

func refusals(t *testing.T, rx *receiver.Receiver) float64 {
	t.Helper()
	mfs, err := rx.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "lds_connection_refusals_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
