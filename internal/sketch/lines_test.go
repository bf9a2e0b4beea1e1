package sketch

import (
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// TestAppendLines: the addresses a prefetch asks for cover every cell and
// byte counter an update writes (both the first and the last byte of each
// cell), whatever the sketch's shape.
func TestAppendLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Params
	}{
		{"defaults: k 1, every row", Params{Rows: 4, Columns: 4096, VLDA: 1}},
		{"k 5, sampled rows", Params{Rows: 4, Columns: 87500, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}}},
		{"byte counters", Params{Rows: 4, Columns: 4096, VLDA: 1, Bytes: true}},
		{"odd columns, two rows", Params{Rows: 2, Columns: 1001, VLDA: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 4))
			var lines []uintptr
			l, err := NewLDS(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			for range 300 {
				clear(l.cells)
				clear(l.bytes)
				fh, ph := r.Uint64(), r.Uint64()
				lines = l.AppendLines(fh, ph, lines[:0])
				l.Update(fh, ph, 12345, 1, 100)
				for i, c := range l.cells {
					if c.empty() {
						continue
					}
					a := uintptr(unsafe.Pointer(&l.cells[i]))
					if !covered(lines, a) || !covered(lines, a+unsafe.Sizeof(Cell{})-1) {
						t.Fatalf("cell %d written, its lines not among %x", i, lines)
					}
					if l.bytes != nil && !covered(lines, uintptr(unsafe.Pointer(&l.bytes[i]))) {
						t.Fatalf("byte counter %d written, its line not among %x", i, lines)
					}
				}
			}
			if a := testing.AllocsPerRun(100, func() { lines = l.AppendLines(1, 2, lines[:0]) }); a != 0 {
				t.Errorf("AppendLines allocated %v times a call, want 0 (it runs for every packet)", a)
			}
		})
	}
	t.Run("LDA", func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		var lines []uintptr
		for range 2000 {
			a, err := NewLDA(DefaultLDAParams())
			if err != nil {
				t.Fatal(err)
			}
			ph := r.Uint64()
			lines = a.AppendLines(ph, lines[:0])
			a.Update(ph, 777)
			for i, c := range a.cells {
				if c == (LDACell{}) {
					continue
				}
				p := uintptr(unsafe.Pointer(&a.cells[i]))
				if !covered(lines, p) || !covered(lines, p+unsafe.Sizeof(LDACell{})-1) {
					t.Fatalf("cell %d written, its lines not among %x", i, lines)
				}
			}
		}
	})
}

// covered reports whether the cache line of a is one of the lines' lines.
func covered(lines []uintptr, a uintptr) bool {
	return slices.ContainsFunc(lines, func(l uintptr) bool { return l&^63 == a&^63 })
}
