package receiver_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/receiver"
)

// idleSource is a live interface that never sees a packet.
type idleSource struct{ ctx context.Context }

func (s idleSource) ReadPacket([]byte) ([]byte, int64, int, error) {
	select {
	case <-time.After(20 * time.Millisecond):
	case <-s.ctx.Done():
	}
	return nil, 0, 0, capture.ErrTimeout
}
func (idleSource) LinkType() layers.LinkType         { return layers.LinkTypeEthernet }
func (idleSource) Stats() (capture.DropStats, error) { return capture.DropStats{}, nil }
func (idleSource) Close() error                      { return nil }

// logWatch is a slog handler that reports when a message is logged.
type logWatch struct {
	slog.Handler
	msg  string
	seen chan struct{}
}

func (h *logWatch) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.seen <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (h *logWatch) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logWatch) WithGroup(string) slog.Handler            { return h }

// TestSIGHUPReopensResultsFile sends a real SIGHUP to this process while a
// live receiver runs: the receiver (not the signal's default action, which
// would end the process) reopens its results file, which creates it again
// at its path after logrotate's create mode moved it away.
func TestSIGHUPReopensResultsFile(t *testing.T) {
	dir := t.TempDir()
	rc := config.DefaultReceiver()
	rc.PTP.Enabled = false
	rc.Sketch.Seed = "5f0c6e1a9b2d4c3e8f7a6b5c4d3e2f10" // not the example seed, which a daemon may refuse
	rc.Receiver.TLS.Plaintext = true
	rc.Receiver.ResultsFile = filepath.Join(dir, "results.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watch := &logWatch{msg: "results file reopened", seen: make(chan struct{}, 1)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rx, err := receiver.New(rc, receiver.Options{Sources: []capture.Source{idleSource{ctx}}, Listener: lis, HTTPListener: hl}, slog.New(watch))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rx.Run(ctx) }()
	// The metrics endpoint answers once Run has passed its signal set-up.
	url := "http://" + hl.Addr().String() + "/metrics"
	var body []byte
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("receiver ended before serving: %v", err)
		case <-ctx.Done():
			t.Fatal("metrics endpoint never answered")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !strings.Contains(string(body), `lds_results_write_errors_total{reason="no_space"} 0`) {
		t.Errorf("the write error series are not exported from the start")
	}
	if err := os.Rename(rc.Receiver.ResultsFile, rc.Receiver.ResultsFile+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watch.seen:
	case err := <-done:
		t.Fatalf("receiver ended at SIGHUP: %v", err)
	case <-ctx.Done():
		t.Fatal("no reopen logged after SIGHUP")
	}
	if _, err := os.Stat(rc.Receiver.ResultsFile); err != nil {
		t.Fatalf("after SIGHUP the results file was not created again: %v", err)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("receiver: %v", err)
	}
}
