package receiver

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/metrics"
	"github.com/lds-net/lds/internal/results"
)

// emitter is one sender entry's emitter state: only the estimate stage's
// emitter goroutine (estStage.runEmitter) touches it. It keeps the
// interval held back until the next one's check (a surplus there means
// packets of this one moved there), and whether the last published
// interval was flagged (log once an episode), and hands every interval to
// the publish stage on out.
type emitter struct {
	plan      *interval.WindowPlan // the entry's hold windows, which follow the delays the intervals vouch for
	held      *estJob
	inEpisode bool
	out       chan<- *results.Interval
	params    interval.Params
	metrics   *metrics.Receiver
	log       *slog.Logger
}

// publishJob is what one sender entry's emitter (estStage.runEmitter)
// does with each job, in the order intervals became final. It holds a
// matched interval with cells short of packets (loss, or packets placed
// elsewhere) back until the next one is estimated: packets of this
// interval slower than the hold window show as a surplus in the next one,
// and then this one's loss is withheld too.
func (e *emitter) publishJob(j *estJob) {
	if j.tick {
		// The next interval is overdue (the sender stopped, a long gap):
		// publish the held one without its successor's check.
		if h := e.held; h != nil && j.final.Sub(h.final) >= e.holdFor() {
			e.held = nil
			e.publishChecked(h)
		}
		return
	}
	mt := j.mt
	// The window follows the delays this interval vouches for.
	e.plan.Observe(mt.ID, j.chk.Delay, j.beyond)
	e.metrics.BoundaryWindow(j.sender, time.Duration(e.plan.Target()))
	if j.err != nil {
		e.log.Error("estimation failed: interval not published", "sender", j.sender, "interval", mt.ID, "err", j.err)
		e.metrics.IntervalOutcome(j.sender, results.OutcomeFailed)
		return
	}
	if mt.Unresolved > 0 || mt.Late > 0 {
		e.log.Warn("boundary packets placed without the sender's function or arriving late", "sender", j.sender, "interval", mt.ID,
			"unresolved", mt.Unresolved, "late", mt.Late)
	}
	if h := e.held; h != nil {
		e.held = nil
		if j.beyond && h.mt.ID == mt.ID-1 {
			h.beyond = true
		}
		if h.mt.ID == mt.ID-1 && h.iv != nil {
			// Drops read when this interval closed came after the held
			// one closed; they can still hold its packets where one was
			// slower than the hold window (receiver) or raced the read
			// by microseconds (sender). The held one has cells short of
			// packets: its loss is withheld too.
			d := results.CaptureDrops{Sender: mt.Meta.KernelDrops + mt.Meta.IfDrops, Receiver: mt.ReceiverDrops}
			h.iv.FlagCaptureDrops(d)
			h.drops.Sender += d.Sender
			h.drops.Receiver += d.Receiver
		}
		e.publishChecked(h)
	}
	// Without a cell short of packets, nothing of this interval can sit in
	// the next one: no need to wait for its check.
	if (mt.Outcome == results.OutcomeMatched || mt.Outcome == results.OutcomePartial) && j.chk.DeficitCells > 0 {
		e.held = j
		return
	}
	e.publishChecked(j)
}

// holdFor bounds how long a live interval waits for its successor's check.
func (e *emitter) holdFor() time.Duration {
	return max(2*time.Duration(e.params.T), time.Second)
}

// releaseHeld publishes the interval held back for its successor's check
// (the emitter's end: no successor will come).
func (e *emitter) releaseHeld() {
	if h := e.held; h != nil {
		e.held = nil
		e.publishChecked(h)
	}
}

// publishChecked flags an interval whose packets may sit in the wrong
// interval (loss withheld, counted, logged once an episode), logs one
// whose loss capture drops withheld, and publishes it.
func (e *emitter) publishChecked(j *estJob) {
	if j.drops.Any() {
		e.logCaptureDrops(j)
	}
	if j.beyond {
		j.iv.FlagBeyondWindow()
		e.metrics.BoundaryMisassigned(j.sender)
		if !e.inEpisode {
			target := time.Duration(e.plan.Target())
			msg := "packets slower than the receiver's hold window were placed in the wrong interval: loss withheld (status delay_beyond_window); the window is growing"
			fix := fmt.Sprintf("the hold window grows toward twice the delays seen (now %v) up to max_delay (%v)", target, time.Duration(e.params.MaxDelay))
			// Misplaced although its own windows were at max_delay: the
			// delays are beyond it, no growing will help.
			if j.chk.Window >= e.params.MaxDelay {
				msg = "packets slower than max_delay were placed in the wrong interval: loss withheld (status delay_beyond_window)"
				fix = fmt.Sprintf("raise max_delay (now %v) on both ends above the link's largest one-way delay", time.Duration(e.params.MaxDelay))
			}
			e.log.Warn(msg, "sender", j.sender, "interval", j.mt.ID, "surplus_cells", j.chk.SurplusCells, "misplaced", j.chk.Misplaced,
				"delay_evidence", time.Duration(nanOr0(j.chk.Delay)), "window", time.Duration(j.chk.Window), "fix", fix)
			e.inEpisode = true
		}
	} else if j.mt.Outcome == results.OutcomeMatched {
		e.inEpisode = false
	}
	e.out <- j.iv
}

func nanOr0(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// logCaptureDrops says, once per interval whose loss capture drops
// withheld, at which end and how many, and what to change.
func (e *emitter) logCaptureDrops(j *estJob) {
	for _, end := range [...]struct {
		end string
		n   uint64
	}{{"sender", j.drops.Sender}, {"receiver", j.drops.Receiver}} {
		if end.n == 0 {
			continue
		}
		e.log.Warn("a tap's capture dropped packets: the interval's loss is withheld (status capture_drops), its delays kept",
			"sender", j.sender, "interval", j.mt.ID, "end", end.end, "drops", end.n,
			"fix", "lds-"+end.end+" read its capture ring too slowly: give it CPU (a core of its own, a higher priority, no CPU quota) "+
				"or a longer ring (capture.source.num_blocks × block_timeout is the time it holds at low rates, "+
				"block_size × num_blocks the bytes at high rates; ldsctl memory shows both)")
	}
}
