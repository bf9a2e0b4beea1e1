package receiver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/wire"
	"github.com/lds-net/lds/tools/gen"
)

// faultFixture is a generated two-tap trace, its ground truth per interval
// (from the generator's own packet fates, not from lds), and a receiver
// configuration for loopback tests.
type faultFixture struct {
	cfg          config.Receiver
	params       interval.Params
	senderPcap   string
	receiverPcap string
	start        int64   // start of the first interval with traffic (Unix ns)
	ids          []int64 // intervals with sent packets, ascending
	sent, recv   map[int64]uint64
	// nearBoundary[b]: received packets whose receive time lies within
	// [b*T - guard, b*T + max_delay): the ones a receiver must place with the
	// sender's boundary list of interval b-1.
	nearBoundary map[int64]uint64
	clock        func() time.Time // the receiver's clock for its interval window (nil: none, replay)
}

// newFaultFixture generates a 5 s trace and the configuration of its runs;
// set clock before startReceiver for a receiver with an interval window.
func newFaultFixture(t *testing.T) *faultFixture {
	t.Helper()
	dir := t.TempDir()
	sc := gen.DefaultScenario()
	sc.Duration = 5 * time.Second
	sc.Flows = 60
	sc.RatePPS = 1200
	f := &faultFixture{senderPcap: filepath.Join(dir, "a.pcap"), receiverPcap: filepath.Join(dir, "b.pcap"),
		sent: map[int64]uint64{}, recv: map[int64]uint64{}, nearBoundary: map[int64]uint64{}}

	cfg := config.DefaultReceiver()
	cfg.Receiver.TLS.Plaintext = true
	cfg.Receiver.Listen = "127.0.0.1:0"
	cfg.Receiver.Lateness = 8 * time.Second // longer than any test: nothing is given up by the wall clock
	cfg.PTP.Enabled = false
	cfg.Capture.Source.Kind, cfg.Capture.Source.File = "file", "(test)"
	cfg.Sketch.Columns = 512
	cfg.Sketch.Seed = "fault-test-seed"
	// capture.DefaultConfig() presets identity.seed to "change-me", so a
	// changed sketch.seed alone fails Validate (reported as a config bug).
	cfg.Capture.Identity.Seed = cfg.Sketch.Seed
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	T, guard, maxDelay := int64(cfg.Interval), int64(cfg.Guard), int64(cfg.MaxDelay)
	out := gen.Outputs{SenderPcap: f.senderPcap, ReceiverPcap: f.receiverPcap, OnPacket: func(p *gen.PacketTruth) {
		id := interval.ID(p.SendNS, T)
		f.sent[id]++
		if p.Lost {
			return
		}
		f.recv[id]++
		b := interval.ID(p.RecvNS+guard, T)
		if p.RecvNS >= b*T-guard && p.RecvNS < b*T+maxDelay {
			f.nearBoundary[b]++
		}
	}}
	if _, err := gen.Generate(context.Background(), sc, out, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for id := range f.sent {
		f.ids = append(f.ids, id)
	}
	slices.Sort(f.ids)
	if len(f.ids) < 5 {
		t.Fatalf("scenario produced %d intervals, tests need 5", len(f.ids))
	}
	f.start = f.ids[0] * T
	cc := cfg.CaptureConfig()
	f.params = interval.Params{T: T, MaxDelay: maxDelay, Guard: guard, Sketch: cfg.SketchParams(), LDA: cfg.LDAParams(),
		Classes: len(cc.Classes) + 1, Heavy: cfg.Sketch.Heavy, FlowCap: cfg.Sketch.MaxFlows, LostCells: cfg.Lost.Cells()}
	return f
}

// senderIntervals runs the sender's interval builder over the sender pcap
// as a sender whose capture began at captureStart would: packets before it
// are not seen.
func (f *faultFixture) senderIntervals(t *testing.T, captureStart int64) []*interval.SenderInterval {
	t.Helper()
	parser, err := capture.NewParser(f.cfg.CaptureConfig())
	if err != nil {
		t.Fatal(err)
	}
	src, err := capture.OpenFile(f.senderPcap)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	b, err := interval.NewSenderBuilder(f.params, captureStart)
	if err != nil {
		t.Fatal(err)
	}
	var out []*interval.SenderInterval
	emit := func(si *interval.SenderInterval) { out = append(out, si) }
	rd := capture.NewReader(src, parser)
	var pkt capture.Packet
	for {
		err := rd.Next(&pkt)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if pkt.TS >= captureStart {
			b.Add(&pkt, emit)
		}
	}
	b.Flush(emit)
	for _, si := range out {
		finished(t, si)
	}
	return out
}

// finished finishes si as the sender's ship stage does before encoding.
func finished(t *testing.T, si *interval.SenderInterval) *interval.SenderInterval {
	t.Helper()
	if err := si.Finish(); err != nil {
		t.Fatal(err)
	}
	return si
}

func disabledClock() interval.SenderMeta {
	return interval.SenderMeta{Clock: interval.ClockStatus{State: ptp.StateDisabled}}
}

// published records what one receiver published, by interval.
type published struct {
	mu  sync.Mutex
	ivs map[int64][]*results.Interval
	ch  chan *results.Interval
}

func newPublished() *published {
	return &published{ivs: map[int64][]*results.Interval{}, ch: make(chan *results.Interval, 64)}
}

func (p *published) add(iv *results.Interval) {
	p.mu.Lock()
	p.ivs[iv.Interval] = append(p.ivs[iv.Interval], iv)
	p.mu.Unlock()
	select {
	case p.ch <- iv:
	default:
	}
}

// outcome returns the outcome of interval id ("" if never published) and
// fails the test if it was published more than once.
func (p *published) outcome(t *testing.T, id int64) results.Outcome {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch len(p.ivs[id]) {
	case 0:
		return ""
	case 1:
		return p.ivs[id][0].Outcome
	default:
		var o []results.Outcome
		for _, iv := range p.ivs[id] {
			o = append(o, iv.Outcome)
		}
		t.Errorf("interval %d published %d times: %v", id, len(o), o)
		return p.ivs[id][0].Outcome
	}
}

func (p *published) get(id int64) *results.Interval {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ivs[id]) == 0 {
		return nil
	}
	return p.ivs[id][0]
}

func (p *published) has(id int64, outcome results.Outcome) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, iv := range p.ivs[id] {
		if iv.Outcome == outcome {
			return true
		}
	}
	return false
}

// checkLink compares the link (LDA) totals of a published interval with the
// generator's truth: sent exactly; received within slack packets (those
// near a boundary whose sender list the receiver never got).
func (f *faultFixture) checkLink(t *testing.T, iv *results.Interval, slack uint64) {
	t.Helper()
	if iv == nil {
		t.Error("interval not published")
		return
	}
	var sent, recv uint64
	for _, l := range iv.Links {
		sent += l.Sent
		recv += l.Received
	}
	if sent != f.sent[iv.Interval] {
		t.Errorf("interval %d: link sent %d, truth %d", iv.Interval, sent, f.sent[iv.Interval])
	}
	want := f.recv[iv.Interval]
	if d := max(recv, want) - min(recv, want); d > slack {
		t.Errorf("interval %d: link received %d, truth %d (allowed difference %d)", iv.Interval, recv, want, slack)
	}
}

type rxRun struct {
	rx   *Receiver
	pub  *published
	done chan error
	stop context.CancelFunc
}

// startReceiver runs a full receiver in replay mode on lis, capturing from
// src (the receiver pcap when nil).
func (f *faultFixture) startReceiver(t *testing.T, lis net.Listener, src capture.Source, resultsFile string) *rxRun {
	t.Helper()
	if src == nil {
		var err error
		if src, err = capture.OpenFile(f.receiverPcap); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { src.Close() })
	cfg := f.cfg
	cfg.Receiver.ResultsFile = resultsFile
	run := &rxRun{pub: newPublished(), done: make(chan error, 1)}
	rx, err := New(cfg, Options{Version: "test", Sources: []capture.Source{src}, Listener: lis, NoHTTP: true,
		Replay: true, CaptureStart: f.start, OnInterval: run.pub.add, Clock: f.clock}, testLogger(t, "receiver"))
	if err != nil {
		t.Fatal(err)
	}
	run.rx = rx
	ctx, cancel := context.WithCancel(context.Background())
	run.stop = cancel
	go func() { run.done <- rx.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-run.done:
		case <-time.After(5 * time.Second):
			t.Error("receiver did not stop within 5s of its context ending")
		}
	})
	return run
}

// wait waits for the receiver's Run to return by itself.
func (r *rxRun) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("receiver Run: %v", err)
		}
		r.done <- nil // for the cleanup
	case <-time.After(d):
		t.Fatalf("receiver did not finish within %v", d)
	}
}

func (f *faultFixture) client(t *testing.T, addr string) *wire.Client {
	t.Helper()
	c, err := wire.NewClient(wire.ClientConfig{Addr: addr, SenderID: "tap-a", Version: "test", Fingerprint: f.cfg.Fingerprint(), Seed: f.cfg.Sketch.Seed,
		ResendBuffer: 32, BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Keepalive: 30 * time.Second, RPCTimeout: 3 * time.Second, ChunkBytes: 16 << 10}, testLogger(t, "sender"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func runClient(c *wire.Client) (chan error, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	ch := make(chan error, 1)
	go func() { ch <- c.Run(ctx) }()
	return ch, cancel
}

func waitClient(t *testing.T, ch chan error, d time.Duration) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("client Run: %v", err)
		}
	case <-time.After(d):
		t.Fatalf("client did not finish within %v", d)
	}
}

// eventually polls cond until it holds or d has passed; safe off the test goroutine.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func testLogger(t *testing.T, side string) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("side", side)
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// counterValue sums the receiver's series of the counter name whose label
// has the value (lds_intervals_total{outcome}, lds_frame_errors_total{reason}, ...).
func counterValue(t *testing.T, rx *Receiver, name, label, value string) float64 {
	t.Helper()
	mfs, err := rx.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// checkEstimationsTimed: every interval that reached estimation (all
// outcomes but a voided seq gap and a duplicate, which never do) has its
// time in lds_estimation_duration_seconds.
func checkEstimationsTimed(t *testing.T, rx *Receiver) {
	t.Helper()
	mfs, err := rx.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var timed, estimated float64
	for _, mf := range mfs {
		switch mf.GetName() {
		case "lds_estimation_duration_seconds":
			for _, m := range mf.GetMetric() {
				timed += float64(m.GetHistogram().GetSampleCount())
			}
		case "lds_intervals_total":
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() != string(results.OutcomeVoidedGap) && l.GetValue() != string(results.OutcomeDuplicate) {
						estimated += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if timed != estimated || estimated == 0 {
		t.Errorf("lds_estimation_duration_seconds counts %v estimations, lds_intervals_total %v estimated intervals", timed, estimated)
	}
}

// gatedSource holds the receiver's capture until open is closed, so that a
// test decides when the receiver's own view of the intervals exists.
type gatedSource struct {
	capture.Source
	open chan struct{}
	once sync.Once
}

func (g *gatedSource) ReadPacket(buf []byte) ([]byte, int64, int, error) {
	<-g.open
	return g.Source.ReadPacket(buf)
}

func (g *gatedSource) release() { g.once.Do(func() { close(g.open) }) }
