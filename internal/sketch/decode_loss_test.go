package sketch

import "testing"

// TestAloneLoss: a flow alone in its cells of a p = 1 row gets that
// row's deficit; a cell another candidate's vLDA covers counts for
// neither; rows without p = 1 count for nothing.
func TestAloneLoss(t *testing.T) {
	p := Params{Rows: 2, Columns: 64, VLDA: 2, Sampling: []float64{0.5, 1}}
	snd, err := NewLDS(p)
	if err != nil {
		t.Fatal(err)
	}
	rcv, _ := NewLDS(p)
	// Three flows: a alone in row 1, b and c sharing a cell of row 1.
	flows := map[string]uint64{}
	var hs []uint64
	for h := uint64(1); len(hs) < 3; h += 0x9e3779b97f4a7c15 {
		c, _ := snd.FlowCells(h, 1)
		ok := true
		for _, o := range hs {
			oc, _ := snd.FlowCells(o, 1)
			d := (c - oc + 64) % 64
			switch len(hs) {
			case 1: // a must not touch b's cells
				ok = ok && d >= 2 && d <= 62
			case 2: // c overlaps b by one cell, not a
				if o == hs[0] {
					ok = ok && d >= 3 && d <= 61
				} else {
					ok = ok && d == 1
				}
			}
		}
		if ok {
			hs = append(hs, h)
		}
	}
	flows["a"], flows["b"], flows["c"] = hs[0], hs[1], hs[2]
	comp := map[string][]uint32{"a": make([]uint32, 4), "b": make([]uint32, 4), "c": make([]uint32, 4)}
	sent := map[string]int{"a": 50, "b": 50, "c": 50}
	lost := map[string]int{"a": 3, "b": 2, "c": 0}
	for name, h := range flows {
		for i := range sent[name] {
			pkt := h*31 + uint64(i)*0x2545f4914f6cdd1d
			snd.Update(h, pkt, int64(i), 1, 100)
			if i >= lost[name] {
				rcv.UpdateCount(h, pkt, int64(i)+1000, 1, 100, comp[name])
			}
		}
	}
	got, err := AloneLoss(snd, rcv, []FlowComposition{{Flow: flows["a"], Cells: comp["a"]}, {Flow: flows["b"], Cells: comp["b"]}, {Flow: flows["c"], Cells: comp["c"]}})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 3 {
		t.Errorf("flow alone in its p = 1 row: %v, want its 3 lost packets", got[0])
	}
	if got[1] > 2 || got[2] != 0 {
		t.Errorf("flows sharing a cell: %v and %v, want at most b's 2 lost packets for b and 0 for the loss-free c", got[1], got[2])
	}
	if _, err := AloneLoss(snd, nil, nil); err == nil {
		t.Error("a missing sketch is accepted")
	}
}

// BenchmarkAloneLoss: the decode benchmark's 150k flows
// (benchDecodeInput), beside EstimateDecode's time an interval.
func BenchmarkAloneLoss(b *testing.B) {
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"150k_4x17500_k1", Params{Rows: 4, Columns: 17500, VLDA: 1}},
		{"150k_4x17500_k5_multibank", Params{Rows: 4, Columns: 17500, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}}},
	} {
		snd, rcv, comp := benchDecodeInput(b, c.p, 150000)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := AloneLoss(snd, rcv, comp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
