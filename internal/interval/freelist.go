package interval

import "sync"

// freeList is storage kept for reuse from one interval to the next, safe
// for any goroutine: the last item put is the first taken. Its zero value
// is empty and ready.
type freeList[T any] struct {
	mu   sync.Mutex
	free []T
}

// get takes an item, ok false when the list is empty.
func (f *freeList[T]) get() (v T, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.free)
	if n == 0 {
		return v, false
	}
	v = f.free[n-1]
	var zero T
	f.free[n-1] = zero
	f.free = f.free[:n-1]
	return v, true
}

// put keeps v while the list holds fewer than keep items; beyond, v goes
// to the collector.
func (f *freeList[T]) put(v T, keep int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.free) < keep {
		f.free = append(f.free, v)
	}
}
