package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/lds-net/lds/internal/capture"
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
	frame := fs.Int("frame", 1500, "bytes of a frame on the wire at --pps, for how long the capture ring holds")
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
	writeRing(os.Stdout, rc.Capture.Source, rc.Capture.Identity, *pps, *frame)
	fmt.Println()
	config.WriteMemoryBound(os.Stdout, "lds-sender", sb)
	writeRing(os.Stdout, sc.Capture.Source, sc.Capture.Identity, *pps, *frame)
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

// writeRing prints a live source's capture ring: kernel memory outside
// the bound above, and how long it holds traffic while the daemon does
// not read (stopped, starved of CPU) before the kernel drops packets.
// The ring keeps the snap length of each frame, not the whole frame.
func writeRing(w io.Writer, src capture.SourceConfig, id capture.IdentityConfig, pps float64, frame int) {
	if src.Kind != "afpacket" {
		return
	}
	bs, nb := capture.RingGeometry(src.BlockSize, src.NumBlocks)
	snap := src.SnapLen(id)
	slot := capture.RingFrameBytes(frame, snap)
	fmt.Fprintf(w, "  capture ring (kernel memory, not in the bound): %d × %d × %s = %s, keeping %d bytes of each frame; holds %v of traffic at low packet rates "+
		"(num_blocks × block_timeout), %v at %.0f packets/s of %d bytes (%d ring bytes each)\n",
		max(1, src.Workers), nb, mibText(int64(bs)), mibText(int64(max(1, src.Workers)*bs*nb)), snap,
		capture.RingHold(src.BlockSize, src.NumBlocks, src.BlockTimeout, 0),
		capture.RingHold(src.BlockSize, src.NumBlocks, src.BlockTimeout, pps*float64(slot)).Round(time.Millisecond),
		pps, frame, slot)
}

func mibText(b int64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d MiB", b>>20)
}
