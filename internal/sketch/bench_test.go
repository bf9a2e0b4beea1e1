package sketch

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lds-net/lds/test/testutil"
)

// benchHashes pre-draws hashes so the benchmark measures Update alone.
func benchHashes(n int) (flows, pkts []uint64) {
	rng := rand.New(rand.NewPCG(40, 41))
	flows = make([]uint64, n)
	pkts = make([]uint64, n)
	fl := make([]uint64, 150000)
	for i := range fl {
		fl[i] = rng.Uint64()
	}
	for i := range flows {
		flows[i] = fl[rng.IntN(len(fl))]
		pkts[i] = rng.Uint64()
	}
	return flows, pkts
}

func BenchmarkUpdate(b *testing.B) {
	const n = 1 << 16
	flows, pkts := benchHashes(n)
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"R4_k1_p1_C4096", Params{Rows: 4, Columns: 4096, VLDA: 1}},
		{"R4_k1_p1_C17500", Params{Rows: 4, Columns: 17500, VLDA: 1}},
		{"R4_k5_multibank_C4096", Params{Rows: 4, Columns: 4096, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}}},
		{"R4_k5_multibank_C87500", Params{Rows: 4, Columns: 87500, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}}},
		{"R4_k1_p1_C4096_bytes", Params{Rows: 4, Columns: 4096, VLDA: 1, Bytes: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, _ := NewLDS(c.p)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				j := i & (n - 1)
				l.Update(flows[j], pkts[j], int64(i), 1, 1500)
				i++
			}
		})
	}
}

func BenchmarkLDAUpdate(b *testing.B) {
	const n = 1 << 16
	_, pkts := benchHashes(n)
	a, _ := NewLDA(DefaultLDAParams())
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		a.Update(pkts[i&(n-1)], int64(i))
		i++
	}
}

// simSketches builds a sender/receiver pair over nFlows flows of
// Pareto(0.9) sizes capped at 2000 packets (about the paper's trace
// shape: 150k flows, a few million packets), 0.1 % loss, streamed straight
// into the sketches.
func simSketches(b *testing.B, p Params, nFlows int) (*LDS, *LDS, []uint64) {
	rng := rand.New(rand.NewPCG(7, 8))
	snd, err := NewLDS(p)
	if err != nil {
		b.Fatal(err)
	}
	rcv, _ := NewLDS(p)
	keys := make([]uint64, nFlows)
	for i := range keys {
		f := rng.Uint64()
		keys[i] = f
		n := int(min(math.Pow(1-rng.Float64(), -1/0.9), 2000))
		for j := 0; j < n; j++ {
			h, ts := rng.Uint64(), rng.Int64N(1e9)
			snd.Update(f, h, ts, 1, 500)
			if rng.IntN(1000) != 0 {
				rcv.Update(f, h, ts+int64(1e5*rng.ExpFloat64()), 1, 500)
			}
		}
	}
	return snd, rcv, keys
}

func BenchmarkEstimatePaper(b *testing.B) {
	p := Params{Rows: 4, Columns: 17500, VLDA: 1}
	snd, rcv, keys := simSketches(b, p, 150000)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := EstimatePaper(snd, rcv, keys, EstimateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(keys)), "ns/flow")
}

func BenchmarkEncode(b *testing.B) {
	for _, p := range []Params{
		{Rows: 4, Columns: 17500, VLDA: 1},
		{Rows: 4, Columns: 4096, VLDA: 1},
	} {
		snd, _, _ := simSketches(b, p, 150000)
		enc, _ := snd.MarshalBinary()
		b.Run(fmt.Sprintf("Marshal_%dx%d", p.Rows, p.Columns), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := snd.MarshalBinary(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(enc)), "bytes")
			b.ReportMetric(float64(40*snd.Len()), "raw_bytes")
		})
		b.Run(fmt.Sprintf("Unmarshal_%dx%d", p.Rows, p.Columns), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := UnmarshalLDS(enc, snd.Params()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLDSEncoding: one interval's sketch at 1 Mpps (1M packets of
// 38k flows on 4 × 4781, the paper's load), encoded and decoded; reports
// the encoded bytes per non-empty cell.
func BenchmarkLDSEncoding(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	l, _ := NewLDS(Params{Rows: 4, Columns: 4781, VLDA: 1})
	for range 1_000_000 {
		l.Update(rng.Uint64N(38000)*0x9e3779b97f4a7c15, rng.Uint64(), rng.Int64N(1e9), 1, 500)
	}
	enc, err := l.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	used := 0
	for i := 0; i < l.Len(); i++ {
		if !l.Cell(i).empty() {
			used++
		}
	}
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = l.MarshalBinary()
		}
		b.ReportMetric(float64(len(enc))/float64(used), "B/cell")
	})
	b.Run("unmarshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := UnmarshalLDS(enc, l.Params()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkUpdateRing is BenchmarkUpdate at the defaults (R4, k1, C4096)
// with the capture ring's traffic between two packets: each update first
// reads and writes one 128-byte frame slot of a 64 MiB ring, in order, as
// the kernel and the capture loop do live. The ring evicts the sketch's
// cells from the caches between two packets of a cell, which the plain
// benchmark never does; the cells' layout shows here.
func BenchmarkUpdateRing(b *testing.B) {
	const n = 1 << 16
	const slot, ringBytes = 128, 64 << 20
	flows, pkts := benchHashes(n)
	ring := make([]byte, ringBytes)
	l, _ := NewLDS(DefaultParams())
	b.ReportAllocs()
	done := testutil.CPUMeter(b)
	defer done()
	i, off := 0, 0
	var sink byte
	for b.Loop() {
		fr := ring[off : off+slot]
		fr[0]++
		fr[64]++
		sink += fr[8]
		off += slot
		if off == ringBytes {
			off = 0
		}
		j := i & (n - 1)
		l.Update(flows[j], pkts[j], int64(i), 1, 1500)
		i++
	}
	if sink == 1 {
		b.Log(sink)
	}
}
