// Command lds-sender captures at the upstream tap, keeps a Lossy Difference
// Sketch per interval and streams each finished interval to lds-receiver.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/sender"
	"github.com/lds-net/lds/internal/version"
)

func main() {
	fs := flag.NewFlagSet("lds-sender", flag.ExitOnError)
	cfgPath := fs.String("config", "/etc/lds/sender.yaml", "configuration file (see configs/sender.yaml for every key)")
	iface := fs.String("interface", "", "capture interface (overrides capture.source.interface)")
	recv := fs.String("receiver", "", "lds-receiver host:port (overrides sender.receiver)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (overrides log.level)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	check := fs.Bool("check-config", false, "validate the configuration and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: lds-sender [flags]\n\nSketches the packets at the upstream tap and streams them to lds-receiver.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println("lds-sender", version.Version)
		return
	}
	cfg, err := config.LoadSender(*cfgPath)
	if err == nil {
		if *iface != "" {
			cfg.Capture.Source.Interface = *iface
		}
		if *recv != "" {
			cfg.Sender.Receiver = *recv
		}
		if *logLevel != "" {
			cfg.Log.Level = *logLevel
		}
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "lds-sender: configuration %s: %v\n", *cfgPath, err)
		os.Exit(2)
	}
	if *check {
		fmt.Println("configuration OK")
		return
	}
	log := cfg.Log.Logger(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s, err := sender.New(cfg, sender.Options{Version: version.Version}, log)
	if err == nil {
		err = s.Run(ctx)
	}
	if err != nil {
		log.Error("lds-sender stopped", "err", err)
		os.Exit(1)
	}
}
