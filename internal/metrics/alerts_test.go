package metrics

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/spike"
)

const rulesDir = "../../deploy/prometheus"

// TestAlertRules runs promtool on deploy/prometheus: the rules must load and
// their unit tests (alerts_test.yml) must pass.
func TestAlertRules(t *testing.T) {
	pt := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(pt, args...)
		cmd.Dir = rulesDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// TestAlertsUseExportedNames: every lds_ name in the rules and the dashboard
// is a series the daemons export, so a rename cannot silently break them.
func TestAlertsUseExportedNames(t *testing.T) {
	r := newReceiver(t, goldenConfig)
	r.SenderConnected("a", true)
	r.IntervalOutcome("a", results.OutcomeVoidedGap)
	k := capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443)
	r.ObserveInterval(goldenInterval(), []spike.Event{{Sender: "a", Key: k}, {Sender: "a", Key: k, Kind: spike.KindLoss}})
	r.SketchBytes("a", 1)
	r.EstimationDuration("a", time.Millisecond)
	r.BoundaryMisassigned("a")
	r.BoundaryWindow("a", time.Second)
	r.FrameError("a", "x")
	r.SetClock("sender", "a", "synced", 1, 1)
	r.CaptureCounters(1, map[string]uint64{"kernel": 1})
	r.ExportUp("ipfix", "192.0.2.10:4739", false)
	r.ExportSent("ipfix", "192.0.2.10:4739", 1)
	r.ExportDropped("ipfix", "192.0.2.10:4739", "queue_full", 1)
	r.ExportError("ipfix", "192.0.2.10:4739")
	r.ExportQueued("ipfix", "192.0.2.10:4739", 1)
	r.CaptureHealth().Set(1, 1, true)
	r.ResultsFileReasons([]string{"no_space"})
	r.LostList(&results.Interval{Sender: "a", LostList: &results.LostSummary{Reason: "overflow"}})
	r.Reordered(&results.Interval{Sender: "a", ReorderedRatio: results.Float(0.01)})
	s, err := NewSender(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.CaptureCounters(1, map[string]uint64{"kernel": 1})
	s.CaptureHealth().Set(1, 1, true)
	s.SetClock("synced", 1, 1)
	known := map[string]bool{}
	for _, n := range append(ldsNames(t, r.Registry()), ldsNames(t, s.Registry())...) {
		known[n] = true
	}
	// Histogram families expose _bucket, _sum and _count series.
	for n := range known {
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			known[n+suf] = true
		}
	}
	name := regexp.MustCompile(`\blds_[a-z0-9_]+`)
	for _, file := range []string{filepath.Join(rulesDir, "alerts.yml"), "../../deploy/grafana/lds.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range name.FindAllString(string(b), -1) {
			if !known[n] {
				t.Errorf("%s uses %s, which no daemon exports", file, n)
			}
		}
	}
}
