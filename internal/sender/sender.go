// Package sender is lds-sender's pipeline: capture at the upstream tap,
// per-interval sketches by the sender's own clock, and a stream of finished
// intervals to the receiver.
package sender

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/credentials"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/metrics"
	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/internal/tap"
	"github.com/lds-net/lds/internal/wire"
)

// Options are what a caller may set beyond the configuration file.
type Options struct {
	Version      string
	Sources      []capture.Source // replaces the configured source (replay, tests)
	HTTPListener net.Listener     // replaces metrics.listen
	NoHTTP       bool
	// Replay: event time only, no clock checks; Run returns once the
	// capture has ended and every interval is acknowledged.
	Replay       bool
	CaptureStart int64 // see receiver.Options
	FailFast     bool  // end on a refusal instead of retrying
}

// replayWindowWait bounds how long a replay's sender waits for the
// receiver's window of one boundary before covering max_delay.
const replayWindowWait = 30 * time.Second

// Sender is the upstream daemon's pipeline.
type Sender struct {
	cfg     config.Sender
	opt     Options
	log     *slog.Logger
	params  interval.Params
	cc      capture.Config
	client  *wire.Client
	lost    *lostLogs             // packet logs the receiver's lost-packet questions are answered from
	windows *interval.WindowTable // the receiver's hold windows, from the stream
	metrics *metrics.Sender
	ptp     *ptp.Checker
	pool    *sample.Pool // candidate buffers, from the capture workers to ship and back
}

// New builds the pipeline from a validated configuration.
func New(cfg config.Sender, opt Options, log *slog.Logger) (*Sender, error) {
	cc := cfg.CaptureConfig()
	if _, err := capture.NewParser(cc); err != nil {
		return nil, err
	}
	p := interval.Params{T: int64(cfg.Interval), MaxDelay: int64(cfg.MaxDelay), Guard: int64(cfg.Guard),
		Sketch: cfg.SketchParams(), LDA: cfg.LDAParams(), Classes: len(cc.Classes) + 1, Heavy: cfg.Sketch.Heavy, FlowCap: cfg.Sketch.MaxFlows, LostCells: cfg.Lost.Cells()}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var creds credentials.TransportCredentials
	var err error
	t := cfg.Sender.TLS
	if !t.Plaintext {
		if creds, err = wire.ClientTLS(t.Cert, t.Key, t.CA, t.ServerName); err != nil {
			return nil, err
		}
	}
	s := &Sender{cfg: cfg, opt: opt, log: log, params: p, cc: cc, pool: sample.NewPool(8), windows: interval.NewWindowTable(), lost: newLostLogs(p)}
	s.client, err = wire.NewClient(wire.ClientConfig{Addr: cfg.Sender.Receiver, Creds: creds, SenderID: cfg.Sender.ID, Windows: s.windows,
		Answer: s.lost.answer, MaxLostQuery: cfg.Lost.Cells(), WaitFinished: opt.Replay,
		Version: opt.Version, Fingerprint: cfg.Fingerprint(), Seed: cfg.Sketch.Seed, ResendBuffer: cfg.Sender.ResendBuffer,
		BackoffMin: cfg.Sender.BackoffMin, BackoffMax: cfg.Sender.BackoffMax, Keepalive: cfg.Sender.Keepalive,
		RPCTimeout: cfg.Sender.RPCTimeout, ChunkBytes: cfg.Sender.ChunkBytes, FailFast: opt.FailFast}, log)
	if err != nil {
		return nil, err
	}
	if s.metrics, err = metrics.NewSender(cfg.Metrics, log); err != nil {
		return nil, err
	}
	if !opt.Replay {
		if s.ptp, err = ptp.New(cfg.PTP, log); err != nil {
			return nil, err
		}
		// This host's clock is exported from start, not only with the
		// first interval shipped.
		s.metrics.SetOwnClock(tap.OwnClock(s.ptp))
	}
	return s, nil
}

// Run captures and streams until ctx ends (or, in replay, until done).
func (s *Sender) Run(ctx context.Context) error {
	defer s.lost.close() // the packet logs no question will come for
	readers, release, err := capture.OpenReaders(s.opt.Sources, s.cc, s.log)
	if err != nil {
		return err
	}
	defer release()
	start := s.opt.CaptureStart
	if start == 0 {
		start = time.Now().UnixNano()
	}
	g, gctx := errgroup.WithContext(ctx)
	// The client outlives a stop request by up to rpc_timeout, so that the
	// interval flushed at SIGTERM still reaches the receiver.
	clientCtx, cancelClient := context.WithCancel(context.WithoutCancel(gctx))
	defer cancelClient()
	clientDone := make(chan error, 1)
	clientFinished := make(chan struct{})
	g.Go(func() error {
		err := s.client.Run(clientCtx)
		clientDone <- err
		close(clientFinished)
		return err
	})
	g.Go(func() error {
		select {
		case <-gctx.Done():
		case <-clientCtx.Done():
			return nil
		}
		t := time.NewTimer(s.cfg.Sender.RPCTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			s.log.Warn("stopping with unacknowledged intervals", "buffered", s.client.Stats().Buffered)
		case <-clientFinished:
		}
		cancelClient()
		return nil
	})
	if !s.opt.NoHTTP {
		g.Go(func() error {
			return metrics.ServeListener(gctx, s.opt.HTTPListener, s.cfg.Metrics, s.metrics.Registry(), nil, s.log)
		})
	}
	if s.ptp != nil {
		g.Go(func() error { return s.ptp.Run(gctx) })
	}
	finished := make(chan *interval.SenderInterval, 8)
	g.Go(func() error { return s.ship(finished, len(readers)) })
	var workers sync.WaitGroup
	for _, rd := range readers {
		workers.Add(1)
		g.Go(func() error {
			defer workers.Done()
			return s.captureLoop(gctx, rd, start, finished)
		})
	}
	g.Go(func() error {
		workers.Wait()
		close(finished)
		return nil
	})
	g.Go(func() error { return s.watchClient(gctx) })
	if s.opt.Replay {
		g.Go(func() error {
			select {
			case err := <-clientDone:
				if err != nil {
					return err
				}
				return tap.ErrDone
			case <-gctx.Done():
				return nil
			}
		})
	}
	return tap.Wait(g)
}

// captureLoop is one capture worker: the sender's callbacks of the shared
// loop (internal/tap) sketch and sample each packet and hand every finished
// interval to ship.
func (s *Sender) captureLoop(ctx context.Context, rd *capture.Reader, start int64, out chan<- *interval.SenderInterval) error {
	// Live, an interval whose boundary window has not come by max_delay
	// covers max_delay (capture never waits); a replay reads files, which
	// can wait for the receiver's word.
	var wait time.Duration
	if s.opt.Replay {
		wait = replayWindowWait
	}
	b, err := interval.NewSenderBuilderWindows(s.params, start, s.windows, wait)
	if err != nil {
		return err
	}
	// ship drains out until it is closed, so emitting never blocks for
	// long. Capture health rides along with each interval, read here on
	// the worker's own goroutine.
	smp := sample.NewSampler(s.cfg.Sample, s.params.T, s.pool)
	var outage capture.OutageTracker
	// A packet this capture dropped is still counted by the receiver, up
	// to max_delay + guard after it was sent (interval.DropLedger).
	ledger := interval.DropLedger{T: s.params.T, Reach: s.params.MaxDelay + s.params.Guard}
	emit := func(si *interval.SenderInterval) {
		si.SampleCands = smp.Take(si.ID)
		si.Counters = rd.Parser().Counters()
		si.Drops, _ = rd.Source().Stats()
		_, si.DropsAffecting = ledger.Read(si.ID, si.Drops.Kernel+si.Drops.Interface, time.Now().UnixNano())
		if outage.Touched(si.Drops) {
			si.Partial = true // the capture interface was down during it
		}
		out <- si
	}
	loop := tap.Loop{Name: "sender", Reader: rd, Log: s.log, Replay: s.opt.Replay,
		Batch:   func(pkts []capture.Packet) { b.AddBatch(pkts, smp, emit) },
		Advance: func(now int64) { b.Advance(now, emit) },
		Flush:   func() { b.Flush(emit) },
		// A stop request: ship what the open interval has, flagged
		// partial, rather than lose it.
		Stop: func() { b.FlushPartial(time.Now().UnixNano(), emit) },
	}
	return loop.Run(ctx)
}

// ship merges the workers' intervals, finishes each once (heavy ranking,
// lost-packet table, boundary function), attaches the clock and the
// capture counters, and hands it to the client, off the capture goroutines.
func (s *Sender) ship(in <-chan *interval.SenderInterval, workers int) error {
	merger := interval.NewSenderMerger(workers, s.params.Heavy)
	var prevDrops capture.DropStats
	var sel sample.Selector // its memory serves every interval
	submit := func(si *interval.SenderInterval) error {
		// Before the packet logs go to the lost-packet log below: the
		// table is built from them.
		if err := si.Finish(); err != nil {
			return fmt.Errorf("interval %d: %w", si.ID, err)
		}
		meta := interval.SenderMeta{Clock: tap.Clock(s.ptp)}
		if s.ptp != nil {
			s.metrics.SetClock(meta.Clock.State, meta.Clock.OffsetNS, 0)
		}
		d := si.Drops.Sub(prevDrops)
		prevDrops = si.Drops
		meta.KernelDrops, meta.IfDrops, meta.DropsAffecting = d.Kernel, d.Interface, si.DropsAffecting
		if n := d.Kernel + d.Interface; n > 0 {
			s.log.Warn("the capture dropped packets: the receiver withholds the loss of the intervals they can touch (status capture_drops)",
				"interval", si.ID, "drops", n, "kernel", d.Kernel, "interface", d.Interface,
				"fix", "give lds-sender CPU (a core of its own, a higher priority, no CPU quota) or a longer capture ring "+
					"(capture.source.num_blocks × block_timeout at low rates, block_size × num_blocks at high ones; ldsctl memory shows how long it holds)")
		}
		meta.ParseDrops = si.Counters.ByReason()
		drops := si.Counters.ByReason()
		drops["kernel"], drops["interface"] = si.Drops.Kernel, si.Drops.Interface
		s.metrics.CaptureCounters(si.Counters.Parsed, drops)
		si.Samples = sel.Select(si.SampleCands, si.ID*s.params.T, s.cfg.Sample)
		s.pool.Put(si.SampleCands) // Select copied what it ships
		si.SampleCands = nil
		if si.Drops.Link != capture.LinkUnknown {
			s.metrics.CaptureHealth().Set(si.Drops.Oversize, si.Drops.LinkDowns, si.Drops.Link == capture.LinkUp)
		}
		// Kept before the receiver can have it, and so ask about it.
		s.lost.add(si.ID, si.Logs)
		si.Logs = nil
		err := s.client.Submit(si, meta) // encodes: the sketches are free after it
		si.Release()
		return err
	}
	for si := range in {
		merged, err := merger.Add(si)
		if err != nil {
			return err
		}
		if merged != nil {
			if err := submit(merged); err != nil {
				return err
			}
		}
	}
	for _, si := range merger.Flush() {
		if err := submit(si); err != nil {
			return err
		}
	}
	s.client.Close()
	return nil
}

// watchClient mirrors the client's counters into the metrics, every second
// and once more when it stops (a replay's last interval counts too).
func (s *Sender) watchClient(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last wire.ClientStats
	for {
		stop := false
		select {
		case <-ctx.Done():
			stop = true
		case <-t.C:
		}
		last = s.mirror(last)
		if stop {
			return nil
		}
	}
}

// mirror adds what the client counted since last to the metrics.
func (s *Sender) mirror(last wire.ClientStats) wire.ClientStats {
	st := s.client.Stats()
	for range st.Sent - last.Sent {
		s.metrics.IntervalSent(0)
	}
	for range st.Acked - last.Acked {
		s.metrics.IntervalAcked()
	}
	for range st.Dropped - last.Dropped {
		s.metrics.IntervalDropped()
	}
	for range st.Resent - last.Resent {
		s.metrics.IntervalResent(0)
	}
	s.metrics.SentBytes(st.BytesSent - last.BytesSent)
	s.metrics.BufferDepth(st.Buffered)
	s.metrics.Connected(st.Connected)
	return st
}
