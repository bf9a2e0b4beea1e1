// Command lds-sender captures at the upstream tap, keeps a Lossy Difference
// Sketch per interval and streams each finished interval to lds-receiver.
package main

import (
	"flag"
	"log/slog"
	"os"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/sender"
	"github.com/lds-net/lds/internal/version"
)

func main() {
	d := config.Daemon("sender", "Sketches the packets at the upstream tap and streams them to lds-receiver.",
		config.LoadSender, flags, start)
	os.Exit(d.Main(os.Args[1:], os.Stdout, os.Stderr))
}

// flags registers the sender's own flags.
func flags(fs *flag.FlagSet) func(*config.Sender) {
	recv := fs.String("receiver", "", "lds-receiver host:port (overrides sender.receiver)")
	return func(c *config.Sender) {
		if *recv != "" {
			c.Sender.Receiver = *recv
		}
	}
}

func start(cfg config.Sender, log *slog.Logger) (cli.Runner, error) {
	return sender.New(cfg, sender.Options{Version: version.Version}, log)
}
