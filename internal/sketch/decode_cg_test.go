package sketch

import (
	"fmt"
	"runtime"
	"testing"
)

// TestPairBarrier runs two goroutines in lockstep through many phases,
// each writing its half of a vector and then reading the other's half of
// the previous phase: a barrier that let one run ahead, or lost a wake-up
// (the test would hang), fails it. With one P the waiter must park, as a
// spinning one would never let the other run; with more it mostly spins.
func TestPairBarrier(t *testing.T) {
	for _, procs := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			const phases, n = 2000, 64
			var v [2][n]int
			errs := make([]error, 2)
			pairRun(true, func(halves []int, b *pairBarrier) {
				h := halves[0]
				for ph := 1; ph <= phases; ph++ {
					for i := range v[h] {
						v[h][i] = ph
					}
					// Uneven work, so that sometimes one side waits long.
					if ph%97 == h {
						for i := 0; i < 200000; i++ {
							v[h][i%n] = ph
						}
					}
					b.wait()
					for i, x := range v[1-h] {
						if x != ph {
							errs[h] = fmt.Errorf("half %d, phase %d: the other half's element %d is %d", h, ph, i, x)
							return
						}
					}
					b.wait() // nobody writes phase ph+1 before both have read
				}
			})
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestPairRunAlone: without a second goroutine the body gets both halves
// and its barrier does nothing.
func TestPairRunAlone(t *testing.T) {
	calls := 0
	pairRun(false, func(halves []int, b *pairBarrier) {
		calls++
		if len(halves) != 2 || halves[0] != 0 || halves[1] != 1 {
			t.Fatalf("halves %v, want [0 1]", halves)
		}
		b.wait()
	})
	if calls != 1 {
		t.Fatalf("body ran %d times, want 1", calls)
	}
}
