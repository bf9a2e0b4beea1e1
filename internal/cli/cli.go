// Package cli is the start-up the commands' mains share: a flag set whose
// --help prints a synopsis before the flags, the signals that ask a command
// to stop, and a daemon's way from flags to exit code. It imports only the
// standard library, so that lds-linkem does not link the measuring daemons'
// dependencies.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"
)

// A daemon's exit codes besides 0.
const (
	ExitFailed = 1 // it stopped on an error
	ExitUsage  = 2 // a bad flag, or a configuration it refuses
)

// NewFlagSet is flag.NewFlagSet with a usage that prints usage, then the
// flags' defaults.
func NewFlagSet(name string, h flag.ErrorHandling, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, h)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// SignalContext is ctx, cancelled at SIGINT or SIGTERM: a stop request.
func SignalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
}

// Runner is a daemon's pipeline, built from its configuration.
type Runner interface {
	// Run runs until ctx ends (SIGINT, SIGTERM) or the pipeline fails.
	Run(ctx context.Context) error
}

// RunFunc is a function as a Runner.
type RunFunc func(ctx context.Context) error

// Run calls f.
func (f RunFunc) Run(ctx context.Context) error { return f(ctx) }

// Daemon is what a daemon's main says about itself; Main does the rest.
// C is its configuration.
type Daemon[C any] struct {
	Name       string // the command: flag set, messages, --version's line
	Usage      string // what --help prints before the flags
	ConfigPath string // --config's default
	ConfigHelp string // --config's help
	Version    string // "" = no --version flag
	// Flags registers the daemon's own flags (nil: none); what it returns
	// applies them over the loaded configuration.
	Flags    func(fs *flag.FlagSet) func(cfg *C)
	Load     func(path string) (C, error)                  // reads --config's file
	Validate func(cfg *C) error                            // after the flags
	Logger   func(cfg *C, w io.Writer) *slog.Logger        // the log, to w
	New      func(cfg C, log *slog.Logger) (Runner, error) // builds the pipeline
}

// Main parses args, loads the configuration, applies the flags over it and
// validates it, then builds and runs the daemon until SIGINT or SIGTERM; it
// returns the exit code. --version and --check-config's verdict go to
// stdout; flag and configuration errors and the log go to stderr.
func (d Daemon[C]) Main(args []string, stdout, stderr io.Writer) int {
	fs := NewFlagSet(d.Name, flag.ContinueOnError, d.Usage)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", d.ConfigPath, d.ConfigHelp)
	check := fs.Bool("check-config", false, "validate the configuration and exit")
	showVersion := new(bool)
	if d.Version != "" {
		showVersion = fs.Bool("version", false, "print the version and exit")
	}
	apply := func(*C) {}
	if d.Flags != nil {
		apply = d.Flags(fs)
	}
	// The exit codes of flag.ExitOnError, without exiting here.
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return ExitUsage
	}
	if *showVersion {
		fmt.Fprintln(stdout, d.Name, d.Version)
		return 0
	}
	cfg, err := d.Load(*cfgPath)
	if err == nil {
		apply(&cfg)
		err = d.Validate(&cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: configuration %s: %v\n", d.Name, *cfgPath, err)
		return ExitUsage
	}
	if *check {
		fmt.Fprintln(stdout, "configuration OK")
		return 0
	}
	log := d.Logger(&cfg, stderr)
	ctx, stop := SignalContext(context.Background())
	defer stop()
	r, err := d.New(cfg, log)
	if err == nil {
		err = r.Run(ctx)
	}
	if err != nil {
		log.Error(d.Name+" stopped", "err", err)
		return ExitFailed
	}
	return 0
}
