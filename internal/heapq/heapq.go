// Package heapq is a binary min-heap over a plain slice, for the event
// queues of the generator, the link emulator and the RLI baseline: no
// interface boxing (container/heap), no allocation beyond the slice.
package heapq

// Push appends x to the heap h ordered by less and returns the new slice.
func Push[T any](h []T, x T, less func(a, b *T) bool) []T {
	h = append(h, x)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

// Pop removes the least element; h must not be empty. The vacated slot is
// zeroed so that pointers in it do not outlive the pop.
func Pop[T any](h []T, less func(a, b *T) bool) ([]T, T) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	var zero T
	h[last] = zero
	h = h[:last]
	Down(h, 0, less)
	return h, top
}

// Down restores the order below i after h[i] grew (e.g. the root was
// replaced in place).
func Down[T any](h []T, i int, less func(a, b *T) bool) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && less(&h[r], &h[l]) {
			m = r
		}
		if !less(&h[m], &h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
