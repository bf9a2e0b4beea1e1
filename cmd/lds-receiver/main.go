// Command lds-receiver captures at the downstream tap, receives the senders'
// sketches, estimates per-flow delay, delay variation and loss, and serves
// Prometheus metrics and the results API.
package main

import (
	"flag"
	"log/slog"
	"os"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/version"
)

func main() {
	d := config.Daemon("receiver", "Measures per-flow one-way delay and loss against lds-sender at the upstream tap.",
		config.LoadReceiver, flags, start)
	os.Exit(d.Main(os.Args[1:], os.Stdout, os.Stderr))
}

// flags registers the receiver's own flags.
func flags(fs *flag.FlagSet) func(*config.Receiver) {
	listen := fs.String("listen", "", "gRPC listen address for senders (overrides receiver.listen)")
	results := fs.String("results", "", "results JSONL file (overrides receiver.results_file)")
	return func(c *config.Receiver) {
		if *listen != "" {
			c.Receiver.Listen = *listen
		}
		if *results != "" {
			c.Receiver.ResultsFile = *results
		}
	}
}

func start(cfg config.Receiver, log *slog.Logger) (cli.Runner, error) {
	return receiver.New(cfg, receiver.Options{Version: version.Version}, log)
}
