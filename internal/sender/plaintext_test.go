package sender

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/config"
)

// TestPlaintextRefusedOffLoopback: a sender configured without TLS refuses
// a receiver address that is not loopback, naming the key; loopback is fine.
func TestPlaintextRefusedOffLoopback(t *testing.T) {
	tests := []struct {
		receiver string
		ok       bool
	}{
		{"127.0.0.1:7420", true},
		{"[::1]:7420", true},
		{"localhost:7420", true},
		{"192.0.2.10:7420", false},
		{"[2001:db8::1]:7420", false},
		{"receiver.example:7420", false},
		{"0.0.0.0:7420", false},
	}
	for _, tc := range tests {
		t.Run(tc.receiver, func(t *testing.T) {
			cfg := config.DefaultSender()
			cfg.Sender.ID = "tap-a"
			cfg.Sketch.Seed = "6b0e2f91c4d7a358e1f0b2c9d4a76e13"
			cfg.Sender.Receiver = tc.receiver
			cfg.Sender.TLS.Plaintext = true
			cfg.PTP.Enabled = false
			cfg.Capture.Source.Kind, cfg.Capture.Source.File = "file", "(test)"
			if err := cfg.Validate(); err != nil {
				t.Fatalf("configuration: %v", err)
			}
			_, err := New(cfg, Options{Version: "test", NoHTTP: true, Replay: true}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if tc.ok && err != nil {
				t.Errorf("plaintext to loopback %s refused: %v", tc.receiver, err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "sender.tls.plaintext")) {
				t.Errorf("plaintext to %s: New = %v, want a refusal naming sender.tls.plaintext", tc.receiver, err)
			}
		})
	}
}
