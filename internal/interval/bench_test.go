package interval

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/sketch"
)

// BenchmarkWorkers: packets/s through N capture workers, each with its own
// sender builder (sketch update, boundary list, flow counts) and no shared
// state, as with AF_PACKET fanout. The reported pkt/s is for all workers.
func BenchmarkWorkers(b *testing.B) {
	p := Params{T: int64(time.Second), MaxDelay: int64(50 * time.Millisecond), Guard: int64(time.Millisecond),
		Sketch: sketch.Params{Rows: 4, Columns: 17500, VLDA: 1}, LDA: sketch.DefaultLDAParams(), Classes: 1, Heavy: 1000, FlowCap: 1 << 20}
	const perWorker = 1 << 16
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
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
