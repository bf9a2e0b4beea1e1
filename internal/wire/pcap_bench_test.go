package wire

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
)

// BenchmarkBoundaryBytesPcap measures the encoded boundary blob of every
// interval of a real sender capture (env LDS_BOUNDARY_PCAP, default config),
// as the sender would ship it for the receiver's hold window of env
// LDS_BOUNDARY_WINDOW (default 50ms: the window on a link of delays below
// 25 ms). Not run by `make bench` without the env.
func BenchmarkBoundaryBytesPcap(b *testing.B) {
	path := os.Getenv("LDS_BOUNDARY_PCAP")
	if path == "" {
		b.Skip("set LDS_BOUNDARY_PCAP to a sender capture (ldsctl gen) to measure the boundary bytes")
	}
	cfg := config.DefaultReceiver()
	cc := cfg.CaptureConfig()
	p := interval.Params{T: int64(cfg.Interval), MaxDelay: int64(cfg.MaxDelay), Guard: int64(cfg.Guard),
		Sketch: cfg.SketchParams(), LDA: cfg.LDAParams(), Classes: len(cc.Classes) + 1, Heavy: cfg.Sketch.Heavy, FlowCap: cfg.Sketch.MaxFlows, LostCells: cfg.Lost.Cells()}
	w := interval.DefaultMinWindow
	if v := os.Getenv("LDS_BOUNDARY_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		w = int64(d)
	}
	// Every boundary's window, as the receiver would announce it.
	win := interval.NewWindowTable()
	for range b.N {
		parser, err := capture.NewParser(cc)
		if err != nil {
			b.Fatal(err)
		}
		src, err := capture.OpenFile(path)
		if err != nil {
			b.Fatal(err)
		}
		rd := capture.NewReader(src, parser)
		var sb *interval.SenderBuilder
		var total, keys, ivs int
		emit := func(si *interval.SenderInterval) {
			n, k := boundaryBlobSize(b, si)
			b.Logf("interval %d: %d packets, %d boundary keys, %d boundary bytes", si.ID, si.Sk.Packets, k, n)
			total += n
			keys += k
			ivs++
		}
		var pkt capture.Packet
		for {
			err := rd.Next(&pkt)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if sb == nil {
				first := interval.ID(pkt.TS, p.T)
				for bnd := first; bnd < first+200; bnd++ {
					win.Set(interval.Window{Boundary: bnd, W: w})
				}
				if sb, err = interval.NewSenderBuilderWindows(p, first*p.T, win, 0); err != nil {
					b.Fatal(err)
				}
			}
			sb.Add(&pkt, emit)
		}
		sb.Flush(emit)
		src.Close()
		b.ReportMetric(float64(total)/float64(max(ivs, 1)), "B/interval")
		b.ReportMetric(float64(total)/float64(max(keys, 1)), "B/key")
	}
}

// boundaryBlobSize is the BOUNDARY chunk bytes of si and its key count.
func boundaryBlobSize(tb testing.TB, si *interval.SenderInterval) (int, int) {
	if err := si.Finish(); err != nil {
		tb.Fatal(err)
	}
	enc, err := si.Split.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	return len(enc), si.Split.Len()
}
