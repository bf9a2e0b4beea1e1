package receiver

import (
	"fmt"
	"math"
	"time"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/spike"
)

// publishJob is what one sender entry's emitter (estStage.runEmitter)
// does with each job, in the order intervals became final. It holds a
// matched interval with cells short of packets (loss, or packets placed
// elsewhere) back until the next one is estimated: packets of this
// interval slower than the hold window show as a surplus in the next one,
// and then this one's loss is withheld too.
func (r *Receiver) publishJob(s *senderState, j *estJob) {
	if j.tick {
		// The next interval is overdue (the sender stopped, a long gap):
		// publish the held one without its successor's check.
		if h := s.held; h != nil && j.final.Sub(h.final) >= r.holdFor() {
			s.held = nil
			r.publishChecked(s, h)
		}
		return
	}
	mt := j.mt
	// The window follows the delays this interval vouches for.
	s.plan.Observe(mt.ID, j.chk.Delay, j.beyond)
	r.metrics.BoundaryWindow(j.sender, time.Duration(s.plan.Target()))
	if j.err != nil {
		r.log.Error("estimation failed: interval not published", "sender", j.sender, "interval", mt.ID, "err", j.err)
		r.metrics.IntervalOutcome(j.sender, results.OutcomeFailed)
		return
	}
	if mt.Unresolved > 0 || mt.Late > 0 {
		r.log.Warn("boundary packets placed without the sender's function or arriving late", "sender", j.sender, "interval", mt.ID,
			"unresolved", mt.Unresolved, "late", mt.Late)
	}
	if h := s.held; h != nil {
		s.held = nil
		if j.beyond && h.mt.ID == mt.ID-1 {
			h.beyond = true
		}
		if h.mt.ID == mt.ID-1 && h.iv != nil {
			// Drops read when this interval closed came after the held
			// one closed; they can still hold its packets where one was
			// slower than the hold window (receiver) or raced the read
			// by microseconds (sender). The held one has cells short of
			// packets: its loss is withheld too.
			d := results.CaptureDrops{Sender: mt.Meta.KernelDrops + mt.Meta.IfDrops, Receiver: mt.RxDrops}
			h.iv.FlagCaptureDrops(d)
			h.drops.Sender += d.Sender
			h.drops.Receiver += d.Receiver
		}
		r.publishChecked(s, h)
	}
	// Without a cell short of packets, nothing of this interval can sit in
	// the next one: no need to wait for its check.
	if (mt.Outcome == results.OutcomeMatched || mt.Outcome == results.OutcomePartial) && j.chk.DeficitCells > 0 {
		s.held = j
		return
	}
	r.publishChecked(s, j)
}

// holdFor bounds how long a live interval waits for its successor's check.
func (r *Receiver) holdFor() time.Duration {
	return max(2*time.Duration(r.params.T), time.Second)
}

// releaseHeld publishes the interval held back for its successor's check
// (the emitter's end: no successor will come).
func (r *Receiver) releaseHeld(s *senderState) {
	if h := s.held; h != nil {
		s.held = nil
		r.publishChecked(s, h)
	}
}

// publishChecked flags an interval whose packets may sit in the wrong
// interval (loss withheld, counted, logged once an episode), logs one
// whose loss capture drops withheld, and publishes it.
func (r *Receiver) publishChecked(s *senderState, j *estJob) {
	if j.drops.Any() {
		r.logCaptureDrops(j)
	}
	if j.beyond {
		j.iv.FlagBeyondWindow()
		r.metrics.BoundaryMisassigned(j.sender)
		if !s.inEpisode {
			target := time.Duration(s.plan.Target())
			msg := "packets slower than the receiver's hold window were placed in the wrong interval: loss withheld (status delay_beyond_window); the window is growing"
			fix := fmt.Sprintf("the hold window grows toward twice the delays seen (now %v) up to max_delay (%v)", target, time.Duration(r.params.MaxDelay))
			// Misplaced although its own windows were at max_delay: the
			// delays are beyond it, no growing will help.
			if j.chk.Window >= r.params.MaxDelay {
				msg = "packets slower than max_delay were placed in the wrong interval: loss withheld (status delay_beyond_window)"
				fix = fmt.Sprintf("raise max_delay (now %v) on both ends above the link's largest one-way delay", time.Duration(r.params.MaxDelay))
			}
			r.log.Warn(msg, "sender", j.sender, "interval", j.mt.ID, "surplus_cells", j.chk.SurplusCells, "misplaced", j.chk.Misplaced,
				"delay_evidence", time.Duration(nanOr0(j.chk.Delay)), "window", time.Duration(j.chk.Window), "fix", fix)
			s.inEpisode = true
		}
	} else if j.mt.Outcome == results.OutcomeMatched {
		s.inEpisode = false
	}
	r.toPublish <- j.iv
}

func nanOr0(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// publishStage is the receiver's one publisher: it takes every sender
// entry's intervals from r.toPublish until the emitters have closed it.
// Only it touches the spike detector and writes the results store, the
// results file and the exporters' input.
func (r *Receiver) publishStage(in <-chan *results.Interval) {
	for iv := range in {
		r.publish(iv)
	}
}

func (r *Receiver) publish(iv *results.Interval) {
	complete := iv.Outcome == results.OutcomeMatched || iv.Outcome == results.OutcomeUnsynced
	var events []spike.Event
	if complete {
		events = r.spikes.Observe(iv, r.metrics.Tracked(iv))
	}
	r.store.Add(iv)
	r.metrics.IntervalOutcome(iv.Sender, iv.Outcome)
	if complete {
		r.metrics.ObserveInterval(iv, events)
		if r.jsonl != nil {
			if err := r.jsonl.Write(iv); err != nil {
				// Rate-limited: a full disk fails every interval; each
				// failure is counted (lds_results_write_errors_total).
				r.limited.Error("results-file", "writing results file", "sender", iv.Sender, "interval", iv.Interval, "err", err)
			}
		}
		r.export.Publish(iv) // never blocks the daemon: a full exporter drops and counts
		r.publishLost(iv)    // lostfile.go
	}
	if r.opt.OnInterval != nil {
		r.opt.OnInterval(iv)
	}
}

// logCaptureDrops says, once per interval whose loss capture drops
// withheld, at which end and how many, and what to change.
func (r *Receiver) logCaptureDrops(j *estJob) {
	for _, e := range [...]struct {
		end string
		n   uint64
	}{{"sender", j.drops.Sender}, {"receiver", j.drops.Receiver}} {
		if e.n == 0 {
			continue
		}
		r.log.Warn("a tap's capture dropped packets: the interval's loss is withheld (status capture_drops), its delays kept",
			"sender", j.sender, "interval", j.mt.ID, "end", e.end, "drops", e.n,
			"fix", "lds-"+e.end+" read its capture ring too slowly: give it CPU (a core of its own, a higher priority, no CPU quota) "+
				"or a longer ring (capture.source.num_blocks × block_timeout is the time it holds at low rates, "+
				"block_size × num_blocks the bytes at high rates; ldsctl memory shows both)")
	}
}
