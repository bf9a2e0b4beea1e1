package receiver

import (
	"log/slog"
	"runtime"
	"time"

	"github.com/lds-net/lds/internal/config"
)

// policy is everything that differs between a live receiver and a replay
// of capture files, decided once in New; the stages read it and never ask
// which of the two they run in.
type policy struct {
	// eventTime: the capture loop follows the files' own timestamps and
	// waits on a full channel to the match stage (tap.Loop.Replay).
	eventTime bool
	// estWorkers is the cores one estimation's per-flow stages use;
	// estConc, how many intervals are estimated at once.
	estWorkers, estConc int
	// pace bounds how long a boundary's hold window waits for the evidence
	// of the intervals before it (0: no wait; interval.WindowPlan.Pace).
	pace time.Duration
	// stopWhenDrained: Run returns once capture has ended, every sender
	// stream has closed and every interval is published.
	stopWhenDrained bool
	// clockChecks: a PTP checker runs, intervals get both ends' clock
	// verdicts, and the receiver's own clock is exported from start.
	clockChecks bool
	// now is the receiver's clock for receiver.max_interval_skew and the
	// matchers' hold-ahead (nil: no window).
	now func() time.Time
	// warnSlowEstimate: an estimation longer than the interval is logged
	// (live intervals come one an interval).
	warnSlowEstimate bool
	// rotate: the results and lost-packet files rotate and fsync as
	// configured, and SIGHUP reopens them; otherwise each is one file.
	rotate bool
	// answerWait is how long the match stage waits for the sender's answer
	// about an interval's lost packets (lost_round.go).
	answerWait time.Duration
	// pieceKeep bounds the sample pieces a sender entry holds.
	pieceKeep int
	// plaintextLog is the level of the "serving without TLS" line.
	plaintextLog slog.Level
}

// newPolicy decides the policy. Live, estimation gets the cores the capture
// workers leave, one interval at a time (they come one an interval;
// decode's per-flow stages use those cores). A replay reads files, which
// cannot drop: its intervals become final in bursts, so it estimates as
// many at once as there are cores, each with every core for its per-flow
// stages (a replay of one long interval decodes it on all of them).
func newPolicy(cfg config.Receiver, opt Options) policy {
	cores := runtime.GOMAXPROCS(0)
	if opt.Replay {
		return policy{eventTime: true, estWorkers: cores, estConc: cores, pace: replayPace, stopWhenDrained: true,
			now: opt.Clock, answerWait: lostAnswerWaitReplay, pieceKeep: pieceKeep(cfg, true), plaintextLog: slog.LevelDebug}
	}
	now := opt.Clock
	if now == nil {
		now = time.Now
	}
	return policy{estWorkers: cores - max(1, cfg.CaptureConfig().Source.Workers), estConc: 1, clockChecks: true, now: now,
		warnSlowEstimate: true, rotate: true, answerWait: LostAnswerWait, pieceKeep: pieceKeep(cfg, false), plaintextLog: slog.LevelWarn}
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

// replayPace bounds how long a replay's capture waits for the evidence of
// earlier intervals before fixing a boundary's window without it.
const replayPace = 10 * time.Second
