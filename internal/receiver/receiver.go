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
	"runtime"
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
	"github.com/lds-net/lds/internal/jsonl"
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

// Receiver is the downstream daemon's pipeline.
type Receiver struct {
	cfg     config.Receiver
	opt     Options
	log     *slog.Logger
	limited *wire.LimitedLog // rate-limited lines: refusals, repeated write failures
	params  interval.Params
	cc      capture.Config
	est     Estimation
	estConc int // intervals estimated at once
	metrics *metrics.Receiver
	store   *api.Store
	jsonl   *jsonl.Writer
	lostW   *jsonl.Writer // receiver.lost_file (lostfile.go)
	spikes  *spike.Detector
	export  *export.Set // nil: no exporter configured
	ptp     *ptp.Checker
	senders []*senderState

	// toPublish carries every sender entry's intervals, in each entry's
	// order, from its emitter to the publish stage (made in Run).
	toPublish chan *results.Interval
	capMu     sync.Mutex // guards capStats: each capture worker's last counters
	capStats  []workerStats
	done      chan struct{} // closed when Run returns: stream handlers stop waiting
}

// senderState is one receiver.senders entry: its match stage's input
// channels and matcher, and what its emitter and the stream stage keep.
type senderState struct {
	entry  config.SenderEntry
	sel    []match.Compiled
	m      *interval.Matcher // match stage only
	pieces *sample.Pieces    // the capture workers' sample candidates, until joined
	// sealed carries the capture workers' sealed intervals to the match
	// stage; closed once every worker has ended.
	sealed chan *interval.Sealed
	// fromStream carries what the sender's stream decoded to the match
	// stage; never closed (streams come and go; r.done ends a waiting send).
	fromStream chan senderMsg
	plan       *interval.WindowPlan // hold windows (made in Run: it needs the worker count)

	// Emitter goroutine only: the interval held back until the next
	// one's check (a surplus there means packets of this one moved there),
	// and whether the last published interval was flagged (log once an
	// episode).
	held      *estJob
	inEpisode bool
	mu        sync.Mutex // guards the fields below, and plan against Windows (the gRPC server's goroutines)
	bound     string     // sender id bound to a wildcard entry
	connected bool
	final     []int64 // recent final interval ids, for HelloAck.have
	finished  bool    // the connected sender said Finished (its end already told the match stage)
	// lostQ: the questions about lost packets in flight (lost_round.go);
	// its park is the match stage's only.
	lostQ *lostQueue
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
	// Live, estimation gets the cores the capture workers leave, one
	// interval at a time (they come one an interval; decode's per-flow
	// stages use those cores). A replay reads files, which cannot drop:
	// its intervals become final in bursts, so it estimates as many at
	// once as there are cores, each with every core for its per-flow
	// stages (a replay of one long interval decodes it on all of them).
	estWorkers, estConc := runtime.GOMAXPROCS(0)-max(1, cc.Source.Workers), 1
	if opt.Replay {
		estWorkers, estConc = runtime.GOMAXPROCS(0), runtime.GOMAXPROCS(0)
	}
	r := &Receiver{cfg: cfg, opt: opt, log: log, limited: wire.NewLimitedLog(log, 0), params: p, cc: cc,
		est: Estimation{Estimator: sketch.Estimator(cfg.Sketch.Estimator), Alpha: cfg.Sketch.Alpha, T: p.T, Classes: classes,
			FlowHash: parser.FlowHash, Weight: parser.WeightOf, Workers: estWorkers, MaxFlows: cfg.Sketch.MaxFlows, Heavy: cfg.Sketch.Heavy,
			Window: sample.Window{T: p.T, MaxDelay: p.MaxDelay, Guard: p.Guard}, NoRepair: opt.NoLostRepair},
		estConc: estConc,
		store:   api.NewBoundedStore(cfg.Receiver.Keep, cfg.Receiver.APIMaxRecords), done: make(chan struct{})}
	if r.metrics, err = metrics.NewReceiver(cfg.Metrics, log); err != nil {
		return nil, err
	}
	if r.spikes, err = spike.New(cfg.Spike); err != nil {
		return nil, err
	}
	if r.export, err = export.New(cfg.Export, export.Options{Blocking: opt.ExportBlocking, IntervalNS: p.T}, r.metrics, log); err != nil {
		return nil, err
	}
	if !opt.Replay {
		if r.ptp, err = ptp.New(cfg.PTP, log); err != nil {
			return nil, err
		}
		// This host's clock is exported from start, not only with the
		// first interval: it is often why none is published.
		r.metrics.SetOwnClock(tap.OwnClock(r.ptp))
	}
	entries := cfg.Receiver.Senders
	if len(entries) == 0 {
		entries = []config.SenderEntry{{}} // one wildcard entry: the first sender id that connects
	}
	for i, e := range entries {
		sel, err := match.CompileAll(fmt.Sprintf("receiver.senders[%d].select", i), e.Select)
		if err != nil {
			return nil, err
		}
		r.senders = append(r.senders, &senderState{entry: e, sel: sel,
			m:      interval.NewMatcher(p, cfg.Receiver.Lateness, cfg.Receiver.MaxPending),
			pieces: sample.NewPieces(pieceKeep(cfg, opt.Replay)),
			sealed: make(chan *interval.Sealed, cfg.Receiver.SealedQueue), fromStream: make(chan senderMsg, 16),
			lostQ: newLostQueue(cfg.Lost.Cells(), p.T, opt.Replay)})
	}
	return r, nil
}

// watchMatchers counts and logs what each sender entry's matcher refuses,
// and (live: clock not nil) makes it hold sender intervals ahead of the
// receiver's clock: more than two intervals and the largest hold window,
// further than any honest sender's interval can be (a sender seals an
// interval after its end; its shutdown trailers reach at most a window
// ahead).
func (r *Receiver) watchMatchers(clock func() time.Time) {
	for _, s := range r.senders {
		if clock != nil {
			s.m.HoldAhead(clock, time.Duration(2*r.params.T+r.params.MaxDelay))
		}
		s.m.OnRefuse(func(reason string, id int64) {
			name := s.name()
			r.metrics.IntervalRefusal(name, reason, 1)
			if reason == interval.RefusedDuplicate {
				r.metrics.IntervalOutcome(name, results.OutcomeDuplicate)
			}
			r.limited.Warn("interval\x00"+reason+"\x00"+name, "refused an interval half", "sender", name, "interval", id,
				"interval_start", time.Unix(0, id*r.params.T).UTC(), "reason", reason)
		})
	}
}

// pieceKeep bounds the sample pieces a sender entry holds: a live
// interval is final (and its pieces joined) within receiver.lateness, so
// a few more than lateness / interval suffice; a replay's capture may run
// up to its sealed-interval queue (receiver.sealed_queue) ahead of
// estimation.
func pieceKeep(cfg config.Receiver, replay bool) int {
	if replay {
		return max(4*cfg.Receiver.MaxPending, cfg.Receiver.SealedQueue+8)
	}
	return int(cfg.Receiver.Lateness/cfg.Interval) + 8
}

// Store is the results store behind the API.
func (r *Receiver) Store() *api.Store { return r.store }

// Metrics is the receiver's metrics (for tests and extra handlers).
func (r *Receiver) Metrics() *metrics.Receiver { return r.metrics }

// Run captures, serves and publishes until ctx ends (or, in replay, until
// everything is final).
func (r *Receiver) Run(ctx context.Context) error {
	readers, release, err := capture.OpenReaders(r.opt.Sources, r.cc, r.log)
	if err != nil {
		return err
	}
	defer release()
	r.capStats = make([]workerStats, len(readers))
	for _, s := range r.senders {
		plan := interval.NewWindowPlan(r.params, len(readers))
		if r.opt.Replay {
			// Files are read far ahead of estimation: let each boundary's
			// window wait for the evidence of the intervals before it.
			plan.Pace(replayPace)
		}
		// The gRPC server may already ask for it (Windows).
		s.mu.Lock()
		s.plan = plan
		s.mu.Unlock()
	}
	start := r.opt.CaptureStart
	if start == 0 {
		start = time.Now().UnixNano()
	}
	if r.cfg.Receiver.ResultsFile != "" {
		w, err := r.openResults()
		if err != nil {
			return err
		}
		r.jsonl = w
		defer func() {
			if err := w.Close(); err != nil {
				r.log.Error("closing the results file: its last records may be lost", "file", r.cfg.Receiver.ResultsFile, "err", err)
			}
		}()
	}
	closeLost, err := r.openLost()
	if err != nil {
		return err
	}
	defer closeLost()
	if !r.opt.Replay {
		// SIGHUP reopens the results file (logrotate's create mode, or
		// systemctl reload); without a file it is ignored, never fatal.
		hup, stopHUP := make(chan os.Signal, 1), make(chan struct{})
		signal.Notify(hup, syscall.SIGHUP)
		defer close(stopHUP)
		defer signal.Stop(hup)
		go func() {
			for {
				select {
				case <-hup:
					r.ReopenResults()
				case <-stopHUP:
					return
				}
			}
		}()
	}
	lis := r.opt.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", r.cfg.Receiver.Listen); err != nil {
			return fmt.Errorf("receiver.listen %q: %w", r.cfg.Receiver.Listen, err)
		}
	}
	creds, err := r.serverCreds(lis.Addr().String())
	if err != nil {
		return err
	}
	r.metrics.RefusalReasons(wire.ConnectionRefusalReasons(), wire.SenderRefusalReasons())
	refusals := &wire.Refusals{Log: r.limited, Connection: r.metrics.ConnectionRefusal, Sender: r.metrics.SenderRefusal}
	gate := wire.NewGate(wire.GateConfig{MaxAuthenticated: r.cfg.Receiver.MaxConnections, Refusals: refusals})
	if lis, err = gate.Listener(lis); err != nil {
		return fmt.Errorf("receiver.listen: %w", err)
	}
	srv := grpc.NewServer(wire.ServerOptions(gate.Creds(creds), r.cfg.Receiver.MaxFrameBytes)...)
	senders := map[string]bool{}
	for _, e := range r.cfg.Receiver.Senders {
		senders[e.ID] = true
	}
	var now func() time.Time
	switch {
	case r.opt.Clock != nil:
		now = r.opt.Clock
	case r.opt.Replay:
		// A replay's intervals are as old as its captures: no window.
	default:
		now = time.Now
	}
	r.watchMatchers(now)
	ldsv1.RegisterSketchExchangeServer(srv, wire.NewServer(wire.ServerConfig{
		Fingerprint: r.cfg.Fingerprint(), Seed: r.cfg.Sketch.Seed, Params: r.params, Senders: senders, Version: r.opt.Version,
		Now: now, MaxSkew: r.cfg.Receiver.MaxIntervalSkew, Refusals: refusals,
		Limits: wire.Limits{MaxSketchBytes: r.cfg.Receiver.MaxSketchBytes, MaxCells: r.params.Sketch.Rows*r.params.Sketch.Columns + 1<<22,
			MaxClasses: r.params.Classes},
	}, r, r.log))

	defer close(r.done)
	// The exporters run beside the pipeline, never inside its errgroup: an
	// export failure cannot stop the receiver. They stop (and flush) after
	// the last interval is published.
	expCtx, expStop := context.WithCancel(context.Background())
	expDone := make(chan struct{})
	go func() { defer close(expDone); r.export.Run(expCtx) }()
	defer func() { expStop(); <-expDone }()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		<-gctx.Done()
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
		extra := map[string]http.Handler{"/api/": r.store.Handler()}
		g.Go(func() error {
			return metrics.ServeListener(gctx, r.opt.HTTPListener, r.cfg.Metrics, r.metrics.Registry(), extra, r.log)
		})
	}
	if r.ptp != nil {
		g.Go(func() error { return r.ptp.Run(gctx) })
	}
	// The pipeline's stages, from the match stage on (stages.go).
	r.runStages(gctx, g, srv, len(readers))
	var workers sync.WaitGroup
	for i, rd := range readers {
		workers.Add(1)
		g.Go(func() error { defer workers.Done(); return r.captureLoop(gctx, i, rd, start) })
	}
	g.Go(func() error {
		workers.Wait()
		for _, s := range r.senders {
			s.plan.Close()
			close(s.sealed)
		}
		return nil
	})
	return tap.Wait(g)
}

// openResults opens receiver.results_file with its rotation, durability
// and error counting; a replay writes one file, never rotated or synced.
func (r *Receiver) openResults() (*jsonl.Writer, error) {
	rc := r.cfg.Receiver
	opt := jsonl.Options{MaxBytes: rc.ResultsMaxBytes, MaxAge: rc.ResultsMaxAge, Keep: rc.ResultsKeep, Fsync: rc.ResultsFsync,
		OnError: r.metrics.ResultsWriteError}
	if r.opt.Replay {
		opt.MaxBytes, opt.MaxAge, opt.Fsync = 0, 0, false
	}
	r.metrics.ResultsFileReasons([]string{jsonl.ReasonNoSpace, jsonl.ReasonIO, jsonl.ReasonOpen, jsonl.ReasonFsync, jsonl.ReasonRotate, jsonl.ReasonOther})
	w, err := jsonl.Open(rc.ResultsFile, opt)
	if err != nil {
		return nil, fmt.Errorf("receiver.results_file: %w", err)
	}
	return w, nil
}

// ReopenResults closes and reopens the results file, what SIGHUP does: after
// an outside rotation moved it away, writing goes on in a new file at
// receiver.results_file.
func (r *Receiver) ReopenResults() {
	r.reopenLost()
	if r.jsonl == nil {
		r.log.Info("SIGHUP: no results file to reopen")
		return
	}
	if err := r.jsonl.Reopen(); err != nil {
		r.log.Error("reopening the results file; retried at the next interval", "err", err)
		return
	}
	r.log.Info("results file reopened", "path", r.cfg.Receiver.ResultsFile)
}

func (r *Receiver) serverCreds(addr string) (credentials.TransportCredentials, error) {
	t := r.cfg.Receiver.TLS
	if t.Plaintext {
		if !wire.IsLoopback(addr) {
			return nil, fmt.Errorf("receiver.tls.plaintext: refused on %s, which is not a loopback address; configure mTLS", addr)
		}
		lv := slog.LevelWarn
		if r.opt.Replay {
			lv = slog.LevelDebug
		}
		r.log.Log(context.Background(), lv, "serving senders without TLS (loopback only)", "listen", addr)
		return nil, nil
	}
	return wire.ServerTLS(t.Cert, t.Key, t.ClientCA)
}

// captureLoop is one capture worker: the receiver's callbacks of the
// shared loop (internal/tap) hand each packet to every sender entry whose
// selection it matches. It never waits on the network or on estimation,
// only (in replay) on a full channel to the matcher, which keeps memory
// bounded.
func (r *Receiver) captureLoop(ctx context.Context, worker int, rd *capture.Reader, start int64) error {
	builders := make([]*interval.RxBuilder, len(r.senders))
	emitters := make([]func(*interval.Sealed), len(r.senders))
	// Sample candidates by receive time; a sealed interval's pieces are
	// handed to the sender entry before the interval itself.
	stores := make([]*sample.RxStore, len(r.senders))
	outages := make([]capture.OutageTracker, len(r.senders))
	// A packet this capture dropped was sent before the read + guard
	// (interval.DropLedger); one ledger per sender entry, as each entry
	// seals its intervals on its own.
	ledgers := make([]interval.DropLedger, len(r.senders))
	for i, s := range r.senders {
		stores[i] = sample.NewRxStore(r.cfg.Sample, start)
		var err error
		// The decoding estimator needs each flow's packets per cell.
		composition := r.est.Estimator == sketch.EstimatorDecode
		if builders[i], err = interval.NewRxBuilderPlan(r.params, start, composition, s.plan); err != nil {
			return err
		}
		ledgers[i] = interval.DropLedger{T: r.params.T, Reach: r.params.Guard}
		emitters[i] = func(sl *interval.Sealed) {
			stores[i].Cut(sl.ID, s.pieces.Put)
			if st, err := rd.Source().Stats(); err == nil {
				if outages[i].Touched(st) {
					sl.Partial = true // the capture interface was down during it
				}
				sl.Drops, sl.DropsAffecting = ledgers[i].Read(sl.ID, st.Kernel+st.Interface, time.Now().UnixNano())
			}
			select {
			case s.sealed <- sl:
			case <-ctx.Done():
			}
		}
	}
	loop := tap.Loop{Name: "receiver", Reader: rd, Log: r.log.With("worker", worker), Replay: r.opt.Replay,
		Packet: func(pkt *capture.Packet) {
			for i, s := range r.senders {
				if len(s.sel) == 0 || match.First(s.sel, pkt.Key.SrcAddr(), pkt.Key.DstAddr(), pkt.Key.Proto, pkt.Key.SPort, pkt.Key.DPort) >= 0 {
					builders[i].Add(pkt, emitters[i])
					stores[i].Add(pkt) // after: a piece Add's sealing hands over is complete
				}
			}
		},
		Advance: func(now int64) {
			for i := range r.senders {
				builders[i].Advance(now, emitters[i])
			}
		},
		Flush: func() {
			for i := range r.senders {
				builders[i].Flush(emitters[i])
			}
		},
		// On a stop request, seal what has been captured and hand it to
		// the matchers (they drain their channel before finalizing):
		// nothing captured is dropped silently at SIGTERM.
		Stop: func() {
			for i, s := range r.senders {
				builders[i].Flush(func(sl *interval.Sealed) {
					stores[i].Cut(sl.ID, s.pieces.Put)
					select {
					case s.sealed <- sl:
					case <-time.After(stopGrace):
					}
				})
			}
		},
		Poll: func() { r.publishCapture(worker, rd) },
	}
	return loop.Run(ctx)
}

// replayPace bounds how long a replay's capture waits for the evidence of
// earlier intervals before fixing a boundary's window without it.
const replayPace = 10 * time.Second

type workerStats struct {
	parse capture.ParseCounters
	drops capture.DropStats
}

// publishCapture records one worker's cumulative counters and exports the
// sum over workers.
func (r *Receiver) publishCapture(worker int, rd *capture.Reader) {
	st, _ := rd.Source().Stats()
	r.capMu.Lock()
	r.capStats[worker] = workerStats{parse: rd.Parser().Counters(), drops: st}
	var tot workerStats
	for _, w := range r.capStats {
		tot.parse = tot.parse.Add(w.parse)
		tot.drops = tot.drops.Add(w.drops)
	}
	r.capMu.Unlock()
	drops := tot.parse.ByReason()
	drops["kernel"], drops["interface"] = tot.drops.Kernel, tot.drops.Interface
	r.metrics.CaptureCounters(tot.parse.Parsed, drops)
	if tot.drops.Link != capture.LinkUnknown {
		r.metrics.CaptureHealth().Set(tot.drops.Oversize, tot.drops.LinkDowns, tot.drops.Link == capture.LinkUp)
	}
}

// stopGrace bounds how long a stopping capture worker waits to hand its
// last sealed intervals to the match stage.
const stopGrace = 2 * time.Second

// ownClock is this host's clock verdict now.
func (r *Receiver) ownClock() interval.ClockStatus { return tap.Clock(r.ptp) }

// clock judges an interval by both ends' clocks: the sender's when it
// closed the interval, the receiver's when it sealed it. Anything but
// synced (or disabled by choice) withholds the delays.
func (r *Receiver) clock(sender string, mt *interval.Matched) Clock {
	if r.opt.Replay {
		return Clock{}
	}
	own, other := mt.RxClock, mt.Meta.Clock
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
