package interval

// DropLedger attributes one capture worker's drops (kernel ring and
// interface counters, cumulative) to the intervals whose packets they may
// have removed. The worker reads its counters each time it closes an
// interval (the sender when it emits one, the receiver when it seals one);
// a read at wall-clock time now that finds new drops says that packets the
// tap saw after the previous read, and no later than now, are missing.
//
// Which intervals those packets belong to:
//   - Earliest: the interval being closed. The previous read came after the
//     capture had reached the end of the interval closed then (a packet of
//     a later interval, or the wall clock past it), so every drop since
//     came later: at the sender a packet sent in the closing interval or
//     after; at the receiver a packet received after the previous
//     interval's hold window, so sent in the closing interval or after
//     unless slower than that window.
//   - Latest: the interval that holds now + Reach. The sender's Reach is
//     max_delay + guard: a packet its capture missed is still counted by
//     the receiver, in the interval of its receive time (up to max_delay +
//     guard later), where it shows as a surplus. The receiver's Reach is
//     guard: a packet it received by now was sent before now + guard.
//
// One read can therefore reach several intervals, and the ones after the
// closing interval are not closed yet: the ledger remembers each read with
// drops until the capture has closed the last interval it reaches. A
// capture that lags (a process stopped, its ring full) reads late, and its
// reads reach as far as the wall clock: never fewer intervals than the
// drops can touch. Not safe for concurrent use: one per capture worker
// (and per sender entry at the receiver).
type DropLedger struct {
	T     int64 // interval, ns
	Reach int64 // ns past the read time that a dropped packet's interval can lie
	prev  uint64
	reads []dropRead
}

// dropRead is one read that found drops: n of them, reaching up to the
// interval last.
type dropRead struct {
	last int64
	n    uint64
}

// Read takes the cumulative drop count total read when the capture closed
// interval id, at wall-clock time now (Unix ns). It returns the drops new
// since the previous read (each drop counted once, in the interval whose
// close read it) and the drops of every read whose reach covers interval
// id (zero: no drop can have touched it). Call it for each closed interval
// in increasing id order.
func (l *DropLedger) Read(id int64, total uint64, now int64) (delta, affecting uint64) {
	if total > l.prev {
		delta = total - l.prev
		l.prev = total
	}
	if delta > 0 {
		if len(l.reads) == maxDropReads {
			// Bounded memory (a wall clock far from the packets' time
			// keeps every read open): the two oldest become one that
			// reaches as far as either, so nothing is flagged less.
			l.reads[1] = dropRead{last: max(l.reads[0].last, l.reads[1].last), n: l.reads[0].n + l.reads[1].n}
			l.reads = append(l.reads[:0], l.reads[1:]...)
		}
		l.reads = append(l.reads, dropRead{last: max(id, floorDiv(now+l.Reach, l.T)), n: delta})
	}
	keep := l.reads[:0]
	for _, r := range l.reads {
		if r.last >= id {
			affecting += r.n
			keep = append(keep, r)
		}
	}
	clear(l.reads[len(keep):])
	l.reads = keep
	return delta, affecting
}

// maxDropReads bounds the reads a ledger remembers.
const maxDropReads = 64

// floorDiv is ⌊a/b⌋ for b > 0, also for negative a.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
