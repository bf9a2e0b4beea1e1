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

	"github.com/gopacket/gopacket/layers"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sender"
	"github.com/lds-net/lds/tools/gen"
)

// paced replays a capture in real time, as a live source: a packet is
// handed out once the wall clock reaches its timestamp; until then (and
// after ctx ends) it answers capture.ErrTimeout, like an idle interface.
type paced struct {
	capture.Source
	ctx  context.Context
	data []byte
	ts   int64
	wl   int
	have bool
}

func (p *paced) ReadPacket(buf []byte) ([]byte, int64, int, error) {
	if !p.have {
		data, ts, wl, err := p.Source.ReadPacket(buf)
		if err != nil {
			return data, ts, wl, err
		}
		p.data, p.ts, p.wl, p.have = append(p.data[:0], data...), ts, wl, true
	}
	if d := time.Until(time.Unix(0, p.ts)); d > 0 {
		select {
		case <-time.After(min(d, 100*time.Millisecond)):
		case <-p.ctx.Done():
		}
		if time.Now().UnixNano() < p.ts {
			return nil, 0, 0, capture.ErrTimeout
		}
	}
	p.have = false
	return p.data, p.ts, p.wl, nil
}

func (p *paced) LinkType() layers.LinkType { return p.Source.LinkType() }

// liveScenario is a small trace of the given length that starts at the
// next whole second, for live-paced runs.
func liveScenario(d time.Duration) gen.Scenario {
	sc := gen.DefaultScenario()
	sc.StartNS = (time.Now().UnixNano()/1e9 + 1) * 1e9
	sc.Duration, sc.Flows, sc.RatePPS = d, 40, 1000
	sc.HeavyLoss = gen.HeavyLoss{}
	return sc
}

// live is a sender and a receiver running on a generated capture pair
// replayed in real time, each with its own context so either can be stopped.
type live struct {
	First          int64 // first interval id
	RxDone, TxDone chan error
	mu             sync.Mutex
	got            map[int64]*results.Interval
}

// Interval returns the published interval id, or nil.
func (l *live) Interval(id int64) *results.Interval {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got[id]
}

// Outcomes maps interval id to outcome.
func (l *live) Outcomes() map[int64]results.Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int64]results.Outcome{}
	for id, iv := range l.got {
		out[id] = iv.Outcome
	}
	return out
}

// startLive generates sc, then starts the receiver (configured by rc, on
// rxCtx) and a sender "edge-a" (on txCtx) over plaintext loopback gRPC.
func startLive(t *testing.T, rxCtx, txCtx context.Context, sc gen.Scenario, rc config.Receiver) *live {
	t.Helper()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := gen.Generate(context.Background(), sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, log); err != nil {
		t.Fatal(err)
	}
	rc.Receiver.TLS.Plaintext = true
	rc.Sketch.Seed = testSeed
	rc.Capture.Source.Kind, rc.Capture.Source.File = "file", b
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	open := func(ctx context.Context, p string) capture.Source {
		s, err := capture.OpenFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return &paced{Source: s, ctx: ctx}
	}
	l := &live{First: sc.StartNS / int64(rc.Interval), RxDone: make(chan error, 1), TxDone: make(chan error, 1),
		got: map[int64]*results.Interval{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rx, err := receiver.New(rc, receiver.Options{Sources: []capture.Source{open(rxCtx, b)}, Listener: lis, NoHTTP: true,
		CaptureStart: sc.StartNS, Clock: traceClock(sc.StartNS), OnInterval: func(iv *results.Interval) {
			l.mu.Lock()
			l.got[iv.Interval] = iv
			l.mu.Unlock()
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
	go func() { l.RxDone <- rx.Run(rxCtx) }()
	go func() { l.TxDone <- tx.Run(txCtx) }()
	return l
}
