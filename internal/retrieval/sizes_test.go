package retrieval

import "testing"

// TestEverySmallSize: small sets (a quiet link's boundary) use the
// degenerate one-segment layout; every size up to 600 builds and answers
// exactly.
func TestEverySmallSize(t *testing.T) {
	for n := range 600 {
		keys, vals := randomSet(n, uint64(n)*7+1)
		f, err := Build(keys, vals)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		for i, k := range keys {
			if f.Get(k) != vals[i] {
				t.Fatalf("n=%d: key %d answered wrongly", n, i)
			}
		}
	}
}
