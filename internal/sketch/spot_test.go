package sketch

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestSpotUpdateEqualsUpdate: on a plain sketch, UpdateSpot at the cells
// Locate found leaves every cell as Update does, the spot's lines cover
// every cell it writes, and Locate refuses every sketch that is not
// plain or has too many rows.
func TestSpotUpdateEqualsUpdate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     Params
		plain bool
	}{
		{"defaults", Params{Rows: 4, Columns: 4096, VLDA: 1}, true},
		{"one row, odd columns", Params{Rows: 1, Columns: 1001, VLDA: 1}, true},
		{"eight rows", Params{Rows: SpotRows, Columns: 257, VLDA: 1}, true},
		{"nine rows", Params{Rows: SpotRows + 1, Columns: 257, VLDA: 1}, false},
		{"k 3", Params{Rows: 4, Columns: 4096, VLDA: 3}, false},
		{"sampled rows", Params{Rows: 4, Columns: 4096, VLDA: 1, Sampling: []float64{0.5, 1, 1, 1}}, false},
		{"byte counters", Params{Rows: 4, Columns: 4096, VLDA: 1, Bytes: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := NewLDS(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := NewLDS(tc.p)
			var s Spot
			if ok := got.Locate(1, &s); ok != tc.plain {
				t.Fatalf("Locate reports plain %v, want %v", ok, tc.plain)
			}
			if !tc.plain {
				return
			}
			r := rand.New(rand.NewPCG(11, 12))
			var lines []uintptr
			for range 5000 {
				fh, ph, ts, w := r.Uint64(), r.Uint64(), r.Int64N(1e9), uint32(1+r.IntN(3))
				want.Update(fh, ph, ts, w, 100)
				got.Locate(fh, &s)
				lines = got.AppendSpotLines(&s, lines[:0])
				before := append([]Cell(nil), got.cells...)
				got.UpdateSpot(&s, ph, ts, w)
				for i := range got.cells {
					if got.cells[i] == before[i] {
						continue
					}
					a := uintptr(unsafe.Pointer(&got.cells[i]))
					if !covered(lines, a) || !covered(lines, a+unsafe.Sizeof(Cell{})-1) {
						t.Fatalf("cell %d written, its lines not among %x", i, lines)
					}
				}
			}
			if !got.Equal(want) {
				t.Fatal("UpdateSpot's sketch differs from Update's")
			}
			if a := testing.AllocsPerRun(100, func() {
				got.Locate(3, &s)
				lines = got.AppendSpotLines(&s, lines[:0])
				got.UpdateSpot(&s, 4, 5, 1)
			}); a != 0 {
				t.Errorf("the spot path allocated %v times a packet, want 0", a)
			}
		})
	}
}

// TestLDASpotEqualsUpdate: UpdateAt at the cell Locate found is Update,
// and AppendCellLines covers that cell.
func TestLDASpotEqualsUpdate(t *testing.T) {
	want, err := NewLDA(DefaultLDAParams())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := NewLDA(DefaultLDAParams())
	r := rand.New(rand.NewPCG(13, 14))
	for range 5000 {
		ph, ts := r.Uint64(), r.Int64N(1e9)
		want.Update(ph, ts)
		i := got.Locate(ph)
		lines := got.AppendCellLines(i, nil)
		got.UpdateAt(i, ph, ts)
		a := uintptr(unsafe.Pointer(&got.cells[i]))
		if !covered(lines, a) || !covered(lines, a+unsafe.Sizeof(LDACell{})-1) {
			t.Fatalf("cell %d written, its lines not among %x", i, lines)
		}
	}
	x, _ := want.MarshalBinary()
	y, _ := got.MarshalBinary()
	if string(x) != string(y) {
		t.Fatal("UpdateAt's aggregator differs from Update's")
	}
}
