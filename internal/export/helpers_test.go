package export_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/replay"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/test/testutil"
	"github.com/lds-net/lds/tools/eval"
	"github.com/lds-net/lds/tools/gen"
)

// captures generates a small pair of captures with delays and some loss:
// every record kind (with and without a delay, lossy) appears.
func captures(t *testing.T, dir string, seed uint64) (a, b string) {
	t.Helper()
	sc := gen.DefaultScenario()
	sc.Seed = seed
	sc.Flows = 120
	sc.RatePPS = 4000
	sc.Duration = 3 * time.Second
	sc.Classes = []gen.Class{{Name: "c", Weight: 1,
		Delay: gen.DelayModel{Kind: gen.DelayUniform, Min: 200 * time.Microsecond, Max: 20 * time.Millisecond},
		Loss:  gen.LossModel{Kind: "uniform", P: 0.01}}}
	// A few flows lose every packet: their records carry the exact loss
	// and no delay, so the collectors see records of both kinds (every
	// other lossy flow's cells are repaired from the lost-packet list).
	sc.HeavyLoss = gen.HeavyLoss{Fraction: 0.05, P: 1}
	a, b = filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := gen.Generate(ctx, sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, quiet()); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// replayTo runs `ldsctl replay`'s pipeline with the export section set by
// configure and returns the JSONL it wrote.
func replayTo(t *testing.T, dir, a, b string, configure func(*config.Receiver)) []results.FlowRecord {
	t.Helper()
	cfg, err := replay.Load("")
	if err != nil {
		t.Fatal(err)
	}
	configure(&cfg)
	if err := cfg.ValidateReplay(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "results.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := replay.Run(ctx, replay.Options{Config: cfg, SenderPcap: a, ReceiverPcap: b, Out: out}, quiet()); err != nil {
		t.Fatal(err)
	}
	recs, err := eval.ReadResultsFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatal("replay published no flow record")
	}
	return recs
}

// recKey identifies a record: interval and 5-tuple.
type recKey struct {
	interval     int64
	src, dst     string
	sport, dport uint16
	proto        uint8
}

// setAddrs gives r's flow the addresses src and dst, keeping its ports and protocol.
func setAddrs(r *results.FlowRecord, src, dst string) {
	r.Key = capture.MustParseFlowKey(src, dst, r.Key.Proto, r.Key.SPort, r.Key.DPort)
}

func keyOf(r *results.FlowRecord) recKey {
	return recKey{r.Interval, r.Key.SrcAddr().String(), r.Key.DstAddr().String(), r.Key.SPort, r.Key.DPort, r.Key.Proto}
}

// lookBin finds a Debian binary or skips loudly (fails under LDS_E2E_REQUIRED=1).
func lookBin(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testutil.SkipOrFail(t, "%s not found (Debian package %s; make deps installs it)", name, pkg)
	}
	return p
}

// freeUDPPort returns a loopback UDP port that was free a moment ago.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// startOnUDPPort starts a collector on a free loopback UDP port and waits
// until it has bound it (binding it ourselves fails with EADDRINUSE); a
// port taken in between by another test's process is retried.
func startOnUDPPort(t *testing.T, start func(port int) (<-chan struct{}, *lockedBuf)) (int, *lockedBuf) {
	t.Helper()
	for range 5 {
		port := freeUDPPort(t)
		exited, log := start(port)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
			if err == nil {
				c.Close()
			} else if errors.Is(err, syscall.EADDRINUSE) {
				select {
				case <-exited:
				default:
					return port, log
				}
			}
			select {
			case <-exited:
			case <-time.After(50 * time.Millisecond):
				continue
			}
			break
		}
		t.Logf("collector did not come up on UDP port %d; retrying on another:\n%s", port, log.String())
	}
	t.Fatal("collector did not start on a UDP port in 5 attempts")
	return 0, nil
}

// startProc runs a collector until the test ends; exited closes when it does.
func startProc(t *testing.T, name string, args ...string) (<-chan struct{}, *lockedBuf) {
	t.Helper()
	cmd := exec.Command(name, args...)
	out := &lockedBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // ours, by pid
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return exited, out
}

// delayUS is the RFC 9951 mean a record's delay_ns gives.
func delayUS(r *results.FlowRecord) (uint64, bool) {
	if r.DelayNS == nil || *r.DelayNS < 0 {
		return 0, false
	}
	return uint64(math.Round(*r.DelayNS / 1e3)), true
}

func packetsOf(r *results.FlowRecord) uint64 { return uint64(math.Round(r.Packets)) }

func sumUS(r *results.FlowRecord) uint64 {
	return uint64(math.Round(*r.DelayNS / 1e3 * float64(packetsOf(r))))
}

func describe(r *results.FlowRecord) string {
	return fmt.Sprintf("interval %d %s:%d -> %s:%d proto %d", r.Interval, r.Key.SrcAddr(), r.Key.SPort, r.Key.DstAddr(), r.Key.DPort, r.Key.Proto)
}

// lockedBuf is a goroutine-safe output buffer.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
