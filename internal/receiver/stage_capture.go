package receiver

import (
	"context"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/internal/sketch"
	"github.com/lds-net/lds/internal/tap"
)

// captureLoop is one capture worker: the receiver's callbacks of the
// shared loop (internal/tap) hand each packet to every sender entry whose
// selection it matches. It never waits on the network or on estimation,
// only (in replay) on a full channel to the matcher, which keeps memory
// bounded.
func (r *Receiver) captureLoop(ctx context.Context, worker int, rd *capture.Reader, start int64) error {
	builders := make([]*interval.ReceiverBuilder, len(r.entries))
	emitters := make([]func(*interval.ReceiverInterval), len(r.entries))
	// Sample candidates by receive time; a sealed interval's pieces are
	// handed to the sender entry before the interval itself.
	stores := make([]*sample.ReceiverStore, len(r.entries))
	outages := make([]capture.OutageTracker, len(r.entries))
	// A packet this capture dropped was sent before the read + guard
	// (interval.DropLedger); one ledger per sender entry, as each entry
	// seals its intervals on its own.
	ledgers := make([]interval.DropLedger, len(r.entries))
	for i, e := range r.entries {
		s := e.match
		stores[i] = sample.NewReceiverStore(r.cfg.Sample, start)
		var err error
		// The decoding estimator needs each flow's packets per cell.
		composition := r.est.Estimator == sketch.EstimatorDecode
		if builders[i], err = interval.NewReceiverBuilderPlan(r.params, start, composition, e.emit.plan); err != nil {
			return err
		}
		ledgers[i] = interval.DropLedger{T: r.params.T, Reach: r.params.Guard}
		emitters[i] = func(sl *interval.ReceiverInterval) {
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
	loop := tap.Loop{Name: "receiver", Reader: rd, Log: r.log.With("worker", worker), Replay: r.pol.eventTime,
		Packet: func(pkt *capture.Packet) {
			for i, e := range r.entries {
				if len(e.sel) == 0 || match.First(e.sel, pkt.Key.SrcAddr(), pkt.Key.DstAddr(), pkt.Key.Proto, pkt.Key.SPort, pkt.Key.DPort) >= 0 {
					builders[i].Add(pkt, emitters[i])
					stores[i].Add(pkt) // after: a piece Add's sealing hands over is complete
				}
			}
		},
		Advance: func(now int64) {
			for i := range r.entries {
				builders[i].Advance(now, emitters[i])
			}
		},
		Flush: func() {
			for i := range r.entries {
				builders[i].Flush(emitters[i])
			}
		},
		// On a stop request, seal what has been captured and hand it to
		// the matchers (they drain their channel before finalizing):
		// nothing captured is dropped silently at SIGTERM.
		Stop: func() {
			for i, e := range r.entries {
				s := e.match
				builders[i].Flush(func(sl *interval.ReceiverInterval) {
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
