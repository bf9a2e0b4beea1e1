package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/lds-net/lds/internal/config"
)

func cmdMemory(args []string) error {
	fs := flag.NewFlagSet("ldsctl memory", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: ldsctl memory [--receiver FILE] [--sender FILE] [--pps N] [--replay]\n\n"+
			"Worst-case memory of lds-receiver and lds-sender from their configuration (docs/PERFORMANCE.md, \"Memory\"):\n"+
			"every term, the live bound, and the peak resident set to give systemd's MemoryMax=.\n\n")
		fs.PrintDefaults()
	}
	rpath := fs.String("receiver", "", "receiver configuration (empty = defaults)")
	spath := fs.String("sender", "", "sender configuration (empty = defaults)")
	pps := fs.Float64("pps", 1e6, "highest packet rate at the taps (only the packets held at interval boundaries follow it)")
	replay := fs.Bool("replay", false, "the bound of ldsctl replay, which runs both pipelines in one process, with --receiver's file")
	procs := fs.Int("procs", runtime.GOMAXPROCS(0), "with --replay: intervals estimated at once (GOMAXPROCS)")
	_ = fs.Parse(args)
	rc := config.DefaultReceiver()
	if err := decodeFile(*rpath, &rc); err != nil {
		return err
	}
	sc := config.DefaultSender()
	if *replay {
		sc.Common = rc.Common // replay runs the sender's pipeline with the receiver file's common keys
	} else if err := decodeFile(*spath, &sc); err != nil {
		return err
	}
	in := config.MemoryInput{PPS: *pps, Replay: *replay, Procs: *procs}
	rb, sb := rc.MemoryBound(in), sc.MemoryBound(in)
	config.WriteMemoryBound(os.Stdout, "lds-receiver", rb)
	fmt.Println()
	config.WriteMemoryBound(os.Stdout, "lds-sender", sb)
	if *replay {
		live := rb.Live + sb.Live
		fmt.Printf("\nldsctl replay (both in one process): live %d bytes, peak resident %d bytes (%.0f MiB)\n",
			live, config.RuntimeBaseBytes+2*live, float64(config.RuntimeBaseBytes+2*live)/(1<<20))
	}
	return nil
}

// decodeFile decodes path over the defaults in into (no validation: a file
// for another host may name certificates this one lacks).
func decodeFile(path string, into any) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return config.Decode(bytes.NewReader(b), into, path)
}
