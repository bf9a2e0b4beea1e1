package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/internal/replay"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/eval"
	"github.com/lds-net/lds/tools/gen"
)

func cmdGen(args []string) error {
	fs := cli.NewFlagSet("ldsctl gen", flag.ExitOnError,
		"Usage: ldsctl gen [--scenario FILE] --sender-pcap A.pcap --receiver-pcap B.pcap [--truth truth.jsonl]\n\n")
	scen := fs.String("scenario", "", "scenario YAML (see configs/scenarios/; empty = the built-in demo scenario)")
	sp := fs.String("sender-pcap", "", "sender-tap capture to write")
	rp := fs.String("receiver-pcap", "", "receiver-tap capture to write")
	truth := fs.String("truth", "", "ground truth JSONL to write (one line per interval and flow)")
	seed := fs.Uint64("seed", 0, "override the scenario's seed (0 = keep)")
	_ = fs.Parse(args)
	if *sp == "" || *rp == "" {
		fs.Usage()
		return errors.New("--sender-pcap and --receiver-pcap are required")
	}
	sc := gen.DefaultScenario()
	if *scen != "" {
		var err error
		if sc, err = gen.LoadScenario(*scen); err != nil {
			return err
		}
	}
	if *seed != 0 {
		sc.Seed = *seed
	}
	ctx, stop := cli.SignalContext(context.Background())
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sum, err := gen.Generate(ctx, sc, gen.Outputs{SenderPcap: *sp, ReceiverPcap: *rp, Truth: *truth}, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "generated %d flows, %d packets sent, %d received, %d lost, %d intervals in %.2fs\n",
		sum.Flows, sum.Packets, sum.Received, sum.Lost, sum.Intervals, sum.Elapsed.Seconds())
	return nil
}

// multiFlag collects repeated label=file flags.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func cmdEval(args []string) error {
	fs := cli.NewFlagSet("ldsctl eval", flag.ExitOnError,
		"Usage: ldsctl eval --truth truth.jsonl --results decode=a.jsonl --results paper=b.jsonl [--config weights.yaml [--default-class bronze]] [--out report.md] [--plots DIR]\n\n")
	truth := fs.String("truth", "", "ground truth JSONL (from ldsctl gen)")
	var runs multiFlag
	fs.Var(&runs, "results", "results JSONL to evaluate, as label=file or file (repeatable: several estimators side by side)")
	out := fs.String("out", "", "Markdown report to write (default stdout)")
	plots := fs.String("plots", "", "directory for PNG plots (CDF per flow-size bin, median/p95 per bin)")
	sp := fs.String("sender-pcap", "", "with --baselines: the sender-tap capture the results came from")
	rp := fs.String("receiver-pcap", "", "with --baselines: the receiver-tap capture")
	cfgPath := fs.String("config", "", "configuration, as for replay: identity and interval for --baselines; its capture.weights rules, if any, also split the report per weight class (use the rules the runs were made with; their weights may differ)")
	defClass := fs.String("default-class", eval.DefaultClassName, "with --config: name of the class of flows no weight rule matches (weight 1)")
	baselines := fs.String("baselines", "", "comma list of per-packet baselines computed from the captures: rli, exact")
	rliRate := fs.Float64("rli-rate", eval.DefaultRLIRateHz, "RLI reference rate, Hz")
	var shipped multiFlag
	fs.Var(&shipped, "shipped-bytes", "label=BYTES: bytes a run shipped over the whole trace (replay prints it), for the cost table (repeatable)")
	_ = fs.Parse(args)
	if *truth == "" || len(runs) == 0 {
		fs.Usage()
		return errors.New("--truth and at least one --results are required")
	}
	tr, err := eval.ReadTruthFile(*truth)
	if err != nil {
		return fmt.Errorf("--truth: %w", err)
	}
	if len(tr) == 0 {
		return fmt.Errorf("--truth %s: no records: give the file of `ldsctl gen --truth` or `ldsctl join --out`", *truth)
	}
	rs := map[string][]results.FlowRecord{}
	for _, r := range runs {
		label, file, ok := strings.Cut(r, "=")
		if !ok {
			label, file = strings.TrimSuffix(filepath.Base(r), ".jsonl"), r
		}
		recs, err := eval.ReadResultsFile(file)
		if err != nil {
			return fmt.Errorf("--results %s: %w", r, err)
		}
		if !slices.ContainsFunc(recs, func(f results.FlowRecord) bool { return f.Packets > 0 }) {
			return fmt.Errorf("--results %s: %d records and none counts a packet: is this a truth file? give the results JSONL of `ldsctl replay --out` or lds-receiver's receiver.results_file", r, len(recs))
		}
		rs[label] = recs
	}
	opt := eval.DefaultOptions()
	if *cfgPath != "" {
		cfg, err := replay.Load(*cfgPath)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		if opt.Classes, err = eval.NewWeightClasses(cfg.CaptureConfig(), *defClass, "`"+*cfgPath+"`"); err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		if opt.Classes == nil {
			fmt.Fprintf(os.Stderr, "ldsctl eval: %s has no capture.weights rules: no per-class breakdown\n", *cfgPath)
		}
	}
	if *baselines != "" {
		if *sp == "" || *rp == "" {
			return errors.New("--baselines needs --sender-pcap and --receiver-pcap")
		}
		cfg, err := replay.Load(*cfgPath)
		if err != nil {
			return err
		}
		bc := eval.BaselineConfig{T: cfg.Interval.Nanoseconds(), RLIRateHz: *rliRate}
		if err := bc.ParseBaselineList(*baselines); err != nil {
			return fmt.Errorf("--baselines: %w", err)
		}
		pk, err := eval.PerPacketFromCaptures(*sp, *rp, cfg.CaptureConfig(), nil)
		if err != nil {
			return err
		}
		b, err := eval.RunBaselines(pk, bc)
		if err != nil {
			return err
		}
		if err := b.Apply(rs, &opt); err != nil {
			return err
		}
	}
	for _, s := range shipped {
		label, v, ok := strings.Cut(s, "=")
		n, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return fmt.Errorf("--shipped-bytes %q: want label=BYTES", s)
		}
		if opt.ShippedBytes == nil {
			opt.ShippedBytes = map[string]float64{}
		}
		opt.ShippedBytes[label] = n
	}
	rep, err := eval.EvaluateWith(tr, rs, opt)
	if err != nil {
		return err
	}
	if *out == "" {
		if err := rep.WriteMarkdown(os.Stdout); err != nil {
			return err
		}
	} else {
		f, err := os.Create(*out)
		if err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		if err := rep.WriteMarkdown(f); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if *plots != "" {
		if err := os.MkdirAll(*plots, 0o755); err != nil {
			return fmt.Errorf("--plots: %w", err)
		}
		files, err := eval.WritePlots(*plots, rep)
		if err != nil {
			return fmt.Errorf("--plots: %w", err)
		}
		fmt.Fprintf(os.Stderr, "wrote %d plots to %s\n", len(files), *plots)
	}
	return nil
}
