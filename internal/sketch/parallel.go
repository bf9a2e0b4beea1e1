package sketch

import (
	"errors"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// parallelChunks runs body over [0, n) split into at most workers
// contiguous ranges of at least grain elements, one goroutine each (the
// caller's goroutine takes the first), and waits. Each range gets its
// worker index, so that bodies can keep per-worker scratch. Contiguous
// ranges keep each worker's memory accesses local; the split never
// changes what is computed, only where. A panic in any range comes back as
// a panic of the caller, after every range has ended (fanOut).
func parallelChunks(workers, n, grain int, body func(w, lo, hi int)) {
	workers = max(1, min(workers, n/grain))
	fanOut(workers, func(w int) { body(w, w*n/workers, (w+1)*n/workers) })
}

// parallelDynamic runs body over [0, n) in ranges of chunk elements that
// at most workers goroutines claim in order as they free up, and waits:
// for work whose cost per element varies, or that shares the cores with
// other work, where fixed ranges leave one goroutine finishing alone.
// Bodies keep no per-worker state across calls; as with parallelChunks,
// the split changes only where an element is computed, and a panic comes
// back to the caller.
func parallelDynamic(workers, n, chunk int, body func(lo, hi int)) {
	chunk = max(1, chunk)
	var next atomic.Int64
	fanOut(max(1, min(workers, (n+chunk-1)/chunk)), func(int) {
		for {
			lo := int(next.Add(int64(chunk))) - chunk
			if lo >= n {
				return
			}
			body(lo, min(n, lo+chunk))
		}
	})
}

// fanOut runs fn(0) on the caller's goroutine and fn(1..workers-1) on
// goroutines of their own, waits for all, then re-panics the first panic
// (by worker index) on the caller's goroutine: the receiver recovers an
// estimator's panic and counts the interval as failed, which it could not
// do for a panic on another goroutine.
func fanOut(workers int, fn func(w int)) {
	if workers <= 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	panics := make([]any, workers)
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { panics[w] = recover() }()
			fn(w)
		}()
	}
	func() {
		defer func() { panics[0] = recover() }()
		fn(0)
	}()
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(p)
		}
	}
}

// minChunk is the fewest flows worth a goroutine of their own.
const minChunk = 4096

// decodeWorkers resolves DecodeOptions.Workers.
func decodeWorkers(n int) int {
	if n > 0 {
		return n
	}
	return runtime.GOMAXPROCS(0)
}

// pairSync is where two goroutines sharing fixed halves of a loop meet:
// each publishes how many phases it has finished and waits until the
// other has finished as many. A phase is ~0.1–1 ms, too short for the
// scheduler's wake-ups, so a waiter first spins; if the other goroutine is
// not running (more goroutines than cores: a replay estimates several
// intervals at once), spinning would take the core it needs, so after
// pairSpin the waiter parks on a channel and the other wakes it.
type pairSync struct {
	n     [2]atomic.Int64 // phases finished
	sleep [2]atomic.Int64 // the phase a parked goroutine waits for, 0 = none
	wake  [2]chan struct{}
	dead  atomic.Bool // a goroutine panicked: the other must not wait for it
}

// pairSpin bounds a waiter's spinning. Waking a parked goroutine takes
// ~100 µs, so spinning must cover the usual imbalance of two halves (tens
// of µs in the conjugate gradients); much longer wastes the core that a
// goroutine which is not running at all needs, as when a replay estimates
// two intervals at a time on two cores (docs/decode.md, "Time", has the
// replay's times with 50 µs, 300 µs and no bound).
const pairSpin = 50 * time.Microsecond

// errPartnerDied is the panic of a goroutine whose partner panicked while
// it waited; pairRun replaces it by the partner's own panic.
var errPartnerDied = errors.New("sketch: the other goroutine of a pair panicked")

func newPairSync() *pairSync {
	return &pairSync{wake: [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}}
}

// kill marks goroutine me dead and wakes the other if it is parked.
func (s *pairSync) kill(me int) {
	other := 1 - me
	s.dead.Store(true)
	if v := s.sleep[other].Load(); v != 0 && s.sleep[other].CompareAndSwap(v, 0) {
		s.wake[other] <- struct{}{}
	}
}

// pairBarrier is one goroutine's side of a pairSync; a nil pairSync is a
// goroutine running both halves alone, for which wait does nothing.
type pairBarrier struct {
	s     *pairSync
	me    int
	phase int64
}

// wait publishes this goroutine's phase, wakes the other if it parked for
// it, and returns once the other has finished the same phase; it panics
// (errPartnerDied) if the other goroutine panicked instead. The parking
// handshake is Dekker's: each side stores, then loads the other's word,
// and whichever clears the sleep word (CompareAndSwap) owns the wake-up,
// so no wake-up is lost and none is left over.
func (b *pairBarrier) wait() {
	if b.s == nil {
		return
	}
	s, me, other := b.s, b.me, 1-b.me
	b.phase++
	ph := b.phase
	s.n[me].Store(ph)
	if v := s.sleep[other].Load(); v != 0 && v <= ph && s.sleep[other].CompareAndSwap(v, 0) {
		s.wake[other] <- struct{}{}
	}
	var start time.Time
	for spins := 1; s.n[other].Load() < ph; spins++ {
		if spins%1024 != 0 {
			continue
		}
		if s.dead.Load() {
			panic(errPartnerDied)
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > pairSpin {
			goto park
		}
	}
	return
park:
	s.sleep[me].Store(ph)
	// Unless the partner arrived or died meanwhile (then nobody will send),
	// wait for its wake-up.
	if arrived := (s.n[other].Load() >= ph || s.dead.Load()) && s.sleep[me].CompareAndSwap(ph, 0); !arrived {
		<-s.wake[me]
	}
	if s.n[other].Load() < ph {
		panic(errPartnerDied) // woken by kill
	}
}

// pairRun runs body over the halves 0 and 1: on two goroutines, each with
// its half, when two is set, else on the caller's goroutine with both.
// body must compute the same thing either way (fixed halves, partial
// results combined in a fixed order), and every goroutine must call wait
// the same number of times. A panic on either goroutine ends both and
// comes back as a panic of the caller with the first goroutine's value.
func pairRun(two bool, body func(halves []int, b *pairBarrier)) {
	if !two {
		body([]int{0, 1}, &pairBarrier{})
		return
	}
	s := newPairSync()
	done := make(chan struct{})
	var helper any
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				helper = p
				s.kill(1)
			}
		}()
		body([]int{1}, &pairBarrier{s: s, me: 1})
	}()
	var mine any
	func() {
		defer func() {
			if mine = recover(); mine != nil {
				s.kill(0)
			}
		}()
		body([]int{0}, &pairBarrier{s: s, me: 0})
	}()
	<-done
	switch {
	case helper != nil && helper != errPartnerDied: //nolint:errorlint // a recovered panic value, not a returned error: the barrier panics with the sentinel itself
		panic(helper)
	case mine != nil:
		panic(mine)
	}
}

// parallelEntries runs body over the solver's flows [0, n), split into at
// most workers contiguous runs of about equal cost (entries plus one a
// flow): the flows are numbered by equation count, so runs of equal
// flows would leave the last one most of the work (at k = 5, 80 % of the
// entries in the second half).
func (d *lsDecoder) parallelEntries(workers, n int, body func(w, lo, hi int)) {
	workers = max(1, min(workers, n/d.grain))
	fs := d.fStart
	cost := func(f int) int { return int(fs[f]-fs[0]) + f }
	total := cost(n)
	at := func(w int) int {
		if w == workers {
			return n
		}
		return sort.Search(n, func(f int) bool { return cost(f) >= w*total/workers })
	}
	fanOut(workers, func(w int) { body(w, at(w), at(w+1)) })
}
