// Command lds-receiver captures at the downstream tap, receives the senders'
// sketches, estimates per-flow delay, delay variation and loss, and serves
// Prometheus metrics and the results API.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/version"
)

func main() {
	fs := flag.NewFlagSet("lds-receiver", flag.ExitOnError)
	cfgPath := fs.String("config", "/etc/lds/receiver.yaml", "configuration file (see configs/receiver.yaml for every key)")
	iface := fs.String("interface", "", "capture interface (overrides capture.source.interface)")
	listen := fs.String("listen", "", "gRPC listen address for senders (overrides receiver.listen)")
	results := fs.String("results", "", "results JSONL file (overrides receiver.results_file)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (overrides log.level)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	check := fs.Bool("check-config", false, "validate the configuration and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: lds-receiver [flags]\n\nMeasures per-flow one-way delay and loss against lds-sender at the upstream tap.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println("lds-receiver", version.Version)
		return
	}
	cfg, err := config.LoadReceiver(*cfgPath)
	if err == nil {
		if *iface != "" {
			cfg.Capture.Source.Interface = *iface
		}
		if *listen != "" {
			cfg.Receiver.Listen = *listen
		}
		if *results != "" {
			cfg.Receiver.ResultsFile = *results
		}
		if *logLevel != "" {
			cfg.Log.Level = *logLevel
		}
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "lds-receiver: configuration %s: %v\n", *cfgPath, err)
		os.Exit(2)
	}
	if *check {
		fmt.Println("configuration OK")
		return
	}
	log := cfg.Log.Logger(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := receiver.New(cfg, receiver.Options{Version: version.Version}, log)
	if err == nil {
		err = r.Run(ctx)
	}
	if err != nil {
		log.Error("lds-receiver stopped", "err", err)
		os.Exit(1)
	}
}
