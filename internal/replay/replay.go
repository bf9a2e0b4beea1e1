// Package replay runs the sender's and the receiver's pipelines in one
// process from two captures, joined by the real gRPC protocol on a loopback
// listener (docs/replay.md: `ldsctl replay`).
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sender"
)

// Options of one replay.
type Options struct {
	Config       config.Receiver // common keys are shared by both pipelines
	SenderPcap   string
	ReceiverPcap string
	Out          string // results JSONL ("" = none)
	LostOut      string // lost-packet list JSONL ("" = none; docs/results.md, "Lost packets")
	Version      string
	Progress     io.Writer // progress lines (nil = none)
	// FirstPartial: the captures began mid-traffic, so the first interval
	// is flagged partial. By default a capture file is taken as complete
	// from the start of its first packet's interval.
	FirstPartial bool
	OnInterval   func(*results.Interval)
	// AllowReversed replays captures whose packets reach the receiver's
	// tap before the sender's (refused by default: swapped captures).
	AllowReversed bool
	// NoLostRepair is the receiver's (receiver.Options): tests measure
	// what the repair of lossy cells changes.
	NoLostRepair bool
}

// Summary of a replay.
type Summary struct {
	Intervals map[results.Outcome]int
	Flows     int // flow records published
	// SketchBytes is what the sender shipped for the complete intervals
	// (sketch chunks and boundary lists), the cost lds pays.
	SketchBytes uint64
	Elapsed     time.Duration
	// Exported and ExportDropped count the flow records the export
	// section's exporters sent and dropped (all zero without exporters).
	Exported, ExportDropped float64
}

// Load reads a replay configuration: a receiver file (or defaults), with
// what replay needs forced: plaintext on loopback, no PTP.
func Load(path string) (config.Receiver, error) {
	c := config.DefaultReceiver()
	if path != "" {
		if err := loadInto(path, &c); err != nil {
			return c, err
		}
	}
	c.Receiver.TLS.Plaintext = true
	c.Receiver.Listen = "127.0.0.1:0"
	c.Receiver.Senders = nil
	c.PTP.Enabled = false
	// The captures come from the command line, not from capture.source.
	c.Capture.Source.Kind, c.Capture.Source.File = "file", "(replay: --sender-pcap / --receiver-pcap)"
	return c, c.ValidateReplay()
}

func loadInto(path string, c *config.Receiver) error {
	r, err := openConfig(path)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	return config.Decode(r, c, path)
}

// Run replays the two captures and returns once every interval is final.
func Run(ctx context.Context, opt Options, log *slog.Logger) (Summary, error) {
	t0 := time.Now()
	sum := Summary{Intervals: map[results.Outcome]int{}}
	if !opt.AllowReversed {
		if err := checkDirection(opt.Config, opt.SenderPcap, opt.ReceiverPcap); err != nil {
			return sum, err
		}
	}
	start, err := captureStart(opt.SenderPcap, opt.Config.Interval.Nanoseconds(), opt.FirstPartial)
	if err != nil {
		return sum, err
	}
	sa, err := capture.OpenFile(opt.SenderPcap)
	if err != nil {
		return sum, fmt.Errorf("--sender-pcap: %w", err)
	}
	defer func() { _ = sa.Close() }()
	sb, err := capture.OpenFile(opt.ReceiverPcap)
	if err != nil {
		return sum, fmt.Errorf("--receiver-pcap: %w", err)
	}
	defer func() { _ = sb.Close() }()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return sum, fmt.Errorf("replay: loopback listener: %w", err)
	}
	rc := opt.Config
	rc.Receiver.ResultsFile = opt.Out
	rc.Receiver.LostFile = opt.LostOut
	if opt.LostOut != "" && opt.LostOut != "-" {
		if err := os.Truncate(opt.LostOut, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return sum, fmt.Errorf("--lost-out: %w", err)
		}
	}
	if opt.Out != "" && opt.Out != "-" {
		// A replay's output is its own: start the file afresh (the daemon appends).
		if err := os.Truncate(opt.Out, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return sum, fmt.Errorf("--out: %w", err)
		}
	}
	var mu sync.Mutex
	last := time.Now()
	rx, err := receiver.New(rc, receiver.Options{Version: opt.Version, Sources: []capture.Source{sb}, Listener: lis,
		NoHTTP: true, Replay: true, CaptureStart: start, ExportBlocking: true, NoLostRepair: opt.NoLostRepair,
		OnInterval: func(iv *results.Interval) {
			mu.Lock()
			defer mu.Unlock()
			sum.Intervals[iv.Outcome]++
			if iv.Outcome == results.OutcomeMatched {
				sum.Flows += len(iv.Flows)
			}
			sum.SketchBytes += iv.SketchBytes
			if opt.Progress != nil && time.Since(last) > 200*time.Millisecond {
				last = time.Now()
				fmt.Fprintf(opt.Progress, "\rreplay: %d intervals final, %d flow records, interval %d", total(sum.Intervals), sum.Flows, iv.Interval)
			}
			if opt.OnInterval != nil {
				opt.OnInterval(iv)
			}
		}}, log.With("side", "receiver"))
	if err != nil {
		return sum, err
	}
	sc := config.DefaultSender()
	sc.Common = rc.Common
	sc.Sender.ID = "replay"
	sc.Sender.Receiver = lis.Addr().String()
	sc.Sender.TLS.Plaintext = true
	sc.Sender.ResendBuffer = max(sc.Sender.ResendBuffer, rc.Receiver.MaxPending)
	if err := sc.ValidateReplay(); err != nil {
		return sum, err
	}
	tx, err := sender.New(sc, sender.Options{Version: opt.Version, Sources: []capture.Source{sa}, NoHTTP: true,
		Replay: true, CaptureStart: start, FailFast: true}, log.With("side", "sender"))
	if err != nil {
		return sum, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return rx.Run(gctx) })
	g.Go(func() error { return tx.Run(gctx) })
	err = g.Wait()
	sum.Exported, sum.ExportDropped = rx.Metrics().ExportTotals()
	if opt.Progress != nil {
		fmt.Fprintf(opt.Progress, "\rreplay: %d intervals final, %d flow records, %.1fs\n", total(sum.Intervals), sum.Flows, time.Since(t0).Seconds())
	}
	sum.Elapsed = time.Since(t0)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return sum, err
}

func total(m map[results.Outcome]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// captureStart decides when the sender's capture is taken to have begun:
// at the start of the first packet's interval (complete), or at the packet
// itself (the first interval is partial).
func captureStart(path string, t int64, partial bool) (int64, error) {
	src, err := capture.OpenFile(path)
	if err != nil {
		return 0, fmt.Errorf("--sender-pcap: %w", err)
	}
	defer func() { _ = src.Close() }()
	buf := make([]byte, 65536)
	_, ts, _, err := src.ReadPacket(buf)
	if errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("--sender-pcap %s: no packets", path)
	}
	if err != nil {
		return 0, fmt.Errorf("--sender-pcap %s: %w", path, err)
	}
	if partial {
		return ts, nil
	}
	return interval.ID(ts, t) * t, nil
}
