package receiver

import (
	"fmt"
	"log/slog"

	"github.com/lds-net/lds/internal/api"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/export"
	"github.com/lds-net/lds/internal/jsonl"
	"github.com/lds-net/lds/internal/metrics"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/spike"
	"github.com/lds-net/lds/internal/wire"
)

// publisher is the publish stage: the receiver's one publisher. Its
// goroutine (run) takes every sender entry's intervals from in until the
// emitters have closed it; only it touches the spike detector and writes
// the results store, the results and lost-packet files and the
// exporters' input. Reopen (SIGHUP) may run beside it: the files lock
// their own writes.
type publisher struct {
	in      chan *results.Interval
	cfg     config.ReceiverSection
	rotate  bool // the files rotate and fsync as configured (policy)
	store   *api.Store
	spikes  *spike.Detector
	export  *export.Set
	metrics *metrics.Receiver
	log     *slog.Logger
	limited *wire.LimitedLog
	results *jsonl.Writer // receiver.results_file (nil: none)
	lost    *jsonl.Writer // receiver.lost_file (lostfile.go)
	// onInterval is Options.OnInterval.
	onInterval func(*results.Interval)
}

// run publishes until in is closed and drained.
func (p *publisher) run() {
	for iv := range p.in {
		p.publish(iv)
	}
}

func (p *publisher) publish(iv *results.Interval) {
	complete := iv.Outcome == results.OutcomeMatched || iv.Outcome == results.OutcomeUnsynced
	var events []spike.Event
	if complete {
		events = p.spikes.Observe(iv, p.metrics.Tracked(iv))
	}
	p.store.Add(iv)
	p.metrics.IntervalOutcome(iv.Sender, iv.Outcome)
	if complete {
		p.metrics.ObserveInterval(iv, events)
		if p.results != nil {
			if err := p.results.Write(iv); err != nil {
				// Rate-limited: a full disk fails every interval; each
				// failure is counted (lds_results_write_errors_total).
				p.limited.Error("results-file", "writing results file", "sender", iv.Sender, "interval", iv.Interval, "err", err)
			}
		}
		p.export.Publish(iv) // never blocks the daemon: a full exporter drops and counts
		p.publishLost(iv)    // lostfile.go
	}
	if p.onInterval != nil {
		p.onInterval(iv)
	}
}

// open opens receiver.results_file and receiver.lost_file (those set);
// the returned function closes them.
func (p *publisher) open() (func(), error) {
	closeResults := func() {}
	if p.cfg.ResultsFile != "" {
		w, err := p.openResults()
		if err != nil {
			return nil, err
		}
		p.results = w
		closeResults = func() {
			if err := w.Close(); err != nil {
				p.log.Error("closing the results file: its last records may be lost", "file", p.cfg.ResultsFile, "err", err)
			}
		}
	}
	closeLost, err := p.openLost()
	if err != nil {
		closeResults()
		return nil, err
	}
	return func() { closeLost(); closeResults() }, nil
}

// openResults opens receiver.results_file with its rotation, durability
// and error counting; without rotation (a replay) it writes one file,
// never rotated or synced.
func (p *publisher) openResults() (*jsonl.Writer, error) {
	rc := p.cfg
	opt := jsonl.Options{MaxBytes: rc.ResultsMaxBytes, MaxAge: rc.ResultsMaxAge, Keep: rc.ResultsKeep, Fsync: rc.ResultsFsync,
		OnError: p.metrics.ResultsWriteError}
	if !p.rotate {
		opt.MaxBytes, opt.MaxAge, opt.Fsync = 0, 0, false
	}
	p.metrics.ResultsFileReasons([]string{jsonl.ReasonNoSpace, jsonl.ReasonIO, jsonl.ReasonOpen, jsonl.ReasonFsync, jsonl.ReasonRotate, jsonl.ReasonOther})
	w, err := jsonl.Open(rc.ResultsFile, opt)
	if err != nil {
		return nil, fmt.Errorf("receiver.results_file: %w", err)
	}
	return w, nil
}

// reopen closes and reopens the files, what SIGHUP does: after an outside
// rotation moved them away, writing goes on in new files at their paths.
func (p *publisher) reopen() {
	p.reopenLost()
	if p.results == nil {
		p.log.Info("SIGHUP: no results file to reopen")
		return
	}
	if err := p.results.Reopen(); err != nil {
		p.log.Error("reopening the results file; retried at the next interval", "err", err)
		return
	}
	p.log.Info("results file reopened", "path", p.cfg.ResultsFile)
}
