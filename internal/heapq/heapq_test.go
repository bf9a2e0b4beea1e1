package heapq

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHeapSortsLikeSlicesSort(t *testing.T) {
	less := func(a, b *int) bool { return *a < *b }
	for _, n := range []int{0, 1, 2, 3, 10, 1000} {
		r := rand.New(rand.NewPCG(uint64(n), 1))
		var h, all []int
		for range n {
			x := r.IntN(50) // duplicates too
			all = append(all, x)
			h = Push(h, x, less)
		}
		// Replace the root in place and fix it, as the generator does.
		if n > 0 {
			h[0] += 25
			all[slices.Index(all, h[0]-25)] += 25
			Down(h, 0, less)
		}
		slices.Sort(all)
		var got []int
		for len(h) > 0 {
			var x int
			h, x = Pop(h, less)
			got = append(got, x)
		}
		if !slices.Equal(got, all) {
			t.Fatalf("n=%d: popped %v, want %v", n, got, all)
		}
	}
}
