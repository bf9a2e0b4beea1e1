package ptp

import (
	"strings"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	cfg := DefaultConfig() // limit 100µs, grace 5s
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	good := Status{
		Reachable:          true,
		GrandmasterPresent: true,
		GrandmasterID:      "001122.3344.556677",
		PortState:          "SLAVE",
		OffsetNS:           1500,
		MeanPathDelayNS:    800,
		OffsetMeasured:     true,
		StepsRemoved:       1,
		LastOK:             now.Add(-200 * time.Millisecond),
		IngressTimeNS:      1,
		OffsetUpdated:      now.Add(-200 * time.Millisecond),
	}
	locked := cfg
	locked.RequireLocked = true
	disabled := cfg
	disabled.Enabled = false
	withPHC := cfg
	withPHC.PHC = "/dev/ptp0"

	tests := []struct {
		name string
		cfg  Config
		mod  func(*Status)
		want State
	}{
		{"all good", cfg, func(*Status) {}, StateSynced},
		{"phc: system clock follows the PHC", withPHC, func(s *Status) { s.PHCOffsetNS = -40_000 }, StateSynced},
		{"phc: system clock 150µs off the PHC", withPHC, func(s *Status) { s.PHCOffsetNS = 150_000 }, StateUnsynced},
		{"phc: device unreadable", withPHC, func(s *Status) { s.PHCErr = "no such device" }, StateUnsynced},
		{"phc off: offset ignored", cfg, func(s *Status) { s.PHCOffsetNS = 1e9 }, StateSynced},
		{"disabled wins over everything", disabled, func(s *Status) { *s = Status{} }, StateDisabled},
		{"never answered", cfg, func(s *Status) { *s = Status{Err: "no such file"} }, StateUnknown},
		{"uncalibrated accepted (free_running)", cfg, func(s *Status) { s.PortState = "UNCALIBRATED" }, StateSynced},
		{"uncalibrated refused when require_locked", locked, func(s *Status) { s.PortState = "UNCALIBRATED" }, StateUnsynced},
		{"slave with require_locked", locked, func(*Status) {}, StateSynced},
		{"listening with stale gmPresent", cfg, func(s *Status) { s.PortState = "LISTENING" }, StateUnsynced},
		{"master", cfg, func(s *Status) { s.PortState = "MASTER" }, StateUnsynced},
		{"faulty", cfg, func(s *Status) { s.PortState = "FAULTY" }, StateUnsynced},
		{"empty port state", cfg, func(s *Status) { s.PortState = "" }, StateUnsynced},
		{"no grandmaster", cfg, func(s *Status) { s.GrandmasterPresent = false }, StateUnsynced},
		{"offset at limit", cfg, func(s *Status) { s.OffsetNS = 100_000 }, StateSynced},
		{"offset just over limit", cfg, func(s *Status) { s.OffsetNS = 100_001 }, StateUnsynced},
		{"negative offset at limit", cfg, func(s *Status) { s.OffsetNS = -100_000 }, StateSynced},
		{"negative offset over limit", cfg, func(s *Status) { s.OffsetNS = -100_001 }, StateUnsynced},
		{"min int64 offset", cfg, func(s *Status) { s.OffsetNS = -1 << 63 }, StateUnsynced},
		{"no sync received yet", cfg, func(s *Status) { s.IngressTimeNS = 0 }, StateUnsynced},
		{"offset not measured in this acquisition", cfg, func(s *Status) { s.OffsetMeasured = false }, StateUnsynced},
		{"offset freshness unknown", cfg, func(s *Status) { s.OffsetUpdated = time.Time{} }, StateUnsynced},
		{"offset stale beyond grace", cfg, func(s *Status) { s.OffsetUpdated = now.Add(-5*time.Second - time.Nanosecond) }, StateUnsynced},
		{"offset exactly grace old", cfg, func(s *Status) { s.OffsetUpdated = now.Add(-5 * time.Second) }, StateSynced},
		{"unreachable within grace holds", cfg, func(s *Status) {
			s.Reachable = false
			s.LastOK = now.Add(-4 * time.Second)
			s.OffsetUpdated = s.LastOK
		}, StateSynced},
		{"unreachable beyond grace", cfg, func(s *Status) {
			s.Reachable = false
			s.LastOK = now.Add(-5*time.Second - time.Millisecond)
		}, StateUnsynced},
		{"unreachable within grace but held answer bad", cfg, func(s *Status) {
			s.Reachable = false
			s.OffsetNS = 1_000_000
		}, StateUnsynced},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			tc.mod(&s)
			if got := Judge(s, tc.cfg, now); got != tc.want {
				t.Fatalf("Judge = %q, want %q (status %+v)", got, tc.want, s)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr []string // substrings; nil = valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"disabled ignores the rest", func(c *Config) { *c = Config{} }, nil},
		{"zero poll", func(c *Config) { c.PollInterval = 0 }, []string{"ptp.poll_interval: must be > 0"}},
		{"negative timeout", func(c *Config) { c.Timeout = -1 }, []string{"ptp.timeout: must be > 0"}},
		{"zero limit", func(c *Config) { c.OffsetLimit = 0 }, []string{"ptp.offset_limit: must be > 0"}},
		{"zero grace", func(c *Config) { c.Grace = 0 }, []string{"ptp.grace: must be > 0"}},
		{"grace below poll", func(c *Config) { c.Grace = 500 * time.Millisecond }, []string{"ptp.grace: must be >= ptp.poll_interval"}},
		{"no socket", func(c *Config) { c.Socket = "" }, []string{"ptp.socket: must be set"}},
		{"socket too long", func(c *Config) { c.Socket = "/" + strings.Repeat("x", 120) }, []string{"ptp.socket: path is 121 bytes"}},
		{"client dir too long", func(c *Config) { c.ClientDir = "/" + strings.Repeat("d", 90) }, []string{"ptp.client_dir:", "choose a shorter directory"}},
		{"client dir fits", func(c *Config) { c.ClientDir = "/run/lds-receiver" }, nil},
		{"several at once", func(c *Config) { c.Timeout = 0; c.OffsetLimit = 0 }, []string{"ptp.timeout", "ptp.offset_limit"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want error containing %q, got nil", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if _, nerr := New(c, nil); nerr == nil {
				t.Errorf("New accepted an invalid config")
			}
		})
	}
}
