package interval

import (
	"cmp"
	"slices"
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
	sendOrder := slices.Clone(pk)
	slices.SortStableFunc(sendOrder, func(a, b simPkt) int { return cmp.Compare(a.send, b.send) })
	var recvOrder []simPkt
	for _, x := range pk {
		if !x.lost {
			recvOrder = append(recvOrder, x)
		}
	}
	slices.SortStableFunc(recvOrder, func(a, b simPkt) int { return cmp.Compare(a.recv, b.recv) })
	sb, err := NewSenderBuilder(p, base)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := NewRxBuilder(p, base, true)
	if err != nil {
		t.Fatal(err)
	}
	var snd []*SenderInterval
	for i := range sendOrder {
		q := sendOrder[i].p
		q.TS = sendOrder[i].send
		sb.Add(&q, func(si *SenderInterval) { snd = append(snd, si) })
	}
	sb.Flush(func(si *SenderInterval) { snd = append(snd, si) })

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
		rb.Add(&q, func(s *Sealed) {
			m.AddSealed(s, now, emit)
			if next < len(snd) {
				m.AddSender(snd[next], SenderMeta{}, now, emit)
				next++
			}
		})
	}
	rb.Flush(func(s *Sealed) { m.AddSealed(s, now, emit) })
	for ; next < len(snd); next++ {
		m.AddSender(snd[next], SenderMeta{}, now, emit)
	}
	m.RxGone(now, emit)
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
		case !sameSketches(mt.Rx, w):
			t.Errorf("interval %d: receiver sketch differs from the truth", id)
		}
	}
}
