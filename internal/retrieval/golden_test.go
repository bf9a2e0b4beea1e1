package retrieval

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
)

// goldenSets are the key sets whose encodings TestBuildGolden holds: the
// function (its seed and every cell) is part of the wire format, so a
// faster construction must build the same bytes. Sizes span the table
// layouts (segment lengths 2^2 to 2^18); widths 1-3 are what the sender
// ships (offsets up to max_delay's class); the small sets include ones
// whose first seed does not peel.
var goldenSets = []struct {
	n, width int
	seed     uint64
	sum      string
}{
	{1, 1, 1, "f0743a63233800ce1a9df50bb8c3843a6c3da5e543f3add2326e2ad5fcf47f09"},
	{10, 1, 2, "d2dc0e6cbb269e23cbc5185a441ec90246e299c5d53f0b15a727e83209f831fb"},
	{37, 2, 3, "13fdf4c182d8d71af14674d66f8d0af4e5de4279a26068adeb0720713a7f0cac"},
	{1000, 1, 4, "659d30d9c7633ec4fbc47cbfe20dfcfe293f5f2985577d9866aecc0650192ccd"},
	{1000, 3, 5, "3ea0a60470a7cb3450074f34386f0b07279a8ba11ca8667d4dc26a9b9d91d6b9"},
	{100_000, 1, 6, "9ded0989062473ea7a937b4a498e12f2550dc5298ff2f03251c9aeefd0f0f8cf"},
	{100_000, 2, 7, "bcfc95d5d54475a04dbb4bb49a83659ccbd54486ef163992ea7e38afdd746c44"},
	{1_000_000, 1, 8, "65360e3aeb69a569fc63dbefb33ee3d9d155ced5db4f461d3dd9edbae3d988b0"},
	{3_000_000, 2, 9, "6d45fc78026512f1e60cd1765cdbbdb9fd3dc7ec024d4f0b583a2b6d498cbbef"},
	{20, 1, 101, "f9ae10a1a167eb71eb82da1c61938bb10acab5ccbd353ed1d6e7916bd8f0411e"},
	{300, 1, 107, "2c07d0bf820864eac9311dfa831a1769bf116a4bd1a6324ed79f1e3db17c6b4b"},
	{5000, 1, 139, "05483efce8a36d0c3851952c4590531ea84430460e45cedcbff2bbce5d6c5905"},
}

func goldenSet(n, width int, seed uint64) ([]uint64, []uint64) {
	r := rand.New(rand.NewPCG(seed, 77))
	seen := make(map[uint64]struct{}, n)
	keys, vals := make([]uint64, 0, n), make([]uint64, 0, n)
	for len(keys) < n {
		k := r.Uint64()
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		keys = append(keys, k)
		vals = append(vals, r.Uint64N(1<<width))
	}
	return keys, vals
}

// TestBuildGolden: the encodings of fixed key sets do not change, and do
// not depend on the keys' order (LDS_RETRIEVAL_GOLDEN=print prints the
// sums of the current construction).
func TestBuildGolden(t *testing.T) {
	var b Builder
	for _, g := range goldenSets {
		if testing.Short() && g.n > 100_000 {
			continue
		}
		keys, vals := goldenSet(g.n, g.width, g.seed)
		f, err := b.BuildValues(keys, vals, g.width)
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := f.MarshalBinary()
		sum := fmt.Sprintf("%x", sha256.Sum256(enc))
		if os.Getenv("LDS_RETRIEVAL_GOLDEN") == "print" {
			rng := uint64(0x9e3779b97f4a7c15) ^ uint64(g.n)
			fmt.Printf("\t{%d, %d, %d, %q}, // first seed peeled: %v\n", g.n, g.width, g.seed, sum, f.seed == splitmix(&rng))
			continue
		}
		if sum != g.sum {
			t.Errorf("%d keys, width %d: encoding sha256 %s, want %s", g.n, g.width, sum, g.sum)
		}
		// Reversed order: the same function.
		rk, rv := make([]uint64, len(keys)), make([]uint64, len(vals))
		for i := range keys {
			rk[len(keys)-1-i], rv[len(vals)-1-i] = keys[i], vals[i]
		}
		f2, err := b.BuildValues(rk, rv, g.width)
		if err != nil {
			t.Fatal(err)
		}
		enc2, _ := f2.MarshalBinary()
		if sum2 := fmt.Sprintf("%x", sha256.Sum256(enc2)); sum2 != sum {
			t.Errorf("%d keys, width %d: reversed keys give sha256 %s, want %s", g.n, g.width, sum2, sum)
		}
	}
}
