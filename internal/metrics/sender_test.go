package metrics

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/bcrypt"
)

func TestSenderSeries(t *testing.T) {
	s, err := NewSender(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.IntervalSent(1000)
	s.IntervalSent(500)
	s.IntervalResent(1000)
	s.IntervalAcked()
	s.IntervalDropped()
	s.BufferDepth(3)
	s.Connected(true)
	s.CaptureCounters(9000, map[string]uint64{"kernel": 4})
	s.SetClock("synced", -250, 3000)
	want := `
# HELP lds_sender_intervals_sent_total Intervals sent to the receiver for the first time.
# TYPE lds_sender_intervals_sent_total counter
lds_sender_intervals_sent_total 2
# HELP lds_sender_intervals_resent_total Intervals sent again after a reconnect.
# TYPE lds_sender_intervals_resent_total counter
lds_sender_intervals_resent_total 1
# HELP lds_sender_intervals_acked_total Intervals the receiver acknowledged.
# TYPE lds_sender_intervals_acked_total counter
lds_sender_intervals_acked_total 1
# HELP lds_sender_intervals_dropped_total Unacknowledged intervals dropped because the resend buffer was full.
# TYPE lds_sender_intervals_dropped_total counter
lds_sender_intervals_dropped_total 1
# HELP lds_sender_sent_bytes_total Bytes of frames sent to the receiver.
# TYPE lds_sender_sent_bytes_total counter
lds_sender_sent_bytes_total 2500
# HELP lds_sender_buffered_intervals Intervals held awaiting an acknowledgement.
# TYPE lds_sender_buffered_intervals gauge
lds_sender_buffered_intervals 3
# HELP lds_sender_connected 1 while the stream to the receiver is up, else 0.
# TYPE lds_sender_connected gauge
lds_sender_connected 1
# HELP lds_capture_packets_total Packets this daemon's capture saw.
# TYPE lds_capture_packets_total counter
lds_capture_packets_total 9000
# HELP lds_capture_drops_total Packets this daemon's capture lost or left out, by reason.
# TYPE lds_capture_drops_total counter
lds_capture_drops_total{reason="kernel"} 4
# HELP lds_ptp_offset_seconds PTP offset from the grandmaster reported by ptp4l.
# TYPE lds_ptp_offset_seconds gauge
lds_ptp_offset_seconds -2.5e-07
# HELP lds_ptp_error_bound_seconds Bound on this clock's error.
# TYPE lds_ptp_error_bound_seconds gauge
lds_ptp_error_bound_seconds 3e-06
# HELP lds_ptp_state 1 for the current PTP state (only the current state has a series).
# TYPE lds_ptp_state gauge
lds_ptp_state{state="synced"} 1
`
	names := ldsNames(t, s.Registry())
	if len(names) != 12 {
		t.Errorf("sender exports %d lds_ families, the test expects 12: %v", len(names), names)
	}
	if err := testutil.GatherAndCompare(s.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// The state changes: only the current one has a series.
	s.SetClock("holdover", 0, 0)
	if got := series(t, s.Registry(), "lds_ptp_state"); len(got) != 1 || got["state=holdover"] != 1 {
		t.Fatalf("lds_ptp_state = %v, want only state=holdover", got)
	}
}

func get(t *testing.T, url, user, pass string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSenderOwnClockFromStart: with a clock source, the sender's PTP
// series are there before any interval and follow the source live.
func TestSenderOwnClockFromStart(t *testing.T) {
	s, err := NewSender(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := OwnClock{State: "unknown"}
	s.SetOwnClock(func() OwnClock { return now })
	steps := []struct {
		clock      OwnClock
		wantState  map[string]float64
		wantOffset map[string]float64
	}{
		{OwnClock{State: "unknown"}, map[string]float64{"state=unknown": 1}, map[string]float64{}},
		{OwnClock{State: "synced", OffsetNS: 800, HaveOffset: true}, map[string]float64{"state=synced": 1}, map[string]float64{"": 8e-07}},
	}
	for i, st := range steps {
		now = st.clock
		if got := series(t, s.Registry(), "lds_ptp_state"); !maps.Equal(got, st.wantState) {
			t.Errorf("step %d: lds_ptp_state %v, want %v", i, got, st.wantState)
		}
		if got := series(t, s.Registry(), "lds_ptp_offset_seconds"); !maps.Equal(got, st.wantOffset) {
			t.Errorf("step %d: lds_ptp_offset_seconds %v, want %v", i, got, st.wantOffset)
		}
	}
	// SetClock (each shipped interval) does not decide state and offset.
	s.SetClock("holdover", 5, 0)
	if got := series(t, s.Registry(), "lds_ptp_state"); !maps.Equal(got, map[string]float64{"state=synced": 1}) {
		t.Errorf("after SetClock: lds_ptp_state %v, want the live state", got)
	}
}

func TestServe(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webCfg, []byte("basic_auth_users:\n  ops: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		webConfig string
		user      string
		want      int
	}{
		{"plain", "", "", http.StatusOK},
		{"basic auth, no credentials", webCfg, "", http.StatusUnauthorized},
		{"basic auth, credentials", webCfg, "ops", http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSender(DefaultConfig(), nil)
			if err != nil {
				t.Fatal(err)
			}
			s.Connected(true)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.WebConfig = tc.webConfig
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			extra := map[string]http.Handler{"/api/": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "api here") })}
			go func() { done <- ServeListener(ctx, l, cfg, s.Registry(), extra, nil) }()
			base := "http://" + l.Addr().String()
			code, body := get(t, base+"/metrics", tc.user, "secret")
			if code != tc.want {
				t.Fatalf("/metrics: status %d, want %d", code, tc.want)
			}
			if code == http.StatusOK && !strings.Contains(body, "lds_sender_connected 1") {
				t.Fatalf("/metrics body lacks lds_sender_connected 1:\n%s", body)
			}
			if code, body := get(t, base+"/api/v1/x", tc.user, "secret"); code != tc.want || (code == 200 && body != "api here") {
				t.Fatalf("/api/: %d %q", code, body)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Serve returned %v after cancel, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return after cancel")
			}
		})
	}
}

func TestServeRefusesBadSetup(t *testing.T) {
	reg := newReceiver(t, nil).Registry()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	if err := Serve(context.Background(), cfg, reg, map[string]http.Handler{"/metrics": http.NotFoundHandler()}, nil); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("Serve with a handler on /metrics = %v, want a refusal", err)
	}
	cfg.WebConfig = "/nonexistent/web.yml"
	if err := Serve(context.Background(), cfg, reg, nil, nil); err == nil || !strings.Contains(err.Error(), "metrics.web_config") {
		t.Fatalf("Serve with a missing web config = %v, want an error naming metrics.web_config", err)
	}
}
