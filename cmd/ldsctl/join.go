package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/internal/replay"
	"github.com/lds-net/lds/tools/join"
)

// cmdJoin is the exact alternative: join every packet of the two captures.
func cmdJoin(args []string) error {
	fs := cli.NewFlagSet("ldsctl join", flag.ExitOnError,
		"Usage: ldsctl join --sender-pcap A --receiver-pcap B --out truth.jsonl\n\nExact per-packet join of two captures: per (interval, flow) sent, received, lost, mean and stddev of the delay.\n\n")
	cfgPath := fs.String("config", "", "configuration (receiver format; identity, selection and interval are used)")
	sp := fs.String("sender-pcap", "", "capture at the upstream tap")
	rp := fs.String("receiver-pcap", "", "capture at the downstream tap")
	out := fs.String("out", "", "ground truth JSONL to write (the format of ldsctl gen --truth)")
	_ = fs.Parse(args)
	if *sp == "" || *rp == "" || *out == "" {
		fs.Usage()
		return errors.New("--sender-pcap, --receiver-pcap and --out are required")
	}
	cfg, err := replay.Load(*cfgPath)
	if err != nil {
		return err
	}
	t0 := time.Now()
	res, err := join.Files(*sp, *rp, cfg.CaptureConfig(), cfg.Interval.Nanoseconds())
	if err != nil {
		return err
	}
	for _, te := range res.Truncated {
		fmt.Fprintf(os.Stderr, "warning: %v\n", te)
	}
	f, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range res.Truth(cfg.Interval.Nanoseconds()) {
		if err := enc.Encode(r); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "joined %d packets (%d unmatched at the receiver, %d duplicate identities) into %d records in %.2fs\n",
		res.Packets, res.Unmatched, res.Duplicates, len(res.Flows), time.Since(t0).Seconds())
	return nil
}
