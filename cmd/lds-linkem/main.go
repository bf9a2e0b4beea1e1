// Command lds-linkem is a userspace link emulator: it relays Ethernet
// frames between two interfaces with per-class delay distributions and
// loss models (internal/linkem). It stands in for netem where there is
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
	"os/signal"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lds-net/lds/internal/linkem"
)

func main() {
	fs := flag.NewFlagSet("lds-linkem", flag.ExitOnError)
	cfgPath := fs.String("config", "", "YAML configuration (keys of linkem.Config: a, b, forward, reverse, seed, ...)")
	a := fs.String("a", "", "interface A (overrides a)")
	b := fs.String("b", "", "interface B (overrides b)")
	statsPath := fs.String("stats", "", "write the counters as JSON to this file on exit")
	every := fs.Duration("log-every", 10*time.Second, "log the counters this often (0: never)")
	check := fs.Bool("check-config", false, "validate the configuration and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: lds-linkem --config FILE [flags]\n\nRelays frames between interfaces a and b with emulated delay and loss.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := load(*cfgPath)
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
		fmt.Fprintf(os.Stderr, "lds-linkem: configuration %s: %v\n", *cfgPath, err)
		os.Exit(2)
	}
	if *check {
		fmt.Println("configuration OK")
		return
	}
	if err := run(cfg, *statsPath, *every, log); err != nil {
		log.Error("lds-linkem stopped", "err", err)
		os.Exit(1)
	}
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

func run(cfg linkem.Config, statsPath string, every time.Duration, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
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
