package interval

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Boundary windows (docs/DESIGN.md, "2. Packet → interval"). At boundary
// b (time b·T) the receiver holds the packets it receives in [b·T − guard,
// b·T + W_b) and places them with the sender's boundary function for b.
// W_b is the hold window: at most max_delay, chosen by the receiver from
// the delays it has evidence of (WindowPlan), and told to the sender over
// the Ack stream (Window frames) so that the sender's function covers
// every packet the receiver can hold: the packets sent in
// [b·T − W_b − 2·guard, min(b·T + W_b + guard, (b+1)·T)). A packet whose
// one-way delay is below W_b is placed exactly; one slower than W_b can be
// misplaced, which the receiver detects and flags (never believed).
//
// When W_b + 2·guard exceeds the interval, a held packet may come from
// several earlier intervals: the function maps its hash to b − (its send
// interval), an offset of a few bits. The class K_b of a boundary is the
// largest such offset: ceil((W_b + 2·guard) / T). The receiver fixes K_b
// one boundary ahead (when the hold of b−1 ends) and lets K grow by at
// most one a boundary, so that when an interval is sealed it is already
// known which later boundaries can hold its packets; W_b itself is fixed
// when the hold of b begins and may still be raised, within its class,
// while the hold lasts.

// DefaultMinWindow is the smallest hold window the receiver uses (and the
// first one, before it has evidence): the bound lds used before windows
// adapted, so that a link with delays of a few ms costs what it did.
const DefaultMinWindow = int64(50 * time.Millisecond)

// minWindow is the smallest window, within max_delay and within class 1.
func (p Params) minWindow() int64 {
	return max(1, min(DefaultMinWindow, p.MaxDelay, p.T-2*p.Guard))
}

// classOf is the class of a window w: the number of intervals before the
// boundary a held packet can come from.
func (p Params) classOf(w int64) int64 { return max(1, (w+2*p.Guard+p.T-1)/p.T) }

// maxClass is the class of max_delay.
func (p Params) maxClass() int64 { return p.classOf(p.MaxDelay) }

// classTop is the largest window of class k, within max_delay.
func (p Params) classTop(k int64) int64 { return min(p.MaxDelay, k*p.T-2*p.Guard) }

// KeyWindow is the span of send times the sender's function for boundary
// b must cover when the receiver's window is w: [from, to).
func (p Params) KeyWindow(b, w int64) (from, to int64) {
	bt := b * p.T
	return bt - w - 2*p.Guard, min(bt+w+p.Guard, bt+p.T)
}

// Window is one boundary's final hold window, as the receiver tells the sender.
type Window struct {
	Boundary int64 // boundary id b: the boundary at b·T, the end of interval b−1
	W        int64 // ns
}

// WindowTable is the sender's view of the receiver's windows: written by
// the stream's receiving goroutine, read by the capture workers (one
// atomic load and a map lookup, only when an interval is due).
type WindowTable struct {
	mu     sync.Mutex // writers
	m      atomic.Pointer[map[int64]int64]
	closed atomic.Bool
	// everSet: a window came; silent: a wait ended without any ever
	// coming (a receiver that announces none): nobody waits again.
	everSet atomic.Bool
	silent  atomic.Bool
	wake    chan struct{} // closed and replaced on every change
	wakeMu  sync.Mutex
}

// NewWindowTable makes an empty table.
func NewWindowTable() *WindowTable {
	t := &WindowTable{wake: make(chan struct{})}
	m := map[int64]int64{}
	t.m.Store(&m)
	return t
}

// Set records the receiver's window for boundary b (copy on write; the
// table keeps the 256 latest boundaries).
func (t *WindowTable) Set(ws ...Window) {
	if t == nil || len(ws) == 0 {
		return
	}
	t.mu.Lock()
	old := *t.m.Load()
	m := make(map[int64]int64, len(old)+len(ws))
	hi := int64(math.MinInt64)
	for _, w := range ws {
		hi = max(hi, w.Boundary)
	}
	for b := range old {
		hi = max(hi, b)
	}
	for b, w := range old {
		if b > hi-256 {
			m[b] = w
		}
	}
	for _, w := range ws {
		if w.Boundary > hi-256 {
			m[w.Boundary] = w.W
		}
	}
	t.m.Store(&m)
	t.everSet.Store(true)
	t.mu.Unlock()
	t.signal()
}

// Close says that no more windows will come (the stream ended for good):
// waiting builders stop waiting and use max_delay.
func (t *WindowTable) Close() {
	if t == nil {
		return
	}
	t.closed.Store(true)
	t.signal()
}

func (t *WindowTable) signal() {
	t.wakeMu.Lock()
	close(t.wake)
	t.wake = make(chan struct{})
	t.wakeMu.Unlock()
}

// Get returns the receiver's window for boundary b, if known.
func (t *WindowTable) Get(b int64) (int64, bool) {
	if t == nil {
		return 0, false
	}
	w, ok := (*t.m.Load())[b]
	return w, ok
}

// firstWindowWait bounds the wait for the very first window: a receiver
// announces one as soon as its capture passes the first boundary's hold.
const firstWindowWait = 10 * time.Second

// wait blocks until boundary b's window is known, the table is closed, or
// timeout passes (firstWindowWait while none ever came); it reports the
// window if known. Once a wait ends without any window ever having come,
// the receiver is taken to announce none and later waits return at once.
func (t *WindowTable) wait(b int64, timeout time.Duration) (int64, bool) {
	if t.silent.Load() {
		return t.Get(b)
	}
	if !t.everSet.Load() {
		timeout = min(timeout, firstWindowWait)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		t.wakeMu.Lock()
		ch := t.wake
		t.wakeMu.Unlock()
		if w, ok := t.Get(b); ok {
			return w, true
		}
		if t.closed.Load() {
			return 0, false
		}
		select {
		case <-ch:
		case <-deadline.C:
			if !t.everSet.Load() {
				t.silent.Store(true)
			}
			return 0, false
		}
	}
}

// WindowPlan is the receiver's choice of hold windows for one sender,
// shared by the capture workers of that sender entry. It keeps a target
// window from the delays it is shown (Observe): at least the minimum
// window, twice the largest delay evidence, grown at once and shrunk by
// an eighth an interval; and, per boundary, the class, the first window
// and every worker's final window. Safe for concurrent use.
type WindowPlan struct {
	p       Params
	workers int
	target  atomic.Int64

	mu     sync.Mutex
	class  map[int64]int64 // K_b
	start  map[int64]int64 // W_b when the hold began
	final  map[int64]*finalW
	lastK  int64 // class of the latest boundary fixed
	lastB  int64
	recent []Window // announced windows, oldest first (bounded)
	seq    uint64   // windows announced so far
	wake   chan struct{}
	closed bool

	// Pacing (replay): a boundary's class waits for the evidence of the
	// interval a few before it, so that a capture read from a file does
	// not fix every window before any interval is estimated.
	pace     time.Duration // 0: never wait
	observed int64         // the latest interval observed
	obsWake  chan struct{}
	firstB   int64 // the first boundary classed
}

type finalW struct {
	n int
	w int64
}

// NewWindowPlan makes a plan for the given number of capture workers.
func NewWindowPlan(p Params, workers int) *WindowPlan {
	pl := &WindowPlan{p: p, workers: max(1, workers), class: map[int64]int64{}, start: map[int64]int64{},
		final: map[int64]*finalW{}, lastB: math.MinInt64, wake: make(chan struct{}),
		observed: math.MinInt64, obsWake: make(chan struct{})}
	pl.target.Store(p.minWindow())
	return pl
}

// Target is the window the plan would give a boundary now.
func (pl *WindowPlan) Target() int64 { return pl.target.Load() }

// Pace makes the class of each boundary wait (up to timeout) for the
// evidence of the intervals before it: for a replay, whose capture reads
// a file far ahead of estimation. Live capture never waits.
func (pl *WindowPlan) Pace(timeout time.Duration) { pl.pace = timeout }

// Observe takes the delay evidence of interval id (the largest delay the
// receiver can vouch for, ns; NaN or <= 0 when none) and whether that
// interval showed packets placed in the wrong interval. The window grows
// at once to twice the evidence (and at least doubles on misplacement, up
// to max_delay); it shrinks by an eighth an interval toward twice the
// evidence, never below the minimum window.
func (pl *WindowPlan) Observe(id int64, delay float64, misplaced bool) {
	defer pl.observedUpTo(id)
	cur := pl.target.Load()
	want := pl.p.minWindow()
	if delay > 0 && !math.IsNaN(delay) {
		want = max(want, int64(min(2*delay, float64(pl.p.MaxDelay))))
	}
	if misplaced {
		want = max(want, 2*cur)
	}
	want = min(want, pl.p.MaxDelay)
	switch {
	case want > cur:
		pl.target.Store(want)
	case want < cur:
		pl.target.Store(max(want, cur-cur/8))
	}
}

func (pl *WindowPlan) observedUpTo(id int64) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if id > pl.observed {
		pl.observed = id
		close(pl.obsWake)
		pl.obsWake = make(chan struct{})
	}
}

// classFor fixes (on first call) the class of boundary b: the target's
// class, at most one more than the previous boundary's. Paced (and wait),
// it first waits for the evidence of the interval 2 + K before b (K the
// latest class): the latest one whose estimate cannot depend on b.
func (pl *WindowPlan) classFor(b int64, wait bool) int64 {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.lastB == math.MinInt64 {
		pl.firstB = b
	}
	// The intervals before the first boundary classed were never captured.
	if _, ok := pl.class[b]; !ok && wait && pl.pace > 0 && b-2-pl.lastK >= pl.firstB {
		pl.waitObserved(b - 2 - pl.lastK)
	}
	return pl.classLocked(b)
}

// waitObserved waits (mu held, released meanwhile) until interval id has
// been observed, the plan is closed, or the pace timeout passes.
func (pl *WindowPlan) waitObserved(id int64) {
	deadline := time.NewTimer(pl.pace)
	defer deadline.Stop()
	for pl.observed < id && !pl.closed {
		ch := pl.obsWake
		pl.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			pl.mu.Lock()
			return
		}
		pl.mu.Lock()
	}
}

func (pl *WindowPlan) classLocked(b int64) int64 {
	if k, ok := pl.class[b]; ok {
		return k
	}
	k := pl.p.classOf(pl.target.Load())
	if prev, ok := pl.class[b-1]; ok {
		k = min(k, prev+1)
	} else if pl.lastB != math.MinInt64 && b > pl.lastB {
		k = min(k, pl.lastK+b-pl.lastB)
	}
	k = min(max(k, 1), pl.p.maxClass())
	pl.class[b] = k
	if b > pl.lastB {
		pl.lastB, pl.lastK = b, k
	}
	pl.prune(b)
	return k
}

// startFor fixes (on first call) the window the hold of b begins with.
// Paced (and wait), it first waits for the evidence of the interval K+1
// before b (K its class): the latest one whose estimate cannot depend on b.
func (pl *WindowPlan) startFor(b int64, wait bool) int64 {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if w, ok := pl.start[b]; ok {
		return w
	}
	if k := pl.classLocked(b); wait && pl.pace > 0 && b-1-k >= pl.firstB {
		pl.waitObserved(b - 1 - k)
		if w, ok := pl.start[b]; ok {
			return w
		}
	}
	w := min(pl.target.Load(), pl.p.classTop(pl.classLocked(b)))
	pl.start[b] = w
	return w
}

// raise returns the window a hold at w of class k may grow to now.
func (pl *WindowPlan) raise(w, k int64) int64 {
	return max(w, min(pl.target.Load(), pl.p.classTop(k)))
}

// ended records one worker's final window of b; once every worker has
// ended its hold, the largest is announced to the sender.
func (pl *WindowPlan) ended(b, w int64) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	f := pl.final[b]
	if f == nil {
		f = &finalW{}
		pl.final[b] = f
	}
	f.n++
	f.w = max(f.w, w)
	if f.n == pl.workers {
		pl.announce(Window{Boundary: b, W: f.w})
	}
}

func (pl *WindowPlan) announce(w Window) {
	pl.recent = append(pl.recent, w)
	if len(pl.recent) > 512 {
		pl.recent = append(pl.recent[:0], pl.recent[len(pl.recent)-256:]...)
	}
	pl.seq++
	close(pl.wake)
	pl.wake = make(chan struct{})
}

// prune forgets boundaries far behind b (called with mu held).
func (pl *WindowPlan) prune(b int64) {
	if len(pl.class) < 1024 {
		return
	}
	for _, m := range []map[int64]int64{pl.class, pl.start} {
		for x := range m {
			if x < b-256 {
				delete(m, x)
			}
		}
	}
	for x := range pl.final {
		if x < b-256 {
			delete(pl.final, x)
		}
	}
}

// Close says the capture has ended or is ending: no boundary will be held
// any more, and none waits for evidence (Pace) any more.
func (pl *WindowPlan) Close() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if !pl.closed {
		pl.closed = true
		close(pl.wake)
		pl.wake = make(chan struct{})
		// A capture worker waiting for evidence (waitObserved) stops waiting.
		close(pl.obsWake)
		pl.obsWake = make(chan struct{})
	}
}

// Announced returns the windows announced after the first `since` (the
// recent ones only, when since is far behind), the count to pass next
// time, whether the plan is closed, and a channel closed at the next change.
func (pl *WindowPlan) Announced(since uint64) ([]Window, uint64, bool, <-chan struct{}) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	n := pl.seq - since
	if n > uint64(len(pl.recent)) {
		n = uint64(len(pl.recent))
	}
	out := append([]Window(nil), pl.recent[len(pl.recent)-int(n):]...)
	return out, pl.seq, pl.closed, pl.wake
}
