package interval

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/sketch"
)

// BenchmarkWorkers: packets/s through N capture workers, each with its own
// sender builder (sketch update, boundary log, flow counts) and no shared
// state, as with AF_PACKET fanout. The reported pkt/s is for all workers.
func BenchmarkWorkers(b *testing.B) {
	for _, md := range []time.Duration{50 * time.Millisecond, time.Second} {
		suffix := ""
		if md != 50*time.Millisecond {
			// max_delay above half the interval: every packet goes into the
			// sender's boundary log (16 B), not only those near a boundary.
			suffix = ",max_delay=" + md.String()
		}
		benchWorkers(b, md, suffix)
	}
}

func benchWorkers(b *testing.B, maxDelay time.Duration, suffix string) {
	p := Params{T: int64(time.Second), MaxDelay: int64(maxDelay), Guard: int64(time.Millisecond),
		Sketch: sketch.Params{Rows: 4, Columns: 17500, VLDA: 1}, LDA: sketch.DefaultLDAParams(), Classes: 1, Heavy: 1000, FlowCap: 1 << 20}
	const perWorker = 1 << 16
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d%s", workers, suffix), func(b *testing.B) {
			pk := make([][]capture.Packet, workers)
			for w := range pk {
				r := rand.New(rand.NewPCG(uint64(w), 1))
				pk[w] = make([]capture.Packet, perWorker)
				for i := range pk[w] {
					f := r.IntN(20000)
					k, _ := capture.FlowKeyFromAddrs(netip.AddrFrom4([4]byte{10, byte(w), byte(f >> 8), byte(f)}), netip.MustParseAddr("192.0.2.1"), 6, uint16(f), 443)
					pk[w][i] = capture.Packet{Key: k, FlowHash: uint64(f)*0x9e3779b97f4a7c15 + uint64(w), PktHash: r.Uint64(), Weight: 1, WireLen: 100,
						TS: int64(i) * 1000} // 1 Mpps per worker of event time
				}
			}
			builders := make([]*SenderBuilder, workers)
			for w := range builders {
				builders[w], _ = NewSenderBuilder(p, 0)
			}
			emit := func(si *SenderInterval) {}
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; n < b.N; n++ {
						q := &pk[w][n%perWorker]
						q.TS = int64(n) * 1000
						builders[w].Add(q, emit)
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N*workers)/b.Elapsed().Seconds(), "pkt/s")
		})
	}
}

// BenchmarkFinishBoundary: the sender's per-interval boundary work, off
// the packet path: build the boundary function over the keys seen before
// and after the boundary, in capture order (distinct here; scratch space
// reused through the builder's pool, as in steady state). ns/key is per
// key of the function; the receiver's side is one Get per held packet
// (BenchmarkGet in internal/retrieval).
func BenchmarkFinishBoundary(b *testing.B) {
	for _, keys := range []int{20_000, 100_000, 200_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			p := Params{T: int64(time.Second), MaxDelay: int64(50 * time.Millisecond), Guard: int64(time.Millisecond),
				Sketch: sketch.Params{Rows: 2, Columns: 64, VLDA: 1}, LDA: sketch.LDAParams{Banks: 1, Cells: 4}, Classes: 1}
			pl, err := newPool(p)
			if err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			all := make([]BoundaryKey, keys)
			for i := range all {
				all[i] = BoundaryKey{Hash: r.Uint64(), Off: uint32(i % 2)}
			}
			ks := make([]BoundaryKey, keys)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				copy(ks, all) // the capture order: unsorted
				si := &SenderInterval{ID: 1, Keys: ks, pool: pl}
				if err := si.Finish(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(keys), "ns/key")
		})
	}
}

// BenchmarkHeldPcap measures the receiver's boundary memory on a real
// receiver capture (env LDS_HELD_PCAP; the default config's identity):
// the largest set of packets held at one boundary and its bytes, with a
// fixed 50 ms window (max_delay 50ms) and with the adaptive windows under
// max_delay 1s before any delay evidence (what a link of delays below
// 25 ms keeps). Not run by `make bench` without the env.
func BenchmarkHeldPcap(b *testing.B) {
	path := os.Getenv("LDS_HELD_PCAP")
	if path == "" {
		b.Skip("set LDS_HELD_PCAP to a receiver capture (ldsctl gen) to measure the held packets")
	}
	for _, tc := range []struct {
		name     string
		maxDelay time.Duration
		adaptive bool
	}{{"fixed-50ms", 50 * time.Millisecond, false}, {"adaptive-max_delay-1s", time.Second, true}} {
		b.Run(tc.name, func(b *testing.B) {
			cc := capture.DefaultConfig()
			p := Params{T: int64(time.Second), MaxDelay: int64(tc.maxDelay), Guard: int64(time.Millisecond),
				Sketch: sketch.DefaultParams(), LDA: sketch.DefaultLDAParams(), Classes: 1, FlowCap: 1 << 20}
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
				var rb *ReceiverBuilder
				maxHeld := 0
				emit := func(s *ReceiverInterval) {
					maxHeld = max(maxHeld, len(s.HeldNext.Pkts))
					s.Release()
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
					if rb == nil {
						var plan *WindowPlan
						if tc.adaptive {
							plan = NewWindowPlan(p, 1)
						}
						if rb, err = NewReceiverBuilderPlan(p, ID(pkt.TS, p.T)*p.T, true, plan); err != nil {
							b.Fatal(err)
						}
					}
					rb.Add(&pkt, emit)
				}
				rb.Flush(emit)
				src.Close()
				b.ReportMetric(float64(maxHeld), "held-pkts")
				b.ReportMetric(float64(maxHeld)*float64(unsafe.Sizeof(capture.Packet{})), "held-B")
			}
		})
	}
}
