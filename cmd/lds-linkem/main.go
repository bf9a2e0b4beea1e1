// Command lds-linkem is a userspace link emulator: it relays Ethernet
// frames between two interfaces with per-class delay distributions and
// loss models (tools/linkem). It stands in for netem where there is
// none, e.g. between the two taps of the live testbed (docs/testbed.md).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/tools/linkem"
)

const usage = `Usage: lds-linkem --config FILE [flags]

Relays frames between interfaces a and b with emulated delay and loss.

Flags:
`

func main() { os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr)) }

// runMain is lds-linkem with its arguments and output; it returns the exit
// code (cli.ExitUsage for a bad flag or configuration, cli.ExitFailed when
// the relay stops on an error).
func runMain(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("lds-linkem", flag.ContinueOnError, usage)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML configuration (keys of linkem.Config: a, b, forward, reverse, seed, ...)")
	check := fs.Bool("check-config", false, "validate the configuration and exit")
	a := fs.String("a", "", "interface A (overrides a)")
	b := fs.String("b", "", "interface B (overrides b)")
	statsPath := fs.String("stats", "", "write the counters as JSON to this file on exit")
	every := fs.Duration("log-every", 10*time.Second, "log the counters this often (0: never)")
	if code, exit := cli.Parse(fs, args); exit {
		return code
	}

	cfg, err := load(*path)
	if err == nil {
		if *a != "" {
			cfg.A = *a
		}
		if *b != "" {
			cfg.B = *b
		}
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "lds-linkem: configuration %s: %v\n", *path, err)
		return cli.ExitUsage
	}
	if *check {
		fmt.Fprintln(stdout, "configuration OK")
		return 0
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))
	ctx, stop := cli.SignalContext(context.Background())
	defer stop()
	if err := run(ctx, cfg, *statsPath, *every, log); err != nil {
		log.Error("lds-linkem stopped", "err", err)
		return cli.ExitFailed
	}
	return 0
}

func load(path string) (linkem.Config, error) {
	cfg := linkem.DefaultConfig()
	if path == "" {
		return cfg, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, err
	}
	return cfg, nil
}

func run(ctx context.Context, cfg linkem.Config, statsPath string, every time.Duration, log *slog.Logger) error {
	em, err := linkem.New(cfg, log)
	if err != nil {
		return err
	}
	log.Info("relaying", "emulator", em.String())
	if every > 0 {
		go func() {
			tk := time.NewTicker(every)
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tk.C:
					s := em.Stats()
					log.Info("counters", "forward", s.Forward, "reverse", s.Reverse)
				}
			}
		}()
	}
	err = em.Run(ctx)
	s := em.Stats()
	log.Info("stopped", "forward", s.Forward, "reverse", s.Reverse)
	if statsPath != "" {
		b, jerr := json.MarshalIndent(s, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(statsPath, b, 0o644)
		}
		err = errors.Join(err, jerr)
	}
	return err
}
