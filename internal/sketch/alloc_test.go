package sketch

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// allocBytes is what f allocates on the heap: the least
// runtime.MemStats.TotalAlloc grows over three calls of f. The count is the
// whole process's, and another goroutine (the testing package's own) can
// allocate meanwhile; it only ever adds, so the least of three calls of a
// deterministic f is f's own.
func allocBytes(f func()) uint64 {
	least := ^uint64(0)
	for range 3 {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		f()
		runtime.ReadMemStats(&b)
		least = min(least, b.TotalAlloc-a.TotalAlloc)
	}
	return least
}

// decodeAllowance bounds what decoding n input bytes may allocate: one
// sketch of the agreed size (base), the cells' columns (at most 6 uint64
// values per 4 input bytes), and small change for errors.
func decodeAllowance(base uint64, n int) uint64 {
	return base + 16*uint64(n) + 16<<10
}

// hostileLDSHeader is a 22-byte LDS that announces 1 x 4 Mi cells and none
// of them set: before the decoder took the agreed dimensions, it made the
// receiver allocate the whole sketch (~192 MB) to find that out.
func hostileLDSHeader() []byte {
	b := []byte(ldsMagic)
	b = append(b, formatVersion)
	b = binary.AppendUvarint(b, 1)     // rows
	b = binary.AppendUvarint(b, 4<<20) // columns
	b = binary.AppendUvarint(b, 1)     // vlda
	b = append(b, 0)                   // flags
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(1))
	b = binary.AppendVarint(b, 0)  // mean
	b = binary.AppendUvarint(b, 0) // cells
	return b
}

// hostileLDAHeader announces the largest aggregator the format allows.
func hostileLDAHeader() []byte {
	b := []byte(ldaMagic)
	b = append(b, formatVersion)
	b = binary.AppendUvarint(b, MaxLDABanks)
	b = binary.AppendUvarint(b, MaxLDACells)
	b = binary.AppendVarint(b, 0)
	b = binary.AppendUvarint(b, 0)
	return b
}

// TestHostileHeaderAllocatesNothing: a header announcing a sketch bigger
// than the agreed one is refused before any of it is allocated.
func TestHostileHeaderAllocatesNothing(t *testing.T) {
	h := hostileLDSHeader()
	if len(h) != 22 {
		t.Fatalf("the hostile header is %d bytes, want 22", len(h))
	}
	var err error
	got := allocBytes(func() { _, err = UnmarshalLDS(h, DefaultParams()) })
	if err == nil {
		t.Fatal("a 1 x 4 Mi sketch was accepted where 4 x 4096 is agreed")
	}
	t.Logf("22-byte header announcing 1 x %d cells: refused (%v), %d bytes allocated", 4<<20, err, got)
	if got > 16<<10 {
		t.Errorf("refusing it allocated %d bytes", got)
	}
	got = allocBytes(func() { _, err = UnmarshalLDA(hostileLDAHeader(), DefaultLDAParams()) })
	if err == nil || got > 16<<10 {
		t.Errorf("LDA header of %d x %d cells: err %v, %d bytes allocated", MaxLDABanks, MaxLDACells, err, got)
	}
}

// TestMaxEncodedBounds: sketches whose every cell holds values that cost
// the most bits encode within MaxEncodedLDS / MaxEncodedLDA.
func TestMaxEncodedBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, p := range []Params{{Rows: 2, Columns: 64, VLDA: 1, Bytes: true}, {Rows: 4, Columns: 512, VLDA: 3, Sampling: []float64{0.5, 1, 1, 1}}} {
		l, err := NewLDS(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := range l.cells {
			l.cells[i] = Cell{S: int64(r.Uint64()), SPM: int64(r.Uint64()), SN: int64(r.Uint64()), N: int64(r.Uint64()), D: r.Uint64() >> 32}
			if p.Bytes {
				l.bytes[i] = r.Uint64()
			}
		}
		b, err := l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if bound := MaxEncodedLDS(p); len(b) > bound {
			t.Errorf("%+v: %d bytes, bound %d", p, len(b), bound)
		}
	}
	ap := LDAParams{Banks: 4, Cells: 64}
	a, err := NewLDA(ap)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.cells {
		a.cells[i] = LDACell{S: int64(r.Uint64()), N: int64(r.Uint64()), D: r.Uint64() >> 32}
	}
	b, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if bound := MaxEncodedLDA(ap); len(b) > bound {
		t.Errorf("LDA %+v: %d bytes, bound %d", ap, len(b), bound)
	}
}
