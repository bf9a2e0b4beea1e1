package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/internal/replay"
	"github.com/lds-net/lds/internal/report"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/version"
)

func cmdReplay(args []string) error {
	fs := cli.NewFlagSet("ldsctl replay", flag.ExitOnError,
		"Usage: ldsctl replay --config FILE --sender-pcap A.pcap --receiver-pcap B.pcap --out results.jsonl\n\n")
	cfgPath := fs.String("config", "", "configuration file (receiver format; the common keys apply to both pipelines; empty = defaults)")
	sp := fs.String("sender-pcap", "", "capture at the upstream tap (pcap or pcapng)")
	rp := fs.String("receiver-pcap", "", "capture at the downstream tap (pcap or pcapng)")
	out := fs.String("out", "", "results JSONL to write")
	lostOut := fs.String("lost-out", "", "lost-packet list JSONL to write (docs/results.md, \"Lost packets\")")
	table := fs.Int("table", 0, "print a per-flow table of the N heaviest flows and the link figures at the end")
	estimator := fs.String("estimator", "", "override sketch.estimator (decode or paper)")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	firstPartial := fs.Bool("first-partial", false, "the captures began mid-traffic: flag the first interval partial (default: a capture is complete from the start of its first interval)")
	allowReversed := fs.Bool("allow-reversed", false, "replay even when the receiver's capture holds the packets before the sender's (refused by default: the captures look swapped)")
	logLevel := fs.String("log-level", "warn", "log level on stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (go tool pprof) to this file")
	_ = fs.Parse(args)
	if *sp == "" || *rp == "" {
		fs.Usage()
		return errors.New("--sender-pcap and --receiver-pcap are required")
	}
	cfg, err := replay.Load(*cfgPath)
	if err != nil {
		return err
	}
	if *estimator != "" {
		cfg.Sketch.Estimator = *estimator
		if err := cfg.ValidateReplay(); err != nil {
			return err
		}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				log.Error("--cpuprofile: the profile may be incomplete", "file", *cpuProfile, "err", err)
			}
		}()
	}
	ctx, stop := cli.SignalContext(context.Background())
	defer stop()
	opt := replay.Options{Config: cfg, SenderPcap: *sp, ReceiverPcap: *rp, Out: *out, LostOut: *lostOut, Version: version.Version, FirstPartial: *firstPartial, AllowReversed: *allowReversed}
	if !*quiet && isTerminal(os.Stderr) {
		opt.Progress = os.Stderr
	}
	var ivs []*results.Interval
	if *table > 0 {
		opt.OnInterval = func(iv *results.Interval) { ivs = append(ivs, iv) }
	}
	sum, err := replay.Run(ctx, opt, log)
	if err != nil {
		return err
	}
	if *table > 0 {
		report.Table(os.Stdout, ivs, *table)
	}
	fmt.Fprintf(os.Stderr, "replay done in %.2fs: intervals by outcome: %s; %d flow records, %d sketch bytes shipped", sum.Elapsed.Seconds(), report.Outcomes(sum.Intervals), sum.Flows, sum.SketchBytes)
	if *out != "" {
		fmt.Fprintf(os.Stderr, "; results in %s", *out)
	}
	if cfg.Export.Enabled() {
		fmt.Fprintf(os.Stderr, "; exported %.0f flow records, %.0f dropped", sum.Exported, sum.ExportDropped)
	}
	fmt.Fprintln(os.Stderr)
	if cfg.Export.Enabled() && sum.ExportDropped > 0 {
		// The replay itself succeeded (docs/replay.md: exit 0 once every
		// interval is final); the backfill did not.
		fmt.Fprintf(os.Stderr, "ldsctl replay: warning: %.0f flow records were not exported (a collector or broker unreachable or failing, see the log); the results file is complete, so the replay can be rerun for the backfill\n", sum.ExportDropped)
	}
	return nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
