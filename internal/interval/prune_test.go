package interval

import (
	"testing"
	"time"

	"github.com/lds-net/lds/internal/results"
)

// TestFarIntervalIdsCostOnlyThemselves: a sender interval with a
// far-future id and one with a far-past id (a hostile sender, or a clock
// step at either end) are given up on their own, and every honest interval
// after them is still matched exactly: boundaries split by the sender's
// functions (none placed by receive time), sketches equal to the truth.
func TestFarIntervalIdsCostOnlyThemselves(t *testing.T) {
	p := testParams()
	base := int64(1_763_000_000) * p.T
	pk := simulate(t, p, base, 5, 0, 7)
	wantR := expected(t, p, pk, true)
	sendOrder, recvOrder := byTime(pk)
	sb, rb := newBuilders(t, p, base)
	snd := sendAll(sb, sendOrder)

	m := NewMatcher(p, time.Second, 64)
	got := map[int64]*Matched{}
	emit := func(mt *Matched) { got[mt.ID] = mt }
	t0 := time.Unix(0, 0)
	first := base / p.T
	for _, id := range []int64{first + 1_000_000, first - 1_000_000} {
		sk, err := NewSketches(p)
		if err != nil {
			t.Fatal(err)
		}
		m.AddSender(&SenderInterval{ID: id, Sk: sk}, SenderMeta{}, t0, emit)
	}
	// Later (beyond lateness): the far intervals are given up at the next
	// event, before any honest one is final.
	now := t0.Add(2 * time.Second)
	next := 0
	for i := range recvOrder {
		q := recvOrder[i].p
		q.TS = recvOrder[i].recv
		rb.Add(&q, func(s *ReceiverInterval) {
			m.AddReceiver(s, now, emit)
			if next < len(snd) {
				m.AddSender(snd[next], SenderMeta{}, now, emit)
				next++
			}
		})
	}
	rb.Flush(func(s *ReceiverInterval) { m.AddReceiver(s, now, emit) })
	for ; next < len(snd); next++ {
		m.AddSender(snd[next], SenderMeta{}, now, emit)
	}
	m.ReceiverGone(now, emit)
	m.SenderGone(now, emit)
	for _, id := range []int64{first + 1_000_000, first - 1_000_000} {
		if got[id] == nil || got[id].Outcome != results.OutcomeNoReceiver {
			t.Errorf("far interval %d: %+v, want given up as no_receiver", id, got[id])
		}
	}
	for id, w := range wantR {
		mt := got[id]
		switch {
		case mt == nil:
			t.Errorf("interval %d never emitted", id)
		case mt.Outcome != results.OutcomeMatched || mt.Unresolved != 0:
			t.Errorf("interval %d: outcome %s, %d packets placed by receive time; want matched, 0", id, mt.Outcome, mt.Unresolved)
		case !sameSketches(mt.Receiver, w):
			t.Errorf("interval %d: receiver sketch differs from the truth", id)
		}
	}
}

// TestMatcherStateBounded: over a long run of intervals that both ends
// send, the matcher's per-interval and per-boundary state stays within
// what it must remember (the last 4 x maxPending + 16 final ids and
// the boundaries around what is pending), and every interval is emitted
// once, in order.
func TestMatcherStateBounded(t *testing.T) {
	p := testParams()
	const maxPending, n = 2, 400
	keep := 4*maxPending + 16
	m := NewMatcher(p, time.Second, maxPending)
	var got []int64
	emit := func(mt *Matched) {
		if mt.Outcome != results.OutcomeMatched {
			t.Errorf("interval %d: outcome %s, want matched", mt.ID, mt.Outcome)
		}
		got = append(got, mt.ID)
	}
	rxSk, err := NewSketches(p)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	first := int64(1_763_000_000)
	maxIvs, maxBnds := 0, 0
	for id := first; id < first+n; id++ {
		sk, err := NewSketches(p)
		if err != nil {
			t.Fatal(err)
		}
		sk.Packets = 1 // not quiet: emitted
		m.AddSender(&SenderInterval{ID: id, Sk: sk, First: id == first}, SenderMeta{}, now, emit)
		m.AddReceiver(&ReceiverInterval{ID: id, Direct: rxSk, Flows: NewFlowTable(0, p.Sketch, false)}, now, emit)
		maxIvs, maxBnds = max(maxIvs, len(m.ivs)), max(maxBnds, len(m.bnds))
	}
	m.ReceiverGone(now, emit)
	m.SenderGone(now, emit)
	if len(got) != n {
		t.Fatalf("%d of %d intervals emitted", len(got), n)
	}
	for i, id := range got {
		if id != first+int64(i) {
			t.Fatalf("emission %d is interval %d (order lost or emitted twice)", i, id)
		}
	}
	// Final ids kept, plus the pending ones and their neighbours.
	if maxIvs > keep+maxPending+4 || maxBnds > keep+maxPending+4 {
		t.Errorf("the matcher held state for up to %d interval ids and %d boundary ids over %d intervals, want at most %d each",
			maxIvs, maxBnds, n, keep+maxPending+4)
	}
	if m.Pending() != 0 || !m.Idle() {
		t.Errorf("after both ends are gone: %d pending, idle %v", m.Pending(), m.Idle())
	}
}
