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
	"io"
	"log/slog"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/tools/linkem"
)

func main() {
	// Flags registers these; the relay reads them.
	var statsPath *string
	var every *time.Duration
	d := cli.Daemon[linkem.Config]{
		Name:       "lds-linkem",
		Usage:      "Usage: lds-linkem --config FILE [flags]\n\nRelays frames between interfaces a and b with emulated delay and loss.\n\nFlags:\n",
		ConfigHelp: "YAML configuration (keys of linkem.Config: a, b, forward, reverse, seed, ...)",
		Flags: func(fs *flag.FlagSet) func(*linkem.Config) {
			a := fs.String("a", "", "interface A (overrides a)")
			b := fs.String("b", "", "interface B (overrides b)")
			statsPath = fs.String("stats", "", "write the counters as JSON to this file on exit")
			every = fs.Duration("log-every", 10*time.Second, "log the counters this often (0: never)")
			return func(cfg *linkem.Config) {
				if *a != "" {
					cfg.A = *a
				}
				if *b != "" {
					cfg.B = *b
				}
			}
		},
		Load:     load,
		Validate: (*linkem.Config).Validate,
		Logger:   func(_ *linkem.Config, w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) },
		New: func(cfg linkem.Config, log *slog.Logger) (cli.Runner, error) {
			return cli.RunFunc(func(ctx context.Context) error { return run(ctx, cfg, *statsPath, *every, log) }), nil
		},
	}
	os.Exit(d.Main(os.Args[1:], os.Stdout, os.Stderr))
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
