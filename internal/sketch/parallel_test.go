package sketch

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
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

// catch runs f and returns what it panicked with.
func catch(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// TestPairRunPanic: a panic on either goroutine of a pair, while the
// other waits for it spinning or parked, ends both and comes back to the
// caller with its own value (the receiver recovers an estimator's panic
// there and counts the interval failed; without this a helper's panic
// killed the daemon, and a pair's survivor waited forever).
func TestPairRunPanic(t *testing.T) {
	for _, procs := range []int{1, 2} {
		for _, c := range []struct {
			name   string
			who    int  // the goroutine that panics
			at     int  // after this many waits
			stall  bool // the other goroutine arrives late, so this one parks first
			expect any
		}{
			{"helper at once", 1, 0, false, "helper"},
			{"helper after 50 phases", 1, 50, false, "helper"},
			{"helper while the main is parked", 1, 3, true, "helper"},
			{"main after 10 phases", 0, 10, false, "main"},
			{"main while the helper is parked", 0, 3, true, "main"},
		} {
			t.Run(fmt.Sprintf("%s/GOMAXPROCS=%d", c.name, procs), func(t *testing.T) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				var helperDone atomic.Bool
				got := catch(func() {
					pairRun(true, func(halves []int, b *pairBarrier) {
						h := halves[0]
						if h == 1 {
							defer helperDone.Store(true)
						}
						for i := 0; i < 100; i++ {
							if i == c.at && h == c.who {
								if c.stall {
									time.Sleep(5 * time.Millisecond) // the other parks
								}
								panic(map[int]string{0: "main", 1: "helper"}[h])
							}
							b.wait()
						}
					})
				})
				if got != c.expect {
					t.Fatalf("pairRun panicked with %v, want %v", got, c.expect)
				}
				if !helperDone.Load() {
					t.Fatal("pairRun returned while its helper goroutine still ran")
				}
			})
		}
	}
}

// TestParallelChunksPanic: a range's panic comes back to the caller once
// every range has ended.
func TestParallelChunksPanic(t *testing.T) {
	for _, bad := range []int{0, 2} {
		var ended atomic.Int32
		got := catch(func() {
			parallelChunks(4, 4000, 1, func(w, lo, hi int) {
				defer ended.Add(1)
				if w == bad {
					panic(fmt.Sprintf("range %d", w))
				}
				time.Sleep(time.Millisecond)
			})
		})
		if want := fmt.Sprintf("range %d", bad); got != want {
			t.Fatalf("parallelChunks panicked with %v, want %q", got, want)
		}
		if n := ended.Load(); n != 4 {
			t.Fatalf("%d of 4 ranges had ended when the panic came back", n)
		}
	}
}

// TestCGJoinSameResult: a solve that starts on one goroutine and pairs up
// at any iteration (decode's final solve, once the work beside it is
// done) computes bit for bit what one goroutine does alone.
func TestCGJoinSameResult(t *testing.T) {
	snd, rcv, comp := lossyMultibank(t)
	d, _, err := estimateDecode(snd, rcv, comp, DecodeOptions{Workers: 2, grain: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	solve := func(workers int, joinAt int) ([]float64, int) {
		d.workers = workers
		d.cgJoin = nil
		if joinAt >= 0 {
			calls := 0
			d.cgJoin = func() bool { calls++; return calls > joinAt }
		}
		defer func() { d.cgJoin = nil }()
		x := make([]float64, d.nA)
		n := d.pcg(d.eA, d.wgt, d.y, d.lam[:d.nA], x, 40, 0)
		return x, n
	}
	want, wantIt := solve(1, -1)
	if wantIt < 10 {
		t.Fatalf("the reference solve took %d iterations: too few to join in the middle", wantIt)
	}
	for _, joinAt := range []int{0, 1, 7, wantIt - 1, wantIt + 5} {
		got, it := solve(2, joinAt)
		if it != wantIt {
			t.Fatalf("joined at %d: %d iterations, alone %d", joinAt, it, wantIt)
		}
		for f := range got {
			if math.Float64bits(got[f]) != math.Float64bits(want[f]) {
				t.Fatalf("joined at %d: flow %d at %v, alone %v", joinAt, f, got[f], want[f])
			}
		}
	}
}

// TestParallelDynamic: every element is visited exactly once, in ranges of
// the chunk size, for any worker count; a panic comes back to the caller.
func TestParallelDynamic(t *testing.T) {
	for _, c := range []struct{ workers, n, chunk int }{{1, 10, 3}, {2, 1000, 7}, {4, 1000, 1000}, {8, 5, 1}, {3, 0, 4}, {2, 100, 0}} {
		seen := make([]atomic.Int32, c.n)
		parallelDynamic(c.workers, c.n, c.chunk, func(lo, hi int) {
			if hi-lo > max(1, c.chunk) || lo >= hi {
				t.Errorf("%+v: range [%d, %d)", c, lo, hi)
			}
			for i := lo; i < hi; i++ {
				seen[i].Add(1)
			}
		})
		for i := range seen {
			if n := seen[i].Load(); n != 1 {
				t.Fatalf("%+v: element %d visited %d times", c, i, n)
			}
		}
	}
	got := catch(func() {
		parallelDynamic(2, 100, 10, func(lo, hi int) {
			if lo == 50 {
				panic("chunk 50")
			}
		})
	})
	if got != "chunk 50" {
		t.Fatalf("parallelDynamic panicked with %v, want %q", got, "chunk 50")
	}
}
