package sender

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/wire"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
	"github.com/lds-net/lds/tools/gen"
)

// countingStream adds the protobuf size of every message the receiver's
// gRPC layer hands to the service.
type countingStream struct {
	grpc.ServerStream
	n *atomic.Uint64
}

func (s countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.n.Add(uint64(proto.Size(m.(proto.Message))))
	}
	return err
}

// acceptAll is a receiver that takes every interval.
type acceptAll struct{ intervals atomic.Int64 }

func (*acceptAll) Connected(string, uint64) ([]int64, error) { return nil, nil }
func (a *acceptAll) Interval(string, *wire.Result) error     { a.intervals.Add(1); return nil }
func (*acceptAll) Disconnected(string, error)                {}
func (*acceptAll) FrameError(string, string)                 {}

// TestSentBytesMetricCountsTheStream: a sender pipeline streams a pcap's
// intervals over real gRPC to a wire.Server; lds_sender_sent_bytes_total
// must equal the bytes of the frames the receiver received.
func TestSentBytesMetricCountsTheStream(t *testing.T) {
	dir := t.TempDir()
	sc := gen.DefaultScenario()
	sc.Duration, sc.Flows, sc.RatePPS = 3*time.Second, 40, 800
	pcapA := filepath.Join(dir, "a.pcap")
	if _, err := gen.Generate(context.Background(), sc, gen.Outputs{SenderPcap: pcapA, ReceiverPcap: filepath.Join(dir, "b.pcap")},
		slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultSender()
	cfg.Sketch.Seed = "sent-bytes-test-seed"
	cfg.Sender.ID = "tap-a"
	cfg.Sender.TLS.Plaintext = true
	cfg.PTP.Enabled = false
	cfg.Capture.Source.Kind, cfg.Capture.Source.File = "file", "(test)"
	cfg.Sender.ChunkBytes = 4096 // several chunks an interval

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sender.Receiver = lis.Addr().String()
	var received atomic.Uint64
	srv := grpc.NewServer(grpc.StreamInterceptor(func(s any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(s, countingStream{ss, &received})
	}))
	cc := cfg.CaptureConfig()
	p := interval.Params{T: int64(cfg.Interval), MaxDelay: int64(cfg.MaxDelay), Guard: int64(cfg.Guard),
		Sketch: cfg.SketchParams(), LDA: cfg.LDAParams(), Classes: len(cc.Classes) + 1, Heavy: cfg.Sketch.Heavy, FlowCap: cfg.Sketch.MaxFlows, LostCells: cfg.Lost.Cells()}
	h := &acceptAll{}
	ldsv1.RegisterSketchExchangeServer(srv, wire.NewServer(wire.ServerConfig{Fingerprint: cfg.Fingerprint(), Seed: cfg.Sketch.Seed, Params: p,
		Limits: wire.Limits{MaxSketchBytes: 64 << 20, MaxCells: 1 << 24, MaxClasses: p.Classes}, Version: "test"}, h, slog.New(slog.DiscardHandler)))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	src, err := capture.OpenFile(pcapA)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	s, err := New(cfg, Options{Version: "test", NoHTTP: true, Replay: true, FailFast: true, Sources: []capture.Source{src}, CaptureStart: sc.StartNS},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if h.intervals.Load() < 3 {
		t.Fatalf("receiver got %d intervals, want >= 3", h.intervals.Load())
	}
	got := counterValue(t, s, "lds_sender_sent_bytes_total")
	// Every frame the sender wrote was read before its interval was
	// acknowledged, and Run returns only once all are.
	t.Logf("%d intervals, lds_sender_sent_bytes_total %v, received %d bytes of frames", h.intervals.Load(), got, received.Load())
	if want := received.Load(); got != float64(want) || want == 0 {
		t.Errorf("lds_sender_sent_bytes_total = %v, the receiver received %d bytes of frames", got, want)
	}
}

func counterValue(t *testing.T, s *Sender, name string) float64 {
	t.Helper()
	mfs, err := s.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += counter(m)
			}
			return sum
		}
	}
	t.Fatalf("no series %s", name)
	return 0
}

func counter(m *dto.Metric) float64 { return m.GetCounter().GetValue() }
