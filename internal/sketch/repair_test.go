package sketch

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// repairTrace draws flows of 20–400 packets with bimodal per-packet delays
// (a queue that fills: 10 µs or 80 ms); lossy flows lose lossP of their
// packets, the rest nothing; extraP of the received packets come with a
// twin the sender never saw (a duplicate with its own hash).
func repairTrace(seed uint64, flows int, lossyShare, lossP, extraP float64) (snd, rcv, lost, extra []pk) {
	rng := rand.New(rand.NewPCG(seed, seed^0xbeef))
	for range flows {
		f := rng.Uint64()
		w := uint32(1)
		if rng.IntN(5) == 0 {
			w = uint32(2 + rng.IntN(50))
		}
		lossy := rng.Float64() < lossyShare
		for range 20 + rng.IntN(380) {
			d := int64(10_000)
			if rng.IntN(3) == 0 {
				d = 80_000_000
			}
			x := pk{flow: f, hash: rng.Uint64(), ts: rng.Int64N(1e9), delay: d + rng.Int64N(1000), w: w, size: 100}
			snd = append(snd, x)
			if lossy && rng.Float64() < lossP {
				lost = append(lost, x)
				continue
			}
			rcv = append(rcv, x)
			if rng.Float64() < extraP {
				e := x
				e.hash = rng.Uint64()
				extra = append(extra, e)
				rcv = append(rcv, e)
			}
		}
	}
	return snd, rcv, lost, extra
}

// repairList is what the receiver knows: every lost packet with its send
// time and every extra one with its receive time, each known with
// probability known (the rest without a time).
func repairList(rng *rand.Rand, lost, extra []pk, known float64) (list []RepairPacket, unknown []pk) {
	for _, x := range lost {
		p := RepairPacket{Flow: x.flow, Pkt: x.hash, T: x.ts, W: x.w, Known: rng.Float64() < known}
		if !p.Known {
			p.T = 0
			unknown = append(unknown, x)
		}
		list = append(list, p)
	}
	for _, x := range extra {
		p := RepairPacket{Flow: x.flow, Pkt: x.hash, T: x.ts + x.delay, W: x.w, Known: rng.Float64() < known, Extra: true}
		if !p.Known {
			p.T = 0
			unknown = append(unknown, x)
		}
		list = append(list, p)
	}
	return list, unknown
}

// TestRepairLDS: after the repair, every cell no unknown packet touches
// holds exactly what a sketch of the packets both ends saw holds (built
// from the trace, never from the repaired sketch), at both ends; every
// cell an unknown packet touches is as it was; and the decoded means of
// flows whose cells are all repaired or clean equal the trace's mean
// delay of their received packets.
func TestRepairLDS(t *testing.T) {
	cases := []struct {
		name   string
		p      Params
		known  float64
		extraP float64
	}{
		{"all-known", Params{Rows: 4, Columns: 4096, VLDA: 1}, 1, 0},
		{"all-known-vlda-sampled-bytes", Params{Rows: 4, Columns: 2048, VLDA: 3, Sampling: []float64{1, 0.5, 1, 0.25}, Bytes: true}, 1, 0},
		{"extra-all-known", Params{Rows: 3, Columns: 4096, VLDA: 1}, 1, 0.01},
		{"extra-all-known-vlda", Params{Rows: 3, Columns: 4096, VLDA: 2}, 1, 0.01},
		{"a-fifth-known", Params{Rows: 4, Columns: 4096, VLDA: 1}, 0.2, 0.005},
		{"none-known", Params{Rows: 4, Columns: 4096, VLDA: 1}, 0, 0.005},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(40 + i)
			snd, rcv, lost, extra := repairTrace(seed, 300, 0.3, 0.4, tc.extraP)
			s, r := build(t, tc.p, snd, rcv)
			s0, r0 := s.Clone(), r.Clone()
			list, unknown := repairList(rand.New(rand.NewPCG(seed, 1)), lost, extra, tc.known)
			rep, st, err := RepairLDS(s, r, list)
			if err != nil {
				t.Fatal(err)
			}
			// Truth: both ends' sketches of the packets both saw.
			var both []pk
			isExtra := map[uint64]bool{}
			for _, x := range extra {
				isExtra[x.hash] = true
			}
			for _, x := range rcv {
				if !isExtra[x.hash] {
					both = append(both, x)
				}
			}
			ts, tr := build(t, tc.p, both, both)
			blocked := map[int32]bool{}
			var pos []int32
			for _, x := range unknown {
				for _, c := range s.Positions(x.flow, x.hash, pos) {
					if c >= 0 {
						blocked[c] = true
					}
				}
			}
			for c := range s.Len() {
				switch {
				case blocked[int32(c)]:
					if s.Cell(c) != s0.Cell(c) || r.Cell(c) != r0.Cell(c) || rep.Has(c) {
						t.Fatalf("cell %d holds a packet without its time but was changed", c)
					}
				default:
					if s.Cell(c) != ts.Cell(c) || r.Cell(c) != tr.Cell(c) {
						t.Fatalf("cell %d: repaired %+v / %+v, want the sketch of the packets both ends saw %+v / %+v", c, s.Cell(c), r.Cell(c), ts.Cell(c), tr.Cell(c))
					}
				}
				if s.ByteCount(c) != s0.ByteCount(c) {
					t.Fatalf("cell %d: byte counter changed", c)
				}
			}
			if st.Blocked != len(blocked) {
				t.Errorf("Blocked = %d, want %d", st.Blocked, len(blocked))
			}
			if tc.known == 1 && (st.Packets != len(list) || UsableCellRatio(s, r) != 1) {
				t.Errorf("every time known: %d of %d packets taken out, usable ratio %.4f, want all and 1", st.Packets, len(list), UsableCellRatio(s, r))
			}
			if tc.known == 0 && (st.Cells != 0 || !s.Equal(s0) || !r.Equal(r0)) {
				t.Errorf("no time known: %d cells repaired, want none and both sketches unchanged", st.Cells)
			}
			checkRepairedMeans(t, s, r, rep, st, both, lost)
		})
	}
}

// checkRepairedMeans decodes the repaired pair (the composition counts the
// received packets the repair kept, the extra ones taken out) and, where
// the decode is exact (k = 1, no sampling), checks every lossy flow whose
// cells are all usable: its mean equals its received packets' mean delay.
// Elsewhere the cell equality above already makes the decode that of the
// packets both ends saw.
func checkRepairedMeans(t *testing.T, s, r *LDS, rep *Repaired, st RepairStats, both, lost []pk) {
	t.Helper()
	var keys []uint64
	seen := map[uint64]bool{}
	lossy := map[uint64]bool{}
	for _, x := range lost {
		lossy[x.flow] = true
	}
	for _, x := range both {
		if !seen[x.flow] {
			seen[x.flow] = true
			keys = append(keys, x.flow)
		}
	}
	comp := compositions(r, keys, both)
	est, err := EstimateDecode(s, r, comp, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr := truthOf(both)
	p := s.Params()
	exact := p.VLDA == 1 && !slices.ContainsFunc(p.Sampling, func(x float64) bool { return x != 1 })
	var checked, repaired int
	for _, e := range est {
		if !exact || !lossy[e.Flow] || e.Usable < p.Rows*p.VLDA || !e.Identified {
			continue
		}
		checked++
		if rep.FlowCells(s, e.Flow) > 0 {
			repaired++
		}
		if want := tr[e.Flow].mean(); math.Abs(e.Delay-want) > 1e-6*want {
			t.Errorf("flow %x: repaired mean %.1f ns, truth %.1f", e.Flow, e.Delay, want)
		}
	}
	t.Logf("%d cells repaired, %d left lossy (a packet without its time), %d packets taken out; %d lossy flows with every cell usable, %d of them through repaired cells",
		st.Cells, st.Blocked, st.Packets, checked, repaired)
	if exact && st.Blocked == 0 && st.Cells > 0 && repaired == 0 {
		t.Error("cells were repaired but no lossy flow gained a usable vLDA")
	}
}

// TestRepairLDA: the aggregator's cells that only known packets left lossy
// equal the aggregator of the packets both ends saw; the others are as
// they were; with every time known the link delay is the exact mean.
func TestRepairLDA(t *testing.T) {
	for _, known := range []float64{1, 0.2} {
		snd, rcv, lost, extra := repairTrace(7, 200, 0.3, 0.4, 0.002)
		p := DefaultLDAParams()
		mk := func(pkts []pk, rx bool) *LDA {
			a, _ := NewLDA(p)
			for _, x := range pkts {
				ts := x.ts
				if rx {
					ts += x.delay
				}
				a.Update(x.hash, ts)
			}
			return a
		}
		s, r := mk(snd, false), mk(rcv, true)
		s0, r0 := s.Clone(), r.Clone()
		list, unknown := repairList(rand.New(rand.NewPCG(8, 9)), lost, extra, known)
		n, err := RepairLDA(s, r, list)
		if err != nil {
			t.Fatal(err)
		}
		isExtra := map[uint64]bool{}
		for _, x := range extra {
			isExtra[x.hash] = true
		}
		var both []pk
		var sum float64
		for _, x := range rcv {
			if !isExtra[x.hash] {
				both = append(both, x)
				sum += float64(x.delay)
			}
		}
		ts, tr := mk(both, false), mk(both, true)
		blocked := map[uint64]bool{}
		for _, x := range unknown {
			blocked[s.cellOf(x.hash)] = true
		}
		for i := range s.cells {
			if blocked[uint64(i)] {
				if s.cells[i] != s0.cells[i] || r.cells[i] != r0.cells[i] {
					t.Fatalf("known %.1f: cell %d holds a packet without its time but was changed", known, i)
				}
			} else if s.cells[i] != ts.cells[i] || r.cells[i] != tr.cells[i] {
				t.Fatalf("known %.1f: cell %d differs from the aggregator of the packets both ends saw", known, i)
			}
		}
		if known == 1 {
			e := EstimateLDA(s, r)
			if want := sum / float64(len(both)); math.Abs(e.Delay-want) > 1e-6*want {
				t.Errorf("link delay after repair %.1f, truth %.1f", e.Delay, want)
			}
		}
		t.Logf("known %.1f: %d cells repaired", known, n)
	}
}

func TestRepairMismatch(t *testing.T) {
	a, _ := NewLDS(Params{Rows: 4, Columns: 64, VLDA: 1})
	b, _ := NewLDS(Params{Rows: 4, Columns: 128, VLDA: 1})
	if _, _, err := RepairLDS(a, b, nil); err == nil {
		t.Error("sketches of different sizes repaired")
	}
	if _, _, err := RepairLDS(a, nil, nil); err == nil {
		t.Error("a missing sketch repaired")
	}
	x, _ := NewLDA(LDAParams{Banks: 2, Cells: 4})
	y, _ := NewLDA(LDAParams{Banks: 2, Cells: 8})
	if _, err := RepairLDA(x, y, nil); err == nil {
		t.Error("aggregators of different sizes repaired")
	}
}

// BenchmarkRepairLDS: the receiver's cost of a repair at the default
// sketch (4 × 4096) with 10,000 listed packets (lost.capacity's tenfold
// default), every time known: the two clones and the repair.
func BenchmarkRepairLDS(b *testing.B) {
	snd, rcv, lost, _ := repairTrace(3, 1000, 0.3, 0.2, 0)
	p := DefaultParams()
	s, r := build(b, p, snd, rcv)
	list, _ := repairList(rand.New(rand.NewPCG(1, 2)), lost[:min(len(lost), 10000)], nil, 1)
	b.ReportAllocs()
	for b.Loop() {
		sc, rc := s.Clone(), r.Clone()
		if _, _, err := RepairLDS(sc, rc, list); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(list)), "packets")
}
