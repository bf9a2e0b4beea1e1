// Command lds-sender captures at the upstream tap, keeps a Lossy Difference
// Sketch per interval and streams each finished interval to lds-receiver.
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
	"github.com/lds-net/lds/internal/sender"
	"github.com/lds-net/lds/internal/version"
)

const usage = `Usage: lds-sender [flags]

Sketches the packets at the upstream tap and streams them to lds-receiver.

Flags:
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is lds-sender with its arguments and output: it returns the exit
// code (0, cli.ExitUsage for a bad flag or configuration, cli.ExitFailed
// when the pipeline stops on an error; --check-config exits
// cli.ExitUsage when its preflight fails). --version and --check-config's
// report go to stdout; flag and configuration errors and the log to stderr.
func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("lds-sender", flag.ContinueOnError, usage)
	fs.SetOutput(stderr)
	path := fs.String("config", "/etc/lds/sender.yaml", "configuration file (see configs/sender.yaml for every key)")
	check := fs.Bool("check-config", false, "validate the configuration and check it against this host (files, certificates, ports, interface, ptp4l), then exit: non-zero if the daemon would not run")
	showVersion := fs.Bool("version", false, "print the version and exit")
	common := config.CommonFlags(fs)
	recv := fs.String("receiver", "", "lds-receiver host:port (overrides sender.receiver)")
	if code, exit := cli.Parse(fs, args); exit {
		return code
	}
	if *showVersion {
		fmt.Fprintln(stdout, "lds-sender", version.Version)
		return 0
	}

	cfg, err := config.ReadSender(*path)
	if err == nil {
		common(&cfg.Common)
		if *recv != "" {
			cfg.Sender.Receiver = *recv
		}
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "lds-sender: configuration %s: %v\n", *path, err)
		return cli.ExitUsage
	}
	if *check {
		rep := preflight.Sender(&cfg, preflight.Options{})
		rep.Print(stdout, "lds-sender")
		if rep.Failed() {
			return cli.ExitUsage
		}
		return 0
	}

	log := cfg.Log.Logger(stderr)
	preflight.LogStartWarnings(log, &cfg.Common, map[string]string{"sender.tls.key": cfg.Sender.TLS.Key})
	ctx, stop := cli.SignalContext(context.Background())
	defer stop()
	s, err := sender.New(cfg, sender.Options{Version: version.Version}, log)
	if err == nil {
		err = s.Run(ctx)
	}
	if err != nil {
		log.Error("lds-sender stopped", "err", err)
		return cli.ExitFailed
	}
	return 0
}
