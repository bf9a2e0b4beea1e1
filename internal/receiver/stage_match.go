package receiver

import (
	"context"
	"time"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
)

// matchStage is one sender entry's match stage, the only goroutine that
// touches its Matcher. It reads the capture workers' sealed intervals
// (s.sealed) and what the sender's stream decoded (s.fromStream), merges
// the workers' parts of each interval, matches both ends, and submits every
// final interval (and a tick a second) to the estimate stage. It ends
//   - at a stop request: it stops reading the stream, closes the hold
//     window plan (no capture worker waits for evidence any more), drains
//     s.sealed until the capture workers have closed it, and finalizes
//     everything pending;
//   - in a replay: once capture has ended, the sender's stream has closed
//     and nothing is pending;
//
// and closes the estimate stage's input on its way out.
func (r *Receiver) matchStage(ctx context.Context, s *senderState, est *estStage, workers int) error {
	defer est.close()
	defer close(s.lostQ.done) // a finished sender's stream may end
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	merger := interval.NewSealedMerger(workers)
	// Final intervals go through the lost-packet round first (lost_round.go).
	emit := func(mt *interval.Matched) { r.finalLost(s, est, mt, time.Now()) }
	defer func() { r.flushLost(s, est, time.Now(), true) }()
	addSealed := func(sl *interval.Sealed) error {
		merged, err := merger.Add(sl)
		if err != nil {
			return err
		}
		if merged != nil {
			merged.Clock = r.ownClock()
			s.m.AddSealed(merged, time.Now(), emit)
		}
		return nil
	}
	sealed := s.sealed
	rxGone, sndGone := false, false
	for {
		if r.opt.Replay && rxGone && sndGone && s.m.Idle() && len(s.lostQ.park) == 0 {
			return nil
		}
		select {
		case <-s.lostQ.lostTimer(time.Now()):
			r.flushLost(s, est, time.Now(), false)
		case <-ctx.Done():
			// Capture's hold windows stop waiting for the evidence of
			// intervals this stage will not finalize before the drain
			// ends (a replay paces them). The workers seal what they hold
			// and close s.sealed: nothing captured is dropped silently at
			// SIGTERM. Then everything pending is final.
			s.plan.Close()
			if sealed != nil {
				for sl := range sealed {
					_ = addSealed(sl) // merging fails only on a worker's bug; the rest still counts
				}
			}
			now := time.Now()
			s.m.RxGone(now, emit)
			s.m.SenderGone(now, emit)
			return nil
		case sl, ok := <-sealed:
			if !ok {
				sealed, rxGone = nil, true
				s.m.RxGone(time.Now(), emit)
				continue
			}
			if err := addSealed(sl); err != nil {
				return err
			}
		case msg := <-s.fromStream:
			if msg.answer != nil {
				r.lostAnswered(s, est, msg.answer, time.Now())
				continue
			}
			if msg.ended {
				// What the ended stream was asked stays unanswered.
				r.flushLost(s, est, time.Now(), true)
				continue
			}
			if msg.gone {
				if r.opt.Replay {
					sndGone = true
					s.m.SenderGone(time.Now(), emit)
				}
				continue
			}
			if ids := msg.voided; len(ids) > 0 {
				for range ids {
					r.metrics.IntervalOutcome(s.name(), results.OutcomeVoidedGap)
				}
				r.log.Warn("intervals voided by a seq gap (the sender resends them after a reconnect)", "sender", s.name(), "intervals", ids)
				continue
			}
			r.metrics.SketchBytes(s.name(), int(msg.meta.SketchBytes))
			s.m.AddSender(msg.si, msg.meta, time.Now(), emit) // a refusal is counted by the matcher's OnRefuse
		case <-tick.C:
			s.m.Tick(time.Now(), emit)
			est.submit(&estJob{sender: s.name(), tick: true, final: time.Now()})
		}
	}
}

func (s *senderState) name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entry.ID != "" {
		return s.entry.ID
	}
	if s.bound != "" {
		return s.bound
	}
	return "unknown"
}

// final submits one final interval to the estimate stage (after its
// lost-packet round, lost_round.go); its clock verdict is taken now.
func (r *Receiver) final(s *senderState, est *estStage, mt *interval.Matched) {
	name := s.name()
	est.submit(&estJob{sender: name, mt: mt, clk: r.clock(name, mt), pieces: s.pieces, final: time.Now()})
}

// recordFinal records a final interval for HelloAck.have: the receiver
// holds it, whatever its lost-packet round still waits for.
func (r *Receiver) recordFinal(s *senderState, id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.final = append(s.final, id)
	if len(s.final) > 4*r.cfg.Receiver.MaxPending {
		s.final = s.final[len(s.final)-4*r.cfg.Receiver.MaxPending:]
	}
}
