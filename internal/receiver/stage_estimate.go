package receiver

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
)

// estStage is one sender entry's estimate stage: a pool of workers
// goroutines estimates final intervals off the match stage, and one
// emitter goroutine hands them on in the order they became final, so that
// the results file and the API see the same sequence as with one
// estimation at a time. The match stage keeps reading frames and sealed
// intervals while an interval is estimated, and a backlog (a replay's last
// intervals, a reconnect's resends) spreads over the workers.
//
// The match stage is the only writer of both channels: submit puts a job
// in order, then (unless it is a tick) in work; close closes both. The
// workers end when work is closed, the emitter when order is closed and
// every job in it is done.
type estStage struct {
	workers int
	work    chan *estJob // match stage -> workers: intervals to estimate
	order   chan *estJob // match stage -> emitter: every job, in the order it became final
	running atomic.Int32 // estimations in flight
	// estimate runs in the workers (Receiver.estimateJob; tests stub it).
	estimate func(*estJob) (*results.Interval, error)
}

// estJob is one final interval on its way from the match stage to
// publishing (or a tick: the emitter's clock, which releases a held
// interval whose successor is overdue).
type estJob struct {
	sender string
	mt     *interval.Matched
	clk    Clock
	pieces *sample.Pieces
	iv     *results.Interval
	err    error
	chk    interval.Assignment // the interval's assignment check (estimateJob)
	beyond bool                // its own check says packets may be misplaced
	// drops: the capture drops at each end that may have removed packets
	// of this interval (its records then withhold their loss).
	drops results.CaptureDrops
	final time.Time     // when it became final
	tick  bool          // no interval: the emitter's clock (releases a held interval)
	done  chan struct{} // closed once iv and err are set
	// running is how many estimations were in flight when this one
	// started, itself included: it shares the cores with them.
	running int
}

// newEstStage makes the stage of workers workers (at least one); its
// goroutines are runWorker (workers times) and runEmitter.
func newEstStage(workers int, estimate func(*estJob) (*results.Interval, error)) *estStage {
	workers = max(1, workers)
	return &estStage{workers: workers, work: make(chan *estJob), order: make(chan *estJob, workers), estimate: estimate}
}

// submit hands a job on (match stage); it blocks while every worker is
// busy or workers jobs wait for the emitter.
func (p *estStage) submit(j *estJob) {
	j.done = make(chan struct{})
	p.order <- j
	if j.tick {
		close(j.done)
		return
	}
	p.work <- j
}

// close ends the stage's input (match stage, once, after its last submit).
func (p *estStage) close() {
	close(p.order)
	close(p.work)
}

// runWorker estimates jobs until the input is closed.
func (p *estStage) runWorker() {
	for j := range p.work {
		j.running = int(p.running.Add(1))
		j.iv, j.err = p.estimate(j)
		p.running.Add(-1)
		close(j.done)
	}
}

// runEmitter hands every job to emit in submission order, each once it is
// estimated, until the input is closed and drained.
func (p *estStage) runEmitter(emit func(*estJob)) {
	for j := range p.order {
		<-j.done
		emit(j)
	}
}

// estimateJob is what the estimate stage's workers run.
func (r *Receiver) estimateJob(j *estJob) (*results.Interval, error) {
	defer j.mt.Release() // the receiver's sketches go back to its capture pool
	// Estimations running side by side (a replay's burst) share the
	// cores: decode's two-goroutine solves wait for each other at every
	// step and lose more than they gain on a core another estimation holds.
	est := r.est
	est.Workers = max(1, est.Workers/max(1, j.running))
	est.Pieces = j.pieces
	// Packets slower than the hold window leave a surplus in the cells of
	// the interval they were placed in: checked before the sketches go back.
	j.chk = j.mt.CheckAssignment()
	j.beyond = j.mt.Outcome == results.OutcomeMatched && j.chk.Beyond(j.mt.Unresolved)
	start := time.Now()
	iv, err := r.estimate(&est, j.sender, j.mt, j.clk)
	took := time.Since(start)
	j.drops = results.CaptureDrops{Sender: j.mt.Meta.DropsAffecting, Receiver: j.mt.ReceiverDropsAffecting}
	if iv != nil {
		iv.FlagCaptureDrops(j.drops)
	}
	// A surplus where the sender's capture dropped packets is those
	// packets (the receiver counted what the sender missed), not packets
	// slower than the hold window: no beyond-window flag, count or window
	// growth for it (its loss is withheld as capture_drops already).
	j.beyond = j.beyond && j.drops.Sender == 0
	r.metrics.EstimationDuration(j.sender, took)
	if r.pol.warnSlowEstimate && took > time.Duration(r.params.T) {
		// Live intervals come one an interval: estimation slower than
		// that piles them up (the sender's resend buffer, then voids).
		r.log.Warn("estimating an interval took longer than the interval: the receiver falls behind",
			"sender", j.sender, "interval", j.mt.ID, "took", took.Round(time.Millisecond), "interval_length", time.Duration(r.params.T),
			"flows", j.mt.Flows.Len(), "estimator", est.Estimator,
			"fix", "fewer candidate flows (sketch.max_flows), sketch.estimator: paper, or more cores for estimation (fewer capture.source.workers)")
	}
	return iv, err
}

// estimate runs the estimator, turning a panic into an error: the sketches
// come from another host, and one bad interval must not stop the daemon.
func (r *Receiver) estimate(est *Estimation, name string, mt *interval.Matched, clk Clock) (iv *results.Interval, err error) {
	defer func() {
		if p := recover(); p != nil {
			iv, err = nil, fmt.Errorf("estimator panic: %v", p)
		}
	}()
	return est.Estimate(name, mt, clk)
}
