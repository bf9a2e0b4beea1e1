package replay

import (
	"os"
	"strings"
	"testing"
	"time"
)

// logBuffer collects a replay's log.
type logBuffer struct{ strings.Builder }

// TestReplayTruncatedCaptures: a receiver capture stopped mid-write (its
// last record cut short, as when tcpdump is killed) replays to the end:
// every complete record is used, the cut is warned of with what was
// dropped, and every (interval, flow) of the exact join of the cut file
// has its record. (Cutting the sender's capture too would leave its last
// packet at the receiver only, which the helper's join refuses; the
// capture tests cut both kinds of file anywhere.)
func TestReplayTruncatedCaptures(t *testing.T) {
	sc := scenario(21, 0)
	sc.Duration = 2 * time.Second
	var logs logBuffer
	cut := map[string]int{}
	r := replayScenarioLog(t, sc, func(o *Options) {
		for i, p := range []string{o.ReceiverPcap} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			n := 20 + i // inside the last record's header and data
			if err := os.Truncate(p, fi.Size()-int64(n)); err != nil {
				t.Fatal(err)
			}
			cut[p] = n
		}
	}, &logs)
	if len(r.truth.Truncated) != 1 {
		t.Fatalf("the join saw %d cut captures, want 1", len(r.truth.Truncated))
	}
	for _, te := range r.truth.Truncated {
		if _, ok := cut[te.Path]; !ok || te.Record < 2 {
			t.Errorf("join: %v", te)
		}
	}
	out := logs.String()
	for p := range cut {
		if !strings.Contains(out, "cut short") || !strings.Contains(out, "file="+p) || !strings.Contains(out, "records_dropped=1") {
			t.Errorf("no warning of %s cut short:\n%.3000s", p, out)
		}
	}
	for id, f := range r.truth.Flows {
		if _, ok := r.recs[id]; !ok {
			t.Errorf("flow %v interval %d (%d packets) has no record", id.Key, id.Interval, f.Sent)
		}
	}
	if len(r.recs) != len(r.truth.Flows) {
		t.Errorf("%d records for %d true (interval, flow) pairs", len(r.recs), len(r.truth.Flows))
	}
}
