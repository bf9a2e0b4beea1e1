package receiver_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/eval"
)

// TestGracefulStopFinalizesEverything: a receiver stopped (SIGTERM) in the
// middle of live-paced traffic finalizes every interval it has, instead of
// dropping the ones still waiting: the completed intervals are matched and
// in the results file, the one cut short is reported with its outcome, and
// the file is whole.
func TestGracefulStopFinalizesEverything(t *testing.T) {
	dir := t.TempDir()
	rc := config.DefaultReceiver()
	rc.Receiver.Lateness = time.Minute // nothing may be given up by time during the test
	rc.PTP.Enabled = false
	rc.Receiver.ResultsFile = filepath.Join(dir, "results.jsonl")
	rxCtx, stopRx := context.WithCancel(context.Background())
	txCtx, stopTx := context.WithCancel(context.Background())
	defer stopTx()
	l := startLive(t, rxCtx, txCtx, liveScenario(6*time.Second), rc)

	first := l.First
	// Stop the receiver 0.6 s into the fourth interval: three are complete
	// at the sender (the third's End is on its way), the fourth is cut.
	time.Sleep(time.Until(time.Unix(first+3, 600e6)))
	stopRx()
	select {
	case err := <-l.RxDone:
		if err != nil {
			t.Fatalf("receiver stopped with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("receiver did not stop within 10 s")
	}
	got := l.Outcomes()
	for id := first; id < first+2; id++ {
		if got[id] != results.OutcomeMatched {
			t.Errorf("interval %d: outcome %q, want matched", id, got[id])
		}
	}
	// The third interval: its End was shipped about 50 ms after its end
	// and is normally in by the stop, or still on its way. Either way it
	// is reported: matched (and then in the results file, below, even if
	// it was held back for its successor's check), or without the
	// sender's sketch. Never dropped.
	third := got[first+2]
	if third != results.OutcomeMatched && third != results.OutcomeNoSender {
		t.Errorf("interval %d, whose End was in flight at the stop: outcome %q, want matched or %s", first+2, third, results.OutcomeNoSender)
	}
	if o, ok := got[first+3]; !ok || o == results.OutcomeMatched {
		t.Errorf("the interval cut by the stop: outcome %q (present %v), want it reported as incomplete", o, ok)
	}
	recs, err := eval.ReadResultsFile(rc.Receiver.ResultsFile)
	if err != nil {
		t.Fatalf("results file after the stop: %v", err)
	}
	perInterval := map[int64]int{}
	for _, r := range recs {
		perInterval[r.Interval]++
	}
	for id := first; id < first+2; id++ {
		if perInterval[id] == 0 {
			t.Errorf("interval %d missing from the results file", id)
		}
	}
	if n := perInterval[first+2]; (third == results.OutcomeMatched) != (n > 0) {
		t.Errorf("interval %d (outcome %q): %d records in the results file, want them exactly when matched", first+2, third, n)
	}
	if perInterval[first+3] != 0 {
		t.Errorf("the cut interval must not be in the results file as complete")
	}
	t.Logf("outcomes at stop: %v; results file: %d records %v", got, len(recs), perInterval)
}

// TestSenderStopFlushesOpenInterval: a sender stopped (SIGTERM) in the
// middle of an interval ships what it has of it, flagged partial, before it
// exits; the receiver reports that interval as partial (never as complete)
// and the ones before it as matched.
func TestSenderStopFlushesOpenInterval(t *testing.T) {
	rc := config.DefaultReceiver()
	rc.Receiver.Lateness = 2 * time.Second
	rc.PTP.Enabled = false
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txCtx, stopTx := context.WithCancel(ctx)
	l := startLive(t, ctx, txCtx, liveScenario(5*time.Second), rc)
	rpcTimeout := config.DefaultSender().Sender.RPCTimeout
	first := l.First
	time.Sleep(time.Until(time.Unix(first+2, 500e6))) // half way through the third interval
	stopTx()
	select {
	case err := <-l.TxDone:
		if err != nil {
			t.Fatalf("sender stopped with %v", err)
		}
	case <-time.After(2 * rpcTimeout):
		t.Fatal("sender did not stop")
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && l.Interval(first+2) == nil {
		time.Sleep(100 * time.Millisecond)
	}
	got := l.Outcomes()
	for id := first; id < first+2; id++ {
		if got[id] != results.OutcomeMatched {
			t.Errorf("interval %d: outcome %q, want matched", id, got[id])
		}
	}
	if got[first+2] != results.OutcomePartial {
		t.Errorf("interval cut by the sender's stop: outcome %q, want partial (flushed and flagged)", got[first+2])
	}
	t.Logf("outcomes: %v", got)
}
