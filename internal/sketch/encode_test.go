package sketch

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestLDSEncodeRoundTrip(t *testing.T) {
	for _, p := range []Params{
		DefaultParams(),
		{Rows: 4, Columns: 1000, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}, Bytes: true},
		{Rows: 1, Columns: 1, VLDA: 1},
	} {
		rng := rand.New(rand.NewPCG(30, 31))
		l, _ := NewLDS(p)
		empty, _ := l.MarshalBinary()
		if len(empty) > 16+8*p.Rows {
			t.Errorf("%+v: empty sketch encodes to %d bytes", p, len(empty))
		}
		for i := 0; i < 3000; i++ {
			l.Update(rng.Uint64(), rng.Uint64(), rng.Int64N(2e9)-1e9, uint32(1+rng.IntN(3)), uint32(rng.IntN(1500)))
		}
		b, err := l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		back, err := UnmarshalLDS(b, p)
		if err != nil {
			t.Fatalf("%+v: decode: %v", p, err)
		}
		if !back.Equal(l) {
			t.Fatalf("%+v: round trip changed the sketch", p)
		}
		t.Logf("%dx%d k=%d bytes=%v: %d bytes for %d packets (%d bytes raw)", p.Rows, p.Columns, p.VLDA, p.Bytes, len(b), 3000, 40*l.Len())
		// Every truncation is refused with an error, never a panic.
		for cut := 0; cut < len(b); cut += 1 + len(b)/200 {
			if _, err := UnmarshalLDS(b[:cut], p); err == nil {
				t.Fatalf("accepted a truncation to %d of %d bytes", cut, len(b))
			}
		}
		if _, err := UnmarshalLDS(append(b, 0), p); err == nil || !strings.Contains(err.Error(), "trailing") {
			t.Fatalf("trailing byte: %v", err)
		}
	}
}

func TestLDSDecodeErrors(t *testing.T) {
	l, _ := NewLDS(Params{Rows: 4, Columns: 4096, VLDA: 1})
	good, _ := l.MarshalBinary()
	agreed, tiny := Params{Rows: 4, Columns: 4096, VLDA: 1}, Params{Rows: 1, Columns: 1, VLDA: 1}
	cases := []struct {
		name, data, want string
		agreed           Params
	}{
		{"magic", "XXXX\x01", "bad magic", agreed},
		{"version", "LDSk\x09", "version", agreed},
		{"other dimensions", string(good), "the agreed sketch is 4 x 1024", Params{Rows: 4, Columns: 1024, VLDA: 1}},
		{"other sampling", string(good), "the agreed sketch.sampling is 0.5", Params{Rows: 4, Columns: 4096, VLDA: 1, Sampling: []float64{0.5, 1, 1, 1}}},
		{"old version", "LDSk\x01\x01\x01\x01\x00", "run the same lds version at both ends", agreed},
		{"rows", "LDSk\x02\x00", "rows", agreed},
		{"huge columns", "LDSk\x02\x01\xff\xff\xff\xff\x0f", "columns", agreed},
		{"count vs bytes", "LDSk\x02\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\xf0\x3f\x00\x01", "non-empty cells claimed", tiny},
		{"bad rate", "LDSk\x02\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "sketch.sampling", tiny},
	}
	for _, c := range cases {
		_, err := UnmarshalLDS([]byte(c.data), c.agreed)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// FuzzUnmarshalLDS: whatever the bytes, the decoder never panics,
// allocates no more than one sketch of the agreed parameters plus a bound
// proportional to the input (measured: runtime.MemStats.TotalAlloc), and
// accepts only the canonical encoding of a sketch of exactly those
// parameters. `go test` runs the seed corpus.
func FuzzUnmarshalLDS(f *testing.F) {
	agreed := Params{Rows: 2, Columns: 16, VLDA: 2, Sampling: []float64{0.5, 1}, Bytes: true}
	l, _ := NewLDS(agreed)
	for i := uint64(0); i < 30; i++ {
		l.Update(i*77, i*0x9e3779b97f4a7c15, int64(i)*1000, 1, 100)
	}
	b, _ := l.MarshalBinary()
	f.Add(b)
	f.Add([]byte("LDSk\x02\x40\x80\x80\x80\x08\x01\x00"))
	f.Add(hostileLDSHeader())
	f.Add(b[:len(b)/2])
	f.Add([]byte{})
	base := allocBytes(func() { _, _ = NewLDS(agreed) })
	f.Fuzz(func(t *testing.T, data []byte) {
		var x *LDS
		var err error
		got := allocBytes(func() { x, err = UnmarshalLDS(data, agreed) })
		if limit := decodeAllowance(base, len(data)); got > limit {
			t.Fatalf("decoding %d bytes allocated %d bytes, more than the agreed sketch allows (%d)", len(data), got, limit)
		}
		if err != nil {
			return
		}
		if !x.Params().Equal(agreed) {
			t.Fatalf("decoded parameters %+v, agreed %+v", x.Params(), agreed)
		}
		again, err := x.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(data) {
			t.Fatalf("accepted a non-canonical encoding: %x re-encodes to %x", data, again)
		}
		y, err := UnmarshalLDS(again, agreed)
		if err != nil || !y.Equal(x) {
			t.Fatalf("re-encoding does not round-trip: %v", err)
		}
	})
}

// TestUnmarshalTruncatedNoPanic: a cell count that the gaps cannot fit,
// cut short, is refused with an error, never a panic (the wire fuzzer
// found one: after a failed read the cell index kept advancing).
func TestUnmarshalTruncatedNoPanic(t *testing.T) {
	l, err := NewLDS(Params{Rows: 2, Columns: 8, VLDA: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < l.Len(); i++ {
		l.cells[i] = Cell{S: int64(i) * 1000, SPM: -int64(i), SN: 1, N: 1, D: uint64(i)}
	}
	a, err := NewLDA(LDAParams{Banks: 2, Cells: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.cells {
		a.cells[i] = LDACell{S: int64(i), N: 1, D: uint64(i)}
	}
	encL, _ := l.MarshalBinary()
	encA, _ := a.MarshalBinary()
	// Every cell is non-empty, so the count is the whole sketch and every
	// gap is 0; making the first gap 1 claims one cell more than fits.
	mL := binary.AppendVarint(nil, 7500)             // mean timestamp: S = 1000·i, N = 1 over 16 cells
	mA := binary.AppendVarint(nil, 4)                // round(3.5)
	ldsFirstGap := 4 + 1 + 3 + 1 + 2*8 + len(mL) + 1 // magic, version, dims, flags, rates, mean, count
	ldaFirstGap := 4 + 1 + 2 + len(mA) + 1           // magic, version, dims, mean, count
	if encL[ldsFirstGap] != 0 || encA[ldaFirstGap] != 0 {
		t.Fatalf("layout changed: first gaps %d, %d", encL[ldsFirstGap], encA[ldaFirstGap])
	}
	encL[ldsFirstGap], encA[ldaFirstGap] = 1, 1
	for n := 0; n <= len(encL); n++ {
		if _, err := UnmarshalLDS(encL[:n], l.Params()); err == nil {
			t.Fatalf("LDS prefix of %d/%d bytes accepted", n, len(encL))
		}
	}
	for n := 0; n <= len(encA); n++ {
		if _, err := UnmarshalLDA(encA[:n], a.Params()); err == nil {
			t.Fatalf("LDA prefix of %d/%d bytes accepted", n, len(encA))
		}
	}
}
