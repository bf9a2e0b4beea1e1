package receiver_test

import (
	"context"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/test/testutil/ptp4l"
)

// TestClockUnsyncedWithholdsDelays: both daemons check a real ptp4l slave
// (free_running, no CAP_SYS_TIME); while its master runs the intervals are
// published with delays and an error bound; once the master is killed the
// following intervals are flagged clock_unsynced, their delays withheld and
// their counts still published.
func TestClockUnsyncedWithholdsDelays(t *testing.T) {
	ptp4l.Require(t)
	pair := ptp4l.StartPair(t, "rx")
	pcfg := ptp.DefaultConfig()
	pcfg.Socket, pcfg.PollInterval, pcfg.Timeout, pcfg.Grace = pair.SlaveSock, 100*time.Millisecond, 300*time.Millisecond, time.Second
	chk, err := ptp.New(pcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if s, _ := chk.Poll(context.Background()); s.State == ptp.StateSynced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ptp4l slave never synced:\n%s", pair.Slave.Tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	chk.Close()

	// A live-paced trace of 7 intervals starting at the next second.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc := liveScenario(7 * time.Second)
	rc := config.DefaultReceiver()
	rc.Receiver.Lateness = 3 * time.Second
	rc.PTP = pcfg
	l := startLive(t, ctx, ctx, sc, rc)

	// Kill the master in the middle of the fourth interval.
	first := l.First
	killAt := time.Unix(first+3, 500e6)
	time.Sleep(time.Until(killAt))
	pair.Master.Kill()
	killedNS := time.Now().UnixNano()

	last := first + 6
	for time.Now().Before(time.Unix(last+10, 0)) && l.Interval(last) == nil {
		time.Sleep(200 * time.Millisecond)
	}
	synced, unsynced := 0, 0
	for id := first; id <= last; id++ {
		iv := l.Interval(id)
		if iv == nil {
			t.Errorf("interval %d never published", id)
			continue
		}
		// Closed once the hold of its end boundary is over: the minimum
		// window on this link of microsecond delays.
		end := (id+1)*1e9 + interval.DefaultMinWindow
		withDelay := 0
		for _, f := range iv.Flows {
			if f.DelayNS != nil {
				withDelay++
			}
			if f.Packets <= 0 {
				t.Errorf("interval %d: counts must publish whatever the clock", id)
			}
		}
		switch {
		case end < killedNS-int64(time.Second):
			// Closed well before the master died: synced, with delays and a bound.
			if iv.Outcome != results.OutcomeMatched || withDelay == 0 {
				t.Errorf("interval %d (before the kill): outcome %s, %d flows with delay", id, iv.Outcome, withDelay)
			}
			for _, f := range iv.Flows {
				if f.ErrorNS == nil {
					t.Errorf("interval %d: synced record without an error bound", id)
					break
				}
			}
			synced++
		case iv.Interval*1e9 > killedNS+int64(2*time.Second):
			// Begun after the slave lost its master: withheld.
			if iv.Outcome != results.OutcomeUnsynced || withDelay != 0 {
				t.Errorf("interval %d (after the kill): outcome %s, %d flows with delay", id, iv.Outcome, withDelay)
			}
			unsynced++
		}
	}
	if synced < 2 || unsynced < 1 {
		t.Errorf("checked %d synced and %d unsynced intervals: too few", synced, unsynced)
	}
	t.Logf("%d intervals synced with delays, %d clock_unsynced without (master killed at +%.1fs)", synced, unsynced, float64(killedNS-sc.StartNS)/1e9)
}
