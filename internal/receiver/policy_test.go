package receiver

import (
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/config"
)

// TestPolicy: New decides once what differs between a live receiver and
// a replay; the stages read only the policy.
func TestPolicy(t *testing.T) {
	cores := runtime.GOMAXPROCS(0)
	fixed := func() time.Time { return time.Unix(1, 0) }
	tests := []struct {
		name string
		opt  Options
		// want
		drained, clock, rotate, warnSlow, eventTime, hasNow bool
		conc                                                int
		pace, wait                                          time.Duration
	}{
		{"live", Options{NoHTTP: true}, false, true, true, true, false, true, 1, 0, LostAnswerWait},
		{"replay", Options{Replay: true, NoHTTP: true}, true, false, false, false, true, false, cores, replayPace, lostAnswerWaitReplay},
		{"replay with a clock", Options{Replay: true, NoHTTP: true, Clock: fixed}, true, false, false, false, true, true, cores, replayPace, lostAnswerWaitReplay},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.DefaultReceiver()
			cfg.PTP.Enabled = false
			r, err := New(cfg, tc.opt, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			p := r.pol
			if p.stopWhenDrained != tc.drained || p.clockChecks != tc.clock || p.rotate != tc.rotate || p.warnSlowEstimate != tc.warnSlow ||
				p.eventTime != tc.eventTime || (p.now != nil) != tc.hasNow || p.estConc != tc.conc || p.pace != tc.pace || p.answerWait != tc.wait {
				t.Errorf("policy %+v", p)
			}
			if (r.ptp != nil) != tc.clock {
				t.Errorf("PTP checker present %v, want %v", r.ptp != nil, tc.clock)
			}
			for _, e := range r.entries {
				if e.match.stopWhenDrained != tc.drained || e.match.lostQ.wait != tc.wait || e.est.workers != tc.conc {
					t.Errorf("entry stages do not follow the policy: drained %v wait %v workers %d", e.match.stopWhenDrained, e.match.lostQ.wait, e.est.workers)
				}
			}
		})
	}
}
