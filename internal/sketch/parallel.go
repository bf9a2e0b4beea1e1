package sketch

import (
	"runtime"
	"sync"
)

// parallelChunks runs body over [0, n) split into at most workers
// contiguous ranges of at least grain elements, one goroutine each (the caller's goroutine takes the
// first), and waits. Each range gets its worker index, so that bodies can
// keep per-worker scratch. Contiguous ranges keep each worker's memory
// accesses local; the split never changes what is computed, only where.
func parallelChunks(workers, n, grain int, body func(w, lo, hi int)) {
	workers = max(1, min(workers, n/grain))
	if workers == 1 {
		body(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(w, w*n/workers, (w+1)*n/workers)
		}()
	}
	body(0, 0, n/workers)
	wg.Wait()
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
