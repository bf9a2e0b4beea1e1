package receiver_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/results"
)

// flowsSource is a live interface that sees flows distinct IPv4/UDP flows
// in each of intervals consecutive intervals (one packet a flow, spread
// evenly over the interval, boundaries included), then nothing.
type flowsSource struct {
	ctx              context.Context
	start, t         int64
	flows, intervals int
	i, j             int
	frame            []byte
}

func newFlowsSource(ctx context.Context, start, t int64, flows, intervals int) *flowsSource {
	f := make([]byte, 14+20+8+32)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	copy(ip[16:], []byte{192, 0, 2, 1})
	binary.BigEndian.PutUint16(ip[22:], 443)
	binary.BigEndian.PutUint16(ip[24:], 8+32)
	return &flowsSource{ctx: ctx, start: start, t: t, flows: flows, intervals: intervals, frame: f}
}

func (s *flowsSource) ReadPacket([]byte) ([]byte, int64, int, error) {
	if s.i >= s.intervals {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-s.ctx.Done():
		}
		return nil, 0, 0, capture.ErrTimeout
	}
	ip := s.frame[14:]
	j := uint32(s.j)
	binary.BigEndian.PutUint32(ip[12:], 10<<24|j>>4)        // source address
	binary.BigEndian.PutUint16(ip[20:], uint16(40000+j&15)) // source port
	binary.BigEndian.PutUint32(ip[28:], uint32(s.i))        // payload: distinct packets
	binary.BigEndian.PutUint16(ip[10:], 0)
	var sum uint32
	for k := 0; k < 20; k += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[k:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	ts := s.start + int64(s.i)*s.t + int64(s.j)*(s.t/int64(s.flows))
	if s.j++; s.j == s.flows {
		s.i, s.j = s.i+1, 0
	}
	return s.frame, ts, len(s.frame), nil
}
func (s *flowsSource) LinkType() layers.LinkType         { return layers.LinkTypeEthernet }
func (s *flowsSource) Stats() (capture.DropStats, error) { return capture.DropStats{}, nil }
func (s *flowsSource) Close() error                      { return nil }

// vmHWM is this process's peak resident set, bytes.
func vmHWM(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// TestReceiverMemoryWaitingForSender is the receiver's worst case that
// replay cannot reach: sketch.max_flows (1,048,576) flows in every one of
// ten intervals and no sender, so that full flow tables pile up waiting
// for it until receiver.max_pending gives the oldest up. The process's
// peak resident set must stay under the bound of config.MemoryBound for
// the same configuration. Heavy (~3 GB, a minute): run by make
// bench-memory, or with LDS_BENCH_MEMORY=1.
func TestReceiverMemoryWaitingForSender(t *testing.T) {
	if os.Getenv("LDS_BENCH_MEMORY") != "1" {
		t.Skip("heavy (1M flows in each of 10 intervals, ~3 GB): set LDS_BENCH_MEMORY=1 or run make bench-memory")
	}
	const intervals = 10
	rc := config.DefaultReceiver()
	rc.PTP.Enabled = false
	rc.Sketch.Seed = "5f0c6e1a9b2d4c3e8f7a6b5c4d3e2f10" // not the example seed, which a daemon may refuse
	rc.Receiver.TLS.Plaintext = true
	rc.Receiver.Lateness = time.Hour            // only max_pending gives intervals up
	rc.Receiver.MaxIntervalSkew = 2 * time.Hour // at least lateness + 2 intervals (Validate)
	rc.Receiver.MaxPending = 4
	rc.Sketch.Estimator = "paper"
	rc.Capture.Source.Kind, rc.Capture.Source.File = "file", "unused" // Options.Sources replaces it
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	flows := rc.Sketch.MaxFlows
	T := int64(rc.Interval)
	start := (time.Now().Add(-time.Hour).UnixNano()/T + 1) * T
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var published, noSender atomic.Int64
	rx, err := receiver.New(rc, receiver.Options{Sources: []capture.Source{newFlowsSource(ctx, start, T, flows, intervals)},
		Listener: lis, NoHTTP: true, CaptureStart: start, OnInterval: func(iv *results.Interval) {
			published.Add(1)
			if iv.Outcome == results.OutcomeNoSender {
				noSender.Add(1)
			}
		}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rx.Run(ctx) }()
	want := int64(intervals - rc.Receiver.MaxPending)
	for published.Load() < want {
		select {
		case err := <-done:
			t.Fatalf("receiver ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("only %d intervals given up in 10 minutes, want %d", published.Load(), want)
		case <-time.After(100 * time.Millisecond):
		}
	}
	peak := vmHWM(t)
	b := rc.MemoryBound(config.MemoryInput{PPS: float64(flows) / rc.Interval.Seconds()})
	t.Logf("%d flows an interval, %d intervals given up (no sender), %d waiting: peak RSS %d MiB, bound %d MiB (%.1f %%)",
		flows, noSender.Load(), rc.Receiver.MaxPending, peak>>20, b.Peak>>20, 100*float64(peak)/float64(b.Peak))
	if peak > b.Peak {
		t.Errorf("peak RSS %d MiB passes the bound %d MiB", peak>>20, b.Peak>>20)
	}
	cancel()
	<-done
}
