package sample

import (
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/test/testutil"
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
	done := testutil.CPUMeter(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := &pkts[i&4095]
		p.TS = int64(i) * 1000
		if id := p.TS / 1e9; sm.cur != nil && id != sm.cur.ID {
			pool.Put(sm.Take(sm.cur.ID))
		}
		sm.Add(p)
	}
	done()
}

// BenchmarkJoin: the receiver's join at the paper's load, 150k flows in
// one interval (~1.2M candidates, 1 in 4 of ~4.8M packets), the default
// budget (16,384 flow samples) and the link sample. one-piece: piece I−1
// empty (as in a receiver's first interval); two-pieces: the steady state,
// piece I−1 holding the candidates of the interval before as well.
func BenchmarkJoin(b *testing.B) {
	for _, two := range []bool{false, true} {
		name := "one-piece"
		if two {
			name = "two-pieces"
		}
		b.Run(name, func(b *testing.B) { benchJoin(b, two) })
	}
}

func benchJoin(b *testing.B, two bool) {
	const T = int64(1e9)
	cfg := DefaultConfig()
	cfg.MaxCandidates = 1 << 22
	sm := NewSampler(cfg, T, nil)
	st := NewReceiverStore(cfg, 0)
	ps := NewPieces(8)
	first := 0
	if two {
		first = -4_800_000
	}
	var p capture.Packet
	for i := first; i < 4_800_000; i++ {
		f := uint64(i % 150_000)
		if i%3 == 0 {
			f = uint64(i % 100) // heavy flows
		}
		p = capture.Packet{TS: T + int64(i)*150 + 60e6, FlowHash: f*0x9e3779b97f4a7c15 + 1, PktHash: uint64(i)*0xbf58476d1ce4e5b9 + 7}
		if i == 0 {
			st.Cut(0, ps.Put) // piece 0: the interval before (empty in one-piece: it covers nothing before the first packet)
		}
		sm.Add(&p)
		p.TS += 1e6
		st.Add(&p)
	}
	if !two {
		st.Cut(0, ps.Put)
	}
	set := Select(sm.Take(1), T, cfg)
	st.Cut(1, ps.Put)
	prev, cur := ps.m[0], ps.m[1]
	b.ReportAllocs()
	done := testutil.CPUMeter(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ps.m[0], ps.m[1] = prev, cur
		prev.used, cur.used = 0, 0
		j := Join(ps, 1, set, Window{T: T, MaxDelay: 50e6, Guard: 1e6})
		if len(j.Flows) != len(set.Flows) || !j.Covered {
			b.Fatal("flows lost")
		}
	}
	done()
	b.ReportMetric(float64(len(prev.c.C)+len(cur.c.C)), "candidates")
}
