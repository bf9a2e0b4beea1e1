package sample

import (
	"testing"

	"github.com/lds-net/lds/internal/capture"
)

// BenchmarkSamplerAdd: the sampler's share of the sender's packet path
// (default sample: one candidate in 4), buffers recycled as the sender does.
func BenchmarkSamplerAdd(b *testing.B) {
	pool := NewPool(4)
	sm := NewSampler(DefaultConfig(), 1e9, pool)
	pkts := make([]capture.Packet, 4096)
	for i := range pkts {
		pkts[i] = capture.Packet{FlowHash: uint64(i % 512), PktHash: Mix(uint64(i) * 0x9e3779b97f4a7c15)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := &pkts[i&4095]
		p.TS = int64(i) * 1000
		if id := p.TS / 1e9; sm.cur != nil && id != sm.cur.ID {
			pool.Put(sm.Take(sm.cur.ID))
		}
		sm.Add(p)
	}
}
