package export

import (
	"context"
	"sync"

	"github.com/lds-net/lds/internal/results"
)

// batch is one interval's records for one sender (a view of the published
// slice, which nobody writes after publishing).
type batch struct {
	sender string
	flows  []results.FlowRecord
	lost   []results.LostPacket // lost-packet records (Kafka's lost topic)
	// lostComplete: the interval's lost-packet list is complete.
	lostComplete bool
}

// queue is an exporter's bounded buffer, counted in records. offer never
// waits unless asked to; take waits for records or for close.
type queue struct {
	mu       sync.Mutex
	cap      int
	n        int
	items    []batch
	closed   bool
	full     bool          // the last offer dropped: log once per episode
	ready    chan struct{} // signalled when records arrive or on close
	room     chan struct{} // signalled when records leave (blocking offers)
	closedCh chan struct{}
}

func newQueue(capacity int) *queue {
	return &queue{cap: capacity, ready: make(chan struct{}, 1), room: make(chan struct{}, 1), closedCh: make(chan struct{})}
}

// offer queues as many of flows as fit and returns how many. With wait it
// waits for room (or close) instead of dropping.
func (q *queue) offer(sender string, flows []results.FlowRecord, wait bool) int {
	return q.offerN(len(flows), wait, func(lo, hi int) batch { return batch{sender: sender, flows: flows[lo:hi]} })
}

// offerN queues as many as fit of n records, mk cutting the batch of
// records lo to hi.
func (q *queue) offerN(n int, wait bool, mk func(lo, hi int) batch) int {
	done := 0
	for done < n {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return done
		}
		k := min(q.cap-q.n, n-done)
		if k > 0 {
			q.items = append(q.items, mk(done, done+k))
			q.n += k
			done += k
		}
		q.mu.Unlock()
		if k > 0 {
			signal(q.ready)
		}
		if done == n || !wait {
			break
		}
		select {
		case <-q.room:
		case <-q.closedCh:
			return done
		}
	}
	if done == n {
		q.mu.Lock()
		q.full = false
		q.mu.Unlock()
	}
	return done
}

// noteFull reports whether this is the first drop since the queue last had
// room for a whole interval.
func (q *queue) noteFull() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	first := !q.full
	q.full = true
	return first
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// take returns the oldest batch, waiting until there is one; ok is false
// once the queue is closed and empty, or ctx ended with nothing queued.
func (q *queue) take(ctx context.Context) (b batch, ok bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			b = q.items[0]
			q.items[0] = batch{}
			q.items = q.items[1:]
			q.n -= len(b.flows) + len(b.lost)
			q.mu.Unlock()
			signal(q.room)
			return b, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return b, false
		}
		select {
		case <-q.ready:
		case <-q.closedCh:
		case <-ctx.Done():
			return b, false
		}
	}
}

// tryTake returns the oldest batch if there is one.
func (q *queue) tryTake() (batch, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return batch{}, false
	}
	b := q.items[0]
	q.items[0] = batch{}
	q.items = q.items[1:]
	q.n -= len(b.flows) + len(b.lost)
	signal(q.room)
	return b, true
}

// close stops offers; take drains what is left.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.closedCh)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
