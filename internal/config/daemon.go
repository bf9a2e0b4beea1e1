package config

import (
	"flag"
	"io"
	"log/slog"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/internal/version"
)

// daemonFile is a whole daemon file by pointer: *Sender or *Receiver.
type daemonFile[F any] interface {
	*F
	Validate() error
	common() *Common
}

// common reaches the common part of a Sender or Receiver for Daemon.
func (c *Common) common() *Common { return c }

// Daemon is the start-up lds-sender and lds-receiver share, for cli: the
// daemon lds-<role> (role "sender" or "receiver") with the one-line summary
// its --help gives, --config at /etc/lds/<role>.yaml read by load,
// --version, --interface and --log-level over the common part besides the
// daemon's own flags, validation after them, and the log section's logger.
// start builds the pipeline.
func Daemon[F any, P daemonFile[F]](role, summary string, load func(path string) (F, error),
	flags func(fs *flag.FlagSet) func(*F), start func(F, *slog.Logger) (cli.Runner, error)) cli.Daemon[F] {
	name := "lds-" + role
	return cli.Daemon[F]{
		Name:       name,
		Usage:      "Usage: " + name + " [flags]\n\n" + summary + "\n\nFlags:\n",
		ConfigPath: "/etc/lds/" + role + ".yaml",
		ConfigHelp: "configuration file (see configs/" + role + ".yaml for every key)",
		Version:    version.Version,
		Flags: func(fs *flag.FlagSet) func(*F) {
			shared, own := commonFlags(fs), flags(fs)
			return func(c *F) { shared(P(c).common()); own(c) }
		},
		Load:     load,
		Validate: func(c *F) error { return P(c).Validate() },
		Logger:   func(c *F, w io.Writer) *slog.Logger { return P(c).common().Log.Logger(w) },
		New:      start,
	}
}

// commonFlags registers the flags that override keys of the common part
// and returns what applies them: a flag left empty keeps the file's value.
func commonFlags(fs *flag.FlagSet) func(*Common) {
	iface := fs.String("interface", "", "capture interface (overrides capture.source.interface)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (overrides log.level)")
	return func(c *Common) {
		if *iface != "" {
			c.Capture.Source.Interface = *iface
		}
		if *logLevel != "" {
			c.Log.Level = *logLevel
		}
	}
}
