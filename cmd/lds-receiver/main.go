// Command lds-receiver captures at the downstream tap, receives the senders'
// sketches, estimates per-flow delay, delay variation and loss, and serves
// Prometheus metrics and the results API.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/preflight"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/version"
)

const usage = `Usage: lds-receiver [flags]

Measures per-flow one-way delay and loss against lds-sender at the upstream tap.

Flags:
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is lds-receiver with its arguments and output: it returns the exit
// code (0, cli.ExitUsage for a bad flag or configuration, cli.ExitFailed
// when the pipeline stops on an error; --check-config exits
// cli.ExitUsage when its preflight fails). --version and --check-config's
// report go to stdout; flag and configuration errors and the log to
// stderr. SIGHUP (reopen the results file) is the pipeline's own.
func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("lds-receiver", flag.ContinueOnError, usage)
	fs.SetOutput(stderr)
	path := fs.String("config", "/etc/lds/receiver.yaml", "configuration file (see configs/receiver.yaml for every key)")
	check := fs.Bool("check-config", false, "validate the configuration and check it against this host (files, certificates, ports, interface, ptp4l), then exit: non-zero if the daemon would not run")
	showVersion := fs.Bool("version", false, "print the version and exit")
	common := config.CommonFlags(fs)
	listen := fs.String("listen", "", "gRPC listen address for senders (overrides receiver.listen)")
	results := fs.String("results", "", "results JSONL file (overrides receiver.results_file)")
	if code, exit := cli.Parse(fs, args); exit {
		return code
	}
	if *showVersion {
		fmt.Fprintln(stdout, "lds-receiver", version.Version)
		return 0
	}

	cfg, err := config.ReadReceiver(*path)
	if err == nil {
		common(&cfg.Common)
		if *listen != "" {
			cfg.Receiver.Listen = *listen
		}
		if *results != "" {
			cfg.Receiver.ResultsFile = *results
		}
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "lds-receiver: configuration %s: %v\n", *path, err)
		return cli.ExitUsage
	}
	if *check {
		rep := preflight.Receiver(&cfg, preflight.Options{})
		rep.Print(stdout, "lds-receiver")
		if rep.Failed() {
			return cli.ExitUsage
		}
		return 0
	}

	log := cfg.Log.Logger(stderr)
	preflight.LogStartWarnings(log, &cfg.Common, map[string]string{"receiver.tls.key": cfg.Receiver.TLS.Key,
		"export.kafka.tls.key": cfg.Export.Kafka.TLS.Key})
	ctx, stop := cli.SignalContext(context.Background())
	defer stop()
	r, err := receiver.New(cfg, receiver.Options{Version: version.Version}, log)
	if err == nil {
		err = r.Run(ctx)
	}
	if err != nil {
		log.Error("lds-receiver stopped", "err", err)
		return cli.ExitFailed
	}
	return 0
}
