package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// TestCaptureHealth: no series before a live source reports, then the
// oversize counter, the outage counter and the link gauge, at both daemons.
func TestCaptureHealth(t *testing.T) {
	s, err := NewSender(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReceiver(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"lds_capture_oversize_frames_total", "lds_capture_link_down_total", "lds_capture_link_up"}
	for _, h := range []*CaptureHealth{s.CaptureHealth(), r.CaptureHealth()} {
		if n := testutil.CollectAndCount(h, names...); n != 0 {
			t.Fatalf("%d series before any report, want none", n)
		}
		h.Set(7, 2, false)
		want := `
# HELP lds_capture_link_down_total Outages of the capture interface (down, no carrier or missing), including one found at start.
# TYPE lds_capture_link_down_total counter
lds_capture_link_down_total 2
# HELP lds_capture_link_up 1 while the capture interface is up and running, else 0.
# TYPE lds_capture_link_up gauge
lds_capture_link_up 0
# HELP lds_capture_oversize_frames_total Captured frames longer than the interface MTU plus the link header: packets coalesced (GRO/LRO) before the capture.
# TYPE lds_capture_oversize_frames_total counter
lds_capture_oversize_frames_total 7
`
		if err := testutil.CollectAndCompare(h, strings.NewReader(want), names...); err != nil {
			t.Error(err)
		}
	}
	// Registered on both daemons' registries.
	for name, reg := range map[string]interface {
		Gather() ([]*dto.MetricFamily, error)
	}{"sender": s.Registry(), "receiver": r.Registry()} {
		if n, err := testutil.GatherAndCount(reg, names...); err != nil || n != 3 {
			t.Errorf("%s registry: %d capture health series (%v), want 3", name, n, err)
		}
	}
}
