// Package receiver is lds-receiver's pipeline: it captures at the
// downstream tap, builds the same sketches as the sender, serves the
// senders' streams, matches intervals, estimates, and publishes (JSONL,
// results API, Prometheus).
package receiver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lds-net/lds/internal/api"
	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/export"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/metrics"
	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/internal/sketch"
	"github.com/lds-net/lds/internal/spike"
	"github.com/lds-net/lds/internal/tap"
	"github.com/lds-net/lds/internal/wire"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// Options are what a caller may set beyond the configuration file.
type Options struct {
	Version string
	// Sources replaces the configured capture source (replay, tests).
	Sources []capture.Source
	// Listener replaces receiver.listen (tests, replay on loopback).
	Listener net.Listener
	// HTTPListener replaces metrics.listen; NoHTTP disables it.
	HTTPListener net.Listener
	NoHTTP       bool
	// Replay: event time only, no clock checks (the captures carry their
	// own timestamps), and Run returns once capture has ended, every
	// sender stream has closed and every interval is final.
	Replay bool
	// CaptureStart overrides when capture is taken to have begun (Unix ns);
	// 0 = now for live capture, the first packet for files.
	CaptureStart int64
	// OnInterval is called with every finalized interval (after publishing).
	OnInterval func(*results.Interval)
	// Clock is the receiver's clock for receiver.max_interval_skew (nil:
	// the wall clock, and no window in a replay; tests that stream old
	// captures set the captures' time).
	Clock func() time.Time
	// ExportBlocking: the exporters wait for room instead of dropping
	// (replay: a backfill from files loses nothing). Never live.
	ExportBlocking bool
	// NoLostRepair leaves lossy cells unrepaired (tests measuring what
	// the repair changes). repair.go.
	NoLostRepair bool
}

// Receiver is the downstream daemon's pipeline: its stages (docs/DESIGN.md,
// "Goroutines") and what they share read-only.
type Receiver struct {
	cfg     config.Receiver
	opt     Options
	pol     policy
	log     *slog.Logger
	limited *wire.LimitedLog // rate-limited lines: refusals, repeated write failures
	params  interval.Params
	cc      capture.Config
	est     Estimation
	metrics *metrics.Receiver
	ptp     *ptp.Checker // nil without clock checks

	// The stages: streams serves the senders' streams; per sender entry a
	// match stage, an estimate stage and an emitter; one publisher.
	streams *streams
	entries []*entryStages
	pub     *publisher

	capMu    sync.Mutex // guards capStats: each capture worker's last counters
	capStats []workerStats
}

// entryStages are one receiver.senders entry's stages after capture.
type entryStages struct {
	conn  *senderConn
	sel   []match.Compiled // which captured packets are the entry's
	match *matchStage
	est   *estStage
	emit  *emitter
}

// New builds the pipeline from a validated configuration.
func New(cfg config.Receiver, opt Options, log *slog.Logger) (*Receiver, error) {
	cc := cfg.CaptureConfig()
	parser, err := capture.NewParser(cc)
	if err != nil {
		return nil, err
	}
	classes := []string{"default"}
	for _, c := range cc.Classes {
		classes = append(classes, c.Name)
	}
	p := interval.Params{T: int64(cfg.Interval), MaxDelay: int64(cfg.MaxDelay), Guard: int64(cfg.Guard),
		Sketch: cfg.SketchParams(), LDA: cfg.LDAParams(), Classes: len(classes), Heavy: cfg.Sketch.Heavy, FlowCap: cfg.Sketch.MaxFlows, LostCells: cfg.Lost.Cells()}
	p = p.WithReceiverLog() // extra packets are named from it (lost_round.go)
	if err := p.Validate(); err != nil {
		return nil, err
	}
	pol := newPolicy(cfg, opt)
	r := &Receiver{cfg: cfg, opt: opt, pol: pol, log: log, limited: wire.NewLimitedLog(log, 0), params: p, cc: cc,
		est: Estimation{Estimator: sketch.Estimator(cfg.Sketch.Estimator), Alpha: cfg.Sketch.Alpha, T: p.T, Classes: classes,
			FlowHash: parser.FlowHash, Weight: parser.WeightOf, Workers: pol.estWorkers, MaxFlows: cfg.Sketch.MaxFlows, Heavy: cfg.Sketch.Heavy,
			Window: sample.Window{T: p.T, MaxDelay: p.MaxDelay, Guard: p.Guard}, NoRepair: opt.NoLostRepair}}
	if r.metrics, err = metrics.NewReceiver(cfg.Metrics, log); err != nil {
		return nil, err
	}
	r.pub = &publisher{in: make(chan *results.Interval), cfg: cfg.Receiver, rotate: pol.rotate,
		store: api.NewBoundedStore(cfg.Receiver.Keep, cfg.Receiver.APIMaxRecords), metrics: r.metrics, log: log, limited: r.limited,
		onInterval: opt.OnInterval}
	if r.pub.spikes, err = spike.New(cfg.Spike); err != nil {
		return nil, err
	}
	if r.pub.export, err = export.New(cfg.Export, export.Options{Blocking: opt.ExportBlocking, IntervalNS: p.T}, r.metrics, log); err != nil {
		return nil, err
	}
	if pol.clockChecks {
		if r.ptp, err = ptp.New(cfg.PTP, log); err != nil {
			return nil, err
		}
		// This host's clock is exported from start, not only with the
		// first interval: it is often why none is published.
		r.metrics.SetOwnClock(tap.OwnClock(r.ptp))
	}
	r.streams = &streams{metrics: r.metrics, log: log, done: make(chan struct{})}
	entries := cfg.Receiver.Senders
	if len(entries) == 0 {
		entries = []config.SenderEntry{{}} // one wildcard entry: the first sender id that connects
	}
	for i, e := range entries {
		sel, err := match.CompileAll(fmt.Sprintf("receiver.senders[%d].select", i), e.Select)
		if err != nil {
			return nil, err
		}
		r.entries = append(r.entries, r.newEntry(e, sel))
	}
	return r, nil
}

// newEntry makes one sender entry's stages and wires their channels.
func (r *Receiver) newEntry(e config.SenderEntry, sel []match.Compiled) *entryStages {
	in := make(chan senderMsg, 16)
	lq := newLostQueue(r.cfg.Lost.Cells(), r.params.T, r.pol.answerWait)
	conn := &senderConn{entry: e, toMatch: in, queries: lq.queries, matchDone: lq.done, keepFinal: 4 * r.cfg.Receiver.MaxPending}
	r.streams.entries = append(r.streams.entries, conn)
	est := newEstStage(r.pol.estConc, r.estimateJob)
	ms := &matchStage{conn: conn, m: interval.NewMatcher(r.params, r.cfg.Receiver.Lateness, r.cfg.Receiver.MaxPending),
		pieces: sample.NewPieces(r.pol.pieceKeep), sealed: make(chan *interval.ReceiverInterval, r.cfg.Receiver.SealedQueue), in: in,
		lostQ: lq, est: est, stopWhenDrained: r.pol.stopWhenDrained, verdict: r.clock, ownClock: r.ownClock, metrics: r.metrics, log: r.log}
	r.watchMatcher(ms)
	return &entryStages{conn: conn, sel: sel, match: ms, est: est,
		emit: &emitter{out: r.pub.in, params: r.params, metrics: r.metrics, log: r.log}}
}

// watchMatcher counts and logs what a sender entry's matcher refuses,
// and (with a clock: policy.now) makes it hold sender intervals ahead of
// the receiver's clock: more than two intervals and the largest hold
// window, further than any honest sender's interval can be (a sender
// seals an interval after its end; its shutdown trailers reach at most a
// window ahead).
func (r *Receiver) watchMatcher(ms *matchStage) {
	if r.pol.now != nil {
		ms.m.HoldAhead(r.pol.now, time.Duration(2*r.params.T+r.params.MaxDelay))
	}
	ms.m.OnRefuse(func(reason string, id int64) {
		name := ms.conn.name()
		r.metrics.IntervalRefusal(name, reason, 1)
		if reason == interval.RefusedDuplicate {
			r.metrics.IntervalOutcome(name, results.OutcomeDuplicate)
		}
		r.limited.Warn("interval\x00"+reason+"\x00"+name, "refused an interval half", "sender", name, "interval", id,
			"interval_start", time.Unix(0, id*r.params.T).UTC(), "reason", reason)
	})
}

// Store is the results store behind the API.
func (r *Receiver) Store() *api.Store { return r.pub.store }

// Metrics is the receiver's metrics (for tests and extra handlers).
func (r *Receiver) Metrics() *metrics.Receiver { return r.metrics }

// Run captures, serves and publishes until ctx ends (or, when the policy
// stops when drained, until everything is final): it serves the senders,
// watches SIGHUP, starts the exporters and runs the stages.
func (r *Receiver) Run(ctx context.Context) error {
	readers, release, err := capture.OpenReaders(r.opt.Sources, r.cc, r.log)
	if err != nil {
		return err
	}
	defer release()
	r.capStats = make([]workerStats, len(readers))
	for _, e := range r.entries {
		plan := interval.NewWindowPlan(r.params, len(readers))
		if r.pol.pace > 0 {
			// Files are read far ahead of estimation: let each boundary's
			// window wait for the evidence of the intervals before it.
			plan.Pace(r.pol.pace)
		}
		e.conn.setPlan(plan)
		e.emit.plan = plan
	}
	closeFiles, err := r.pub.open()
	if err != nil {
		return err
	}
	defer closeFiles()
	defer r.watchHUP()()
	srv, lis, err := r.senderServer()
	if err != nil {
		return err
	}
	defer close(r.streams.done)
	defer r.startExporters()()
	g, gctx := errgroup.WithContext(ctx)
	r.serve(gctx, g, srv, lis)
	// The pipeline's stages, from capture on (stages.go).
	r.runStages(gctx, g, srv, readers)
	return tap.Wait(g)
}

// watchHUP makes SIGHUP reopen the results and lost-packet files
// (logrotate's create mode, or systemctl reload) where they rotate;
// without a file it is ignored, never fatal. The returned function stops
// watching.
func (r *Receiver) watchHUP() func() {
	if !r.pol.rotate {
		return func() {}
	}
	hup, stop := make(chan os.Signal, 1), make(chan struct{})
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-hup:
				r.ReopenResults()
			case <-stop:
				return
			}
		}
	}()
	return func() { signal.Stop(hup); close(stop) }
}

// startExporters runs the exporters beside the pipeline, never inside its
// errgroup: an export failure cannot stop the receiver. The returned
// function stops them (and waits for their flush), after the last
// interval is published.
func (r *Receiver) startExporters() func() {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.pub.export.Run(ctx) }()
	return func() { stop(); <-done }
}

// senderServer builds the gRPC server the senders stream to, on
// receiver.listen (or Options.Listener) behind the connection gate.
func (r *Receiver) senderServer() (*grpc.Server, net.Listener, error) {
	lis := r.opt.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", r.cfg.Receiver.Listen); err != nil {
			return nil, nil, fmt.Errorf("receiver.listen %q: %w", r.cfg.Receiver.Listen, err)
		}
	}
	creds, err := r.serverCreds(lis.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	r.metrics.RefusalReasons(wire.ConnectionRefusalReasons(), wire.SenderRefusalReasons())
	refusals := &wire.Refusals{Log: r.limited, Connection: r.metrics.ConnectionRefusal, Sender: r.metrics.SenderRefusal}
	gate := wire.NewGate(wire.GateConfig{MaxAuthenticated: r.cfg.Receiver.MaxConnections, Refusals: refusals})
	if lis, err = gate.Listener(lis); err != nil {
		return nil, nil, fmt.Errorf("receiver.listen: %w", err)
	}
	srv := grpc.NewServer(wire.ServerOptions(gate.Creds(creds), r.cfg.Receiver.MaxFrameBytes)...)
	senders := map[string]bool{}
	for _, e := range r.cfg.Receiver.Senders {
		senders[e.ID] = true
	}
	ldsv1.RegisterSketchExchangeServer(srv, wire.NewServer(wire.ServerConfig{
		Fingerprint: r.cfg.Fingerprint(), Seed: r.cfg.Sketch.Seed, Params: r.params, Senders: senders, Version: r.opt.Version,
		Now: r.pol.now, MaxSkew: r.cfg.Receiver.MaxIntervalSkew, Refusals: refusals,
		Limits: wire.Limits{MaxSketchBytes: r.cfg.Receiver.MaxSketchBytes, MaxCells: r.params.Sketch.Rows*r.params.Sketch.Columns + 1<<22,
			MaxClasses: r.params.Classes},
	}, r.streams, r.log))
	return srv, lis, nil
}

// serve runs, in g, the gRPC server (stopped when ctx ends), the HTTP
// endpoint (metrics and results API) and the PTP checker.
func (r *Receiver) serve(ctx context.Context, g *errgroup.Group, srv *grpc.Server, lis net.Listener) {
	g.Go(func() error {
		<-ctx.Done()
		srv.Stop()
		return nil
	})
	g.Go(func() error {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("receiver: gRPC server: %w", err)
		}
		return nil
	})
	if !r.opt.NoHTTP {
		extra := map[string]http.Handler{"/api/": r.pub.store.Handler()}
		g.Go(func() error {
			return metrics.ServeListener(ctx, r.opt.HTTPListener, r.cfg.Metrics, r.metrics.Registry(), extra, r.log)
		})
	}
	if r.ptp != nil {
		g.Go(func() error { return r.ptp.Run(ctx) })
	}
}

// ReopenResults closes and reopens the results and lost-packet files,
// what SIGHUP does: after an outside rotation moved them away, writing
// goes on in new files at their paths.
func (r *Receiver) ReopenResults() { r.pub.reopen() }

func (r *Receiver) serverCreds(addr string) (credentials.TransportCredentials, error) {
	t := r.cfg.Receiver.TLS
	if t.Plaintext {
		if !wire.IsLoopback(addr) {
			return nil, fmt.Errorf("receiver.tls.plaintext: refused on %s, which is not a loopback address; configure mTLS", addr)
		}
		r.log.Log(context.Background(), r.pol.plaintextLog, "serving senders without TLS (loopback only)", "listen", addr)
		return nil, nil
	}
	return wire.ServerTLS(t.Cert, t.Key, t.ClientCA)
}

// ownClock is this host's clock verdict now.
func (r *Receiver) ownClock() interval.ClockStatus { return tap.Clock(r.ptp) }

// clock judges an interval by both ends' clocks: the sender's when it
// closed the interval, the receiver's when it sealed it. Anything but
// synced (or disabled by choice) withholds the delays.
func (r *Receiver) clock(sender string, mt *interval.Matched) Clock {
	if !r.pol.clockChecks {
		return Clock{}
	}
	own, other := mt.ReceiverClock, mt.Meta.Clock
	if own.State == "" {
		own = r.ownClock()
	}
	// The receiver's own clock is exported once, from start (SetOwnClock);
	// a sender's, once an interval of it has brought its clock state.
	if other.State != "" {
		r.metrics.SetClock("sender", sender, other.State, other.OffsetNS, math.NaN())
	}
	c := Clock{Unsynced: !own.State.Trusted() || !other.State.Trusted()}
	if own.State == ptp.StateSynced && other.State == ptp.StateSynced {
		c.ErrorNS = results.Float(math.Abs(float64(own.OffsetNS)) + math.Abs(float64(other.OffsetNS)))
	}
	return c
}
