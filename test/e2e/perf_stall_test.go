package e2e

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
)

// BenchmarkSenderBoundaryStall measures how long lds-sender's capture
// goroutine stops reading at an interval boundary: the time of the Add
// that closes an interval with `flows` flows (heavy hitters to rank, a flow
// table to clear) whose last max_delay+guard held `tail` packets (boundary
// fingerprints to sort). While it runs the AF_PACKET ring only fills; a stall longer than
// the ring holds is a burst of kernel drops (docs/testbed.md, "Live
// capture performance"). ns/op is the stall.
func BenchmarkSenderBoundaryStall(b *testing.B) {
	c := config.DefaultSender()
	p := interval.Params{T: int64(c.Interval), MaxDelay: int64(c.MaxDelay), Guard: int64(c.Guard),
		Sketch: c.SketchParams(), LDA: c.LDAParams(), Classes: 1, Heavy: c.Sketch.Heavy, FlowCap: c.Sketch.MaxFlows}
	for _, tc := range []struct{ tail, flows int }{{10_000, 1_000}, {120_000, 1_000}, {120_000, 100_000}, {120_000, 1_000_000}} {
		b.Run(fmt.Sprintf("tail=%d/flows=%d", tc.tail, tc.flows), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			keys := make([]capture.FlowKey, tc.flows)
			for i := range keys {
				k := &keys[i]
				k.Src[0], k.Src[1], k.Src[2], k.Src[3] = 10, byte(i>>16), byte(i>>8), byte(i)
				k.Dst[0], k.Dst[3] = 192, 7
				k.SPort, k.DPort, k.Proto = uint16(i), 443, 6
			}
			start := time.Now().Truncate(time.Second).UnixNano()
			sb, err := interval.NewSenderBuilder(p, start)
			if err != nil {
				b.Fatal(err)
			}
			emit := func(*interval.SenderInterval) {}
			var pkt capture.Packet
			pkt.Weight, pkt.WireLen = 1, 100
			end := start + p.T
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				// Every flow once early in the interval, then the
				// closing interval's tail (the window whose
				// fingerprints go into the End frame) with every flow.
				for i := range tc.flows {
					pkt.Key = keys[i]
					pkt.FlowHash, pkt.PktHash = rng.Uint64(), rng.Uint64()
					pkt.TS = end - p.T + int64(i)*(p.T/2)/int64(tc.flows)
					sb.Add(&pkt, emit)
				}
				for i := range tc.tail {
					pkt.Key = keys[i%tc.flows]
					pkt.FlowHash, pkt.PktHash = rng.Uint64(), rng.Uint64()
					pkt.TS = end - p.MaxDelay - p.Guard + int64(i)*(p.MaxDelay+p.Guard)/int64(tc.tail)
					sb.Add(&pkt, emit)
				}
				pkt.TS = end // the first packet of the next interval closes this one
				b.StartTimer()
				sb.Add(&pkt, emit)
				end += p.T
			}
		})
	}
}
