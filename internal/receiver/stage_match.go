package receiver

import (
	"context"
	"log/slog"
	"time"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/metrics"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
)

// matchStage is one sender entry's match stage; its goroutine (run) is
// the only one that touches its Matcher, its sample pieces' joins and its
// questions about lost packets. It reads the capture workers' sealed
// intervals (sealed) and what the sender's stream decoded (in), merges
// the workers' parts of each interval, matches both ends, asks the
// sender about the lost packets (lost_round.go), and submits every final
// interval (and a tick a second) to the entry's estimate stage.
type matchStage struct {
	conn   *senderConn
	m      *interval.Matcher
	pieces *sample.Pieces // the capture workers' sample candidates, until joined
	// sealed carries the capture workers' sealed intervals here; Run
	// closes it once every worker has ended.
	sealed chan *interval.ReceiverInterval
	in     chan senderMsg // from the stream stage (senderConn.toMatch)
	lostQ  *lostQueue
	est    *estStage
	// stopWhenDrained: end once capture has ended, the sender's stream
	// has closed and nothing is pending (policy).
	stopWhenDrained bool
	// verdict judges an interval by both ends' clocks (Receiver.clock);
	// ownClock is this host's clock now.
	verdict  func(sender string, mt *interval.Matched) Clock
	ownClock func() interval.ClockStatus
	metrics  *metrics.Receiver
	log      *slog.Logger
}

// run is the match stage's goroutine. It ends
//   - at a stop request: it stops reading the stream, closes the hold
//     window plan (no capture worker waits for evidence any more), drains
//     sealed until the capture workers have closed it, and finalizes
//     everything pending;
//   - when stopWhenDrained: once capture has ended, the sender's stream
//     has closed and nothing is pending;
//
// and closes the estimate stage's input on its way out.
func (ms *matchStage) run(ctx context.Context, plan *interval.WindowPlan, workers int) error {
	defer ms.est.close()
	defer close(ms.lostQ.done) // a finished sender's stream may end
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	merger := interval.NewReceiverMerger(workers)
	// Final intervals go through the lost-packet round first (lost_round.go).
	emit := func(mt *interval.Matched) { ms.finalLost(mt, time.Now()) }
	defer func() { ms.flushLost(time.Now(), true) }()
	addSealed := func(sl *interval.ReceiverInterval) error {
		merged, err := merger.Add(sl)
		if err != nil {
			return err
		}
		if merged != nil {
			merged.Clock = ms.ownClock()
			ms.m.AddReceiver(merged, time.Now(), emit)
		}
		return nil
	}
	sealed := ms.sealed
	receiverGone, senderGone := false, false
	for {
		if ms.stopWhenDrained && receiverGone && senderGone && ms.m.Idle() && len(ms.lostQ.park) == 0 {
			return nil
		}
		select {
		case <-ms.lostQ.lostTimer(time.Now()):
			ms.flushLost(time.Now(), false)
		case <-ctx.Done():
			// Capture's hold windows stop waiting for the evidence of
			// intervals this stage will not finalize before the drain
			// ends (a replay paces them). The workers seal what they hold
			// and close sealed: nothing captured is dropped silently at
			// SIGTERM. Then everything pending is final.
			plan.Close()
			if sealed != nil {
				for sl := range sealed {
					_ = addSealed(sl) // merging fails only on a worker's bug; the rest still counts
				}
			}
			now := time.Now()
			ms.m.ReceiverGone(now, emit)
			ms.m.SenderGone(now, emit)
			return nil
		case sl, ok := <-sealed:
			if !ok {
				sealed, receiverGone = nil, true
				ms.m.ReceiverGone(time.Now(), emit)
				continue
			}
			if err := addSealed(sl); err != nil {
				return err
			}
		case msg := <-ms.in:
			if ms.onStream(msg, emit) {
				senderGone = true
			}
		case <-tick.C:
			ms.m.Tick(time.Now(), emit)
			ms.est.submit(&estJob{sender: ms.conn.name(), tick: true, final: time.Now()})
		}
	}
}

// onStream takes one message of the sender's stream; it reports whether
// the sender has gone for good (stopWhenDrained only: live, a sender
// that went may come back).
func (ms *matchStage) onStream(msg senderMsg, emit func(*interval.Matched)) (gone bool) {
	switch {
	case msg.answer != nil:
		ms.lostAnswered(msg.answer, time.Now())
	case msg.ended:
		// What the ended stream was asked stays unanswered.
		ms.flushLost(time.Now(), true)
	case msg.gone:
		if ms.stopWhenDrained {
			ms.m.SenderGone(time.Now(), emit)
			return true
		}
	case len(msg.voided) > 0:
		name := ms.conn.name()
		for range msg.voided {
			ms.metrics.IntervalOutcome(name, results.OutcomeVoidedGap)
		}
		ms.log.Warn("intervals voided by a seq gap (the sender resends them after a reconnect)", "sender", name, "intervals", msg.voided)
	default:
		ms.metrics.SketchBytes(ms.conn.name(), int(msg.meta.SketchBytes))
		ms.m.AddSender(msg.si, msg.meta, time.Now(), emit) // a refusal is counted by the matcher's OnRefuse
	}
	return false
}

// final submits one final interval to the estimate stage (after its
// lost-packet round, lost_round.go); its clock verdict is taken now.
func (ms *matchStage) final(mt *interval.Matched) {
	name := ms.conn.name()
	ms.est.submit(&estJob{sender: name, mt: mt, clk: ms.verdict(name, mt), pieces: ms.pieces, final: time.Now()})
}
