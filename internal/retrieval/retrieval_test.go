package retrieval

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomSet draws n distinct keys and independent random values.
func randomSet(n int, seed uint64) ([]uint64, []bool) {
	r := rand.New(rand.NewPCG(seed, 99))
	seen := make(map[uint64]struct{}, n)
	keys, vals := make([]uint64, 0, n), make([]bool, 0, n)
	for len(keys) < n {
		k := r.Uint64()
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		keys = append(keys, k)
		vals = append(vals, r.IntN(2) == 1)
	}
	return keys, vals
}

// TestBuildGetExact: every key of the set gets exactly its value, at every
// size, after a round trip through the encoding too, and the table stays
// near the binary fuse size (bits per key) for large sets.
func TestBuildGetExact(t *testing.T) {
	tests := []struct {
		n           int
		maxBitsPerK float64 // 0: not checked (small sets pay fixed segments)
	}{{0, 0}, {1, 0}, {2, 0}, {3, 0}, {10, 0}, {100, 0}, {1000, 0}, {20_000, 1.4}, {100_000, 1.25}, {300_000, 1.22}}
	if testing.Short() {
		tests = tests[:len(tests)-1]
	}
	var b Builder // reused across sizes, as the sender does
	for _, tc := range tests {
		keys, vals := randomSet(tc.n, uint64(tc.n)+1)
		f, err := b.Build(keys, vals)
		if err != nil {
			t.Fatalf("n=%d: %v", tc.n, err)
		}
		enc, err := f.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) != EncodedLen(tc.n, 1) {
			t.Errorf("n=%d: encoding %d bytes, EncodedLen says %d", tc.n, len(enc), EncodedLen(tc.n, 1))
		}
		g, err := Unmarshal(enc, tc.n)
		if err != nil {
			t.Fatalf("n=%d: decoding: %v", tc.n, err)
		}
		if f.Len() != tc.n || g.Len() != tc.n {
			t.Errorf("n=%d: Len %d / decoded %d", tc.n, f.Len(), g.Len())
		}
		wrong := 0
		for i, k := range keys {
			if f.Get(k) != vals[i] || g.Get(k) != vals[i] {
				wrong++
			}
		}
		if wrong > 0 {
			t.Errorf("n=%d: %d keys answered wrongly", tc.n, wrong)
		}
		if again, _ := g.MarshalBinary(); !bytes.Equal(again, enc) {
			t.Errorf("n=%d: re-encoding the decoded function differs", tc.n)
		}
		if bpk := float64(f.SizeBits()) / float64(max(tc.n, 1)); tc.maxBitsPerK > 0 && bpk > tc.maxBitsPerK {
			t.Errorf("n=%d: %.3f bits a key, want <= %.2f", tc.n, bpk, tc.maxBitsPerK)
		}
	}
}

// TestAllSameValue: a set whose values are all one bit still answers each
// key exactly (the table is not trivially constant: cells are shared).
func TestAllSameValue(t *testing.T) {
	for _, v := range []bool{false, true} {
		keys, vals := randomSet(5000, 3)
		for i := range vals {
			vals[i] = v
		}
		f, err := Build(keys, vals)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if f.Get(k) != v {
				t.Fatalf("value %v: key %#x answered %v", v, k, !v)
			}
		}
	}
}

// TestOutsideKeysArbitrary: keys never added get answers close to a fair
// coin, not a constant (the receiver must not rely on them either way).
func TestOutsideKeysArbitrary(t *testing.T) {
	keys, vals := randomSet(50_000, 5)
	f, err := Build(keys, vals)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(77, 77))
	ones := 0
	const m = 100_000
	for range m {
		if f.Get(r.Uint64()) {
			ones++
		}
	}
	if ones < m*45/100 || ones > m*55/100 {
		t.Errorf("%d of %d outside keys answered 1: want about half", ones, m)
	}
}

func TestBuildRefuses(t *testing.T) {
	keys, vals := randomSet(1000, 8)
	dup := append(keys[:len(keys):len(keys)], keys[17])
	tests := []struct {
		name string
		keys []uint64
		vals []bool
		want string
	}{
		{"duplicate key", dup, append(vals[:len(vals):len(vals)], vals[17]), "duplicate key"},
		{"values short", keys, vals[:10], "1000 keys but 10 values"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.keys, tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	if _, err := Build(dup, append(vals[:len(vals):len(vals)], true)); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("duplicate key: %v, want ErrDuplicateKey", err)
	}
}

func TestUnmarshalRefuses(t *testing.T) {
	keys, vals := randomSet(100, 4)
	f, err := Build(keys, vals)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := f.MarshalBinary()
	mod := func(fn func(b []byte) []byte) []byte { return fn(bytes.Clone(good)) }
	tests := []struct {
		name  string
		b     []byte
		limit int
		want  string
	}{
		{"empty", nil, 1000, "empty"},
		{"retired version 1", mod(func(b []byte) []byte { b[0] = 1; return b }), 1000, "version 1"},
		{"other version", mod(func(b []byte) []byte { b[0] = 3; return b }), 1000, "version 3"},
		{"width 0", mod(func(b []byte) []byte { b[2] = 0; return b }), 1000, "width 0"},
		{"width 17", mod(func(b []byte) []byte { b[2] = 17; return b }), 1000, "width 17"},
		{"width of another table", mod(func(b []byte) []byte { b[2] = 2; return b }), 1000, "need exactly"},
		{"bad count", []byte{Version, 0x80}, 1000, "bad key count"},
		{"over the limit", good, 99, "100 keys exceed the limit 99"},
		{"negative limit", good, -1, "exceed the limit 0"},
		{"huge count", append([]byte{Version}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), 1 << 40, "exceed"},
		{"truncated width", good[:2], 1000, "truncated value width"},
		{"truncated seed", good[:5], 1000, "truncated seed"},
		{"truncated table", good[:len(good)-1], 1000, "truncated or trailing"},
		{"trailing byte", append(bytes.Clone(good), 0), 1000, "truncated or trailing"},
		{"count of another size", mod(func(b []byte) []byte { b[1] = 50; return b }), 1000, "need exactly"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Unmarshal(tc.b, tc.limit)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	// Padding: a table whose bit count is not a multiple of 8.
	keys, vals = randomSet(1, 4)
	one, _ := Build(keys, vals)
	if one.SizeBits()%8 == 0 {
		t.Fatalf("one key: %d bits, want a table with padding for this case", one.SizeBits())
	}
	enc, _ := one.MarshalBinary()
	enc[len(enc)-1] |= 0x80
	if _, err := Unmarshal(enc, 10); err == nil || !strings.Contains(err.Error(), "padding") {
		t.Errorf("non-zero padding: err = %v", err)
	}
}

// TestMultiBitValues: w-bit values (the boundary function's send-interval
// offsets) come back exactly for every width, after a round trip too; a
// value that does not fit its width is refused.
func TestMultiBitValues(t *testing.T) {
	var b Builder
	for _, tc := range []struct{ n, width int }{{0, 3}, {1, 2}, {7, 5}, {600, 2}, {5000, 3}, {50_000, 4}, {20_000, 16}} {
		keys, _ := randomSet(tc.n, uint64(tc.n*31+tc.width))
		r := rand.New(rand.NewPCG(uint64(tc.width), 1))
		vals := make([]uint64, tc.n)
		for i := range vals {
			vals[i] = r.Uint64N(1 << tc.width)
		}
		f, err := b.BuildValues(keys, vals, tc.width)
		if err != nil {
			t.Fatalf("n=%d w=%d: %v", tc.n, tc.width, err)
		}
		enc, _ := f.MarshalBinary()
		if len(enc) != EncodedLen(tc.n, tc.width) {
			t.Errorf("n=%d w=%d: %d bytes, EncodedLen says %d", tc.n, tc.width, len(enc), EncodedLen(tc.n, tc.width))
		}
		g, err := Unmarshal(enc, tc.n)
		if err != nil {
			t.Fatalf("n=%d w=%d: decoding: %v", tc.n, tc.width, err)
		}
		if g.Width() != tc.width {
			t.Errorf("decoded width %d, want %d", g.Width(), tc.width)
		}
		for i, k := range keys {
			if f.Value(k) != vals[i] || g.Value(k) != vals[i] {
				t.Fatalf("n=%d w=%d: key %d answered %d/%d, want %d", tc.n, tc.width, i, f.Value(k), g.Value(k), vals[i])
			}
		}
		if again, _ := g.MarshalBinary(); !bytes.Equal(again, enc) {
			t.Errorf("n=%d w=%d: re-encoding differs", tc.n, tc.width)
		}
	}
	if _, err := b.BuildValues([]uint64{1, 2}, []uint64{1, 4}, 2); err == nil || !strings.Contains(err.Error(), "does not fit in 2 bits") {
		t.Errorf("value 4 in 2 bits: err = %v", err)
	}
	if WidthFor(0) != 1 || WidthFor(1) != 1 || WidthFor(2) != 2 || WidthFor(11) != 4 {
		t.Errorf("WidthFor: %d %d %d %d", WidthFor(0), WidthFor(1), WidthFor(2), WidthFor(11))
	}
}
