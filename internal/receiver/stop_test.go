package receiver_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/eval"
	"github.com/lds-net/lds/internal/gen"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sender"
)

// TestGracefulStopFinalizesEverything: a receiver stopped (SIGTERM) in the
// middle of live-paced traffic finalizes every interval it has, instead of
// dropping the ones still waiting: the completed intervals are matched and
// in the results file, the one cut short is reported with its outcome, and
// the file is whole.
func TestGracefulStopFinalizesEverything(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sc := gen.DefaultScenario()
	sc.StartNS = (time.Now().UnixNano()/1e9 + 1) * 1e9
	sc.Duration, sc.Flows, sc.RatePPS = 6*time.Second, 40, 1000
	sc.HeavyLoss = gen.HeavyLoss{}
	if _, err := gen.Generate(context.Background(), sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, log); err != nil {
		t.Fatal(err)
	}
	rc := config.DefaultReceiver()
	rc.Receiver.TLS.Plaintext = true
	rc.Receiver.Lateness = time.Minute // nothing may be given up by time during the test
	rc.PTP.Enabled = false
	rc.Capture.Source.Kind, rc.Capture.Source.File = "file", b
	rc.Receiver.ResultsFile = filepath.Join(dir, "results.jsonl")
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	rxCtx, stopRx := context.WithCancel(context.Background())
	txCtx, stopTx := context.WithCancel(context.Background())
	defer stopTx()
	open := func(ctx context.Context, p string) capture.Source {
		s, err := capture.OpenFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return newPaced(ctx, s)
	}
	var mu sync.Mutex
	got := map[int64]string{}
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	rx, err := receiver.New(rc, receiver.Options{Sources: []capture.Source{open(rxCtx, b)}, Listener: lis, NoHTTP: true,
		CaptureStart: sc.StartNS, OnInterval: func(iv *results.Interval) {
			mu.Lock()
			got[iv.Interval] = iv.Outcome
			mu.Unlock()
		}}, log)
	if err != nil {
		t.Fatal(err)
	}
	scfg := config.DefaultSender()
	scfg.Common = rc.Common
	scfg.Capture.Source.File = a
	scfg.Sender.ID, scfg.Sender.Receiver, scfg.Sender.TLS.Plaintext = "edge-a", lis.Addr().String(), true
	tx, err := sender.New(scfg, sender.Options{Sources: []capture.Source{open(txCtx, a)}, NoHTTP: true, CaptureStart: sc.StartNS}, log)
	if err != nil {
		t.Fatal(err)
	}
	rxDone := make(chan error, 1)
	go func() { rxDone <- rx.Run(rxCtx) }()
	go tx.Run(txCtx)

	first := sc.StartNS / 1e9
	// Stop the receiver 0.6 s into the fourth interval: three are complete
	// at the sender (the third's End is on its way), the fourth is cut.
	time.Sleep(time.Until(time.Unix(first+3, 600e6)))
	stopRx()
	select {
	case err := <-rxDone:
		if err != nil {
			t.Fatalf("receiver stopped with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("receiver did not stop within 10 s")
	}
	mu.Lock()
	defer mu.Unlock()
	for id := first; id < first+2; id++ {
		if got[id] != results.OutcomeMatched {
			t.Errorf("interval %d: outcome %q, want matched", id, got[id])
		}
	}
	if o, ok := got[first+3]; !ok || o == results.OutcomeMatched {
		t.Errorf("the interval cut by the stop: outcome %q (present %v), want it reported as incomplete", o, ok)
	}
	recs, err := eval.ReadResultsFile(rc.Receiver.ResultsFile)
	if err != nil {
		t.Fatalf("results file after the stop: %v", err)
	}
	perInterval := map[int64]int{}
	for _, r := range recs {
		perInterval[r.Interval]++
	}
	for id := first; id < first+2; id++ {
		if perInterval[id] == 0 {
			t.Errorf("interval %d missing from the results file", id)
		}
	}
	if perInterval[first+3] != 0 {
		t.Errorf("the cut interval must not be in the results file as complete")
	}
	t.Logf("outcomes at stop: %v; results file: %d records", got, len(recs))
}

// TestSenderStopFlushesOpenInterval: a sender stopped (SIGTERM) in the
// middle of an interval ships what it has of it, flagged partial, before it
// exits; the receiver reports that interval as partial (never as complete)
// and the ones before it as matched.
func TestSenderStopFlushesOpenInterval(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sc := gen.DefaultScenario()
	sc.StartNS = (time.Now().UnixNano()/1e9 + 1) * 1e9
	sc.Duration, sc.Flows, sc.RatePPS = 5*time.Second, 40, 1000
	sc.HeavyLoss = gen.HeavyLoss{}
	if _, err := gen.Generate(context.Background(), sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, log); err != nil {
		t.Fatal(err)
	}
	rc := config.DefaultReceiver()
	rc.Receiver.TLS.Plaintext = true
	rc.Receiver.Lateness = 2 * time.Second
	rc.PTP.Enabled = false
	rc.Capture.Source.Kind, rc.Capture.Source.File = "file", b
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txCtx, stopTx := context.WithCancel(ctx)
	open := func(ctx context.Context, p string) capture.Source {
		s, err := capture.OpenFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return newPaced(ctx, s)
	}
	var mu sync.Mutex
	got := map[int64]string{}
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	rx, err := receiver.New(rc, receiver.Options{Sources: []capture.Source{open(ctx, b)}, Listener: lis, NoHTTP: true,
		CaptureStart: sc.StartNS, OnInterval: func(iv *results.Interval) {
			mu.Lock()
			got[iv.Interval] = iv.Outcome
			mu.Unlock()
		}}, log)
	if err != nil {
		t.Fatal(err)
	}
	scfg := config.DefaultSender()
	scfg.Common = rc.Common
	scfg.Capture.Source.File = a
	scfg.Sender.ID, scfg.Sender.Receiver, scfg.Sender.TLS.Plaintext = "edge-a", lis.Addr().String(), true
	tx, err := sender.New(scfg, sender.Options{Sources: []capture.Source{open(txCtx, a)}, NoHTTP: true, CaptureStart: sc.StartNS}, log)
	if err != nil {
		t.Fatal(err)
	}
	go rx.Run(ctx)
	txDone := make(chan error, 1)
	go func() { txDone <- tx.Run(txCtx) }()
	first := sc.StartNS / 1e9
	time.Sleep(time.Until(time.Unix(first+2, 500e6))) // half way through the third interval
	stopTx()
	select {
	case err := <-txDone:
		if err != nil {
			t.Fatalf("sender stopped with %v", err)
		}
	case <-time.After(2 * scfg.Sender.RPCTimeout):
		t.Fatal("sender did not stop")
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		o := got[first+2]
		mu.Unlock()
		if o != "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for id := first; id < first+2; id++ {
		if got[id] != results.OutcomeMatched {
			t.Errorf("interval %d: outcome %q, want matched", id, got[id])
		}
	}
	if got[first+2] != results.OutcomePartial {
		t.Errorf("interval cut by the sender's stop: outcome %q, want partial (flushed and flagged)", got[first+2])
	}
	t.Logf("outcomes: %v", got)
}
