// Package cli holds the small start-up pieces the commands' mains share: a
// flag set whose --help prints a synopsis before the flags, flag parsing
// with the exit codes of flag.ExitOnError, and the signals that ask a
// command to stop. It imports only the standard library, so that
// lds-linkem does not link the measuring daemons' dependencies.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
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

// Parse parses args with fs (made with flag.ContinueOnError) and tells
// whether the command should exit now, and with which code: 0 after
// --help, ExitUsage after a bad flag (fs has printed why), as
// flag.ExitOnError would, without exiting here.
func Parse(fs *flag.FlagSet, args []string) (code int, exit bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	case err != nil:
		return ExitUsage, true
	}
	return 0, false
}

// SignalContext is ctx, cancelled at SIGINT or SIGTERM: a stop request.
func SignalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
}
