package interval

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/results"
)

// buildSides runs packets through both ends' builders and returns the
// sender's intervals and the receiver's sealed ones, by id, unmatched.
func buildSides(t *testing.T, p Params, base int64, pk []simPkt) (map[int64]*SenderInterval, map[int64]*ReceiverInterval) {
	t.Helper()
	snd, rx := map[int64]*SenderInterval{}, map[int64]*ReceiverInterval{}
	sb, rb := newBuilders(t, p, base)
	byS, _ := byTime(pk)
	byR := slices.Clone(pk)
	slices.SortStableFunc(byR, func(a, b simPkt) int { return int(a.recv - b.recv) })
	for _, si := range sendAll(sb, byS) {
		snd[si.ID] = si
	}
	keepR := func(s *ReceiverInterval) { rx[s.ID] = s }
	for i := range byR {
		q := byR[i].p
		q.TS = byR[i].recv
		rb.Add(&q, keepR)
	}
	rb.Flush(keepR)
	return snd, rx
}

// TestAheadIntervalsPoisonNothing reproduces the poisoning: a sender sends
// interval ids well ahead of the receiver's clock (inside the skew window:
// a clock stepped forward, a buggy or hostile sender), and later the
// genuine intervals of those ids come in time. Nothing is given up while
// it is ahead; each genuine interval is matched with the receiver's own,
// whichever of the two comes first; the early ones are counted as
// superseded; no receiver half is dropped.
func TestAheadIntervalsPoisonNothing(t *testing.T) {
	for _, tc := range []struct {
		name          string
		n             int
		ahead         time.Duration
		receiverFirst bool // the receiver's half of each interval comes before the sender's
	}{
		{"10 ids 25 s ahead, sender first", 10, 25 * time.Second, false},
		{"10 ids 25 s ahead, receiver first", 10, 25 * time.Second, true},
		{"7 ids 4 s ahead, alternating", 7, 4 * time.Second, false},
		{"40 ids 200 s ahead, receiver first", 40, 200 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testParams()
			base := int64(1_763_000_000) * p.T
			lateness := 2 * time.Second
			maxPending := 64
			pk := simulate(t, p, base, tc.n, 0.01, 11)
			genuine, rx := buildSides(t, p, base, pk)
			bogus, _ := buildSides(t, p, base, simulate(t, p, base, tc.n, 0, 99))
			// The reference: the same genuine halves without anything ahead.
			refSnd, refRx := buildSides(t, p, base, pk)
			ref := map[int64]*Matched{}
			rm := NewMatcher(p, time.Hour, maxPending)
			for _, id := range SortedIDs(refRx) {
				rm.AddReceiver(refRx[id], time.Unix(0, 0), func(mt *Matched) { ref[mt.ID] = mt })
				if si := refSnd[id]; si != nil {
					rm.AddSender(si, SenderMeta{}, time.Unix(0, 0), func(mt *Matched) { ref[mt.ID] = mt })
				}
			}
			rm.ReceiverGone(time.Unix(0, 0), func(mt *Matched) { ref[mt.ID] = mt })

			clock := time.Unix(0, base).Add(-tc.ahead) // the receiver's clock
			m := NewMatcher(p, lateness, maxPending)
			m.HoldAhead(func() time.Time { return clock }, time.Duration(2*p.T+p.MaxDelay))
			refused := map[string]int{}
			m.OnRefuse(func(reason string, _ int64) { refused[reason]++ })
			got := map[int64]*Matched{}
			emit := func(mt *Matched) {
				if got[mt.ID] != nil {
					t.Errorf("interval %d emitted twice", mt.ID)
				}
				got[mt.ID] = mt
			}
			wall := time.Unix(1000, 0) // the matcher's wall clock for lateness
			ids := SortedIDs(bogus)
			for _, id := range ids {
				if !m.AddSender(bogus[id], SenderMeta{}, wall, emit) {
					t.Fatalf("interval %d ahead of the clock was refused, want held", id)
				}
			}
			// Time passes, far beyond lateness, while the ids are still ahead.
			for wall.Before(time.Unix(1000, 0).Add(tc.ahead - 3*time.Second)) {
				wall, clock = wall.Add(time.Second), clock.Add(time.Second)
				m.Tick(wall, emit)
			}
			if len(got) != 0 {
				t.Fatalf("%d intervals final while their ids were ahead of the receiver's clock", len(got))
			}
			// Real time reaches the ids: each end's genuine half comes in
			// time (the receiver's and the sender's, in the case's order).
			for i, id := range SortedIDs(rx) {
				clock = time.Unix(0, (id+1)*p.T+p.MaxDelay)
				wall = wall.Add(time.Second)
				addRx := func() { m.AddReceiver(rx[id], wall, emit) }
				addSnd := func() {
					if si := genuine[id]; si != nil && !m.AddSender(si, SenderMeta{}, wall, emit) {
						t.Errorf("genuine interval %d refused", id)
					}
				}
				if tc.receiverFirst || i%2 == 1 {
					addRx()
					addSnd()
				} else {
					addSnd()
					addRx()
				}
				m.Tick(wall, emit)
			}
			for range 4 {
				wall = wall.Add(lateness)
				m.Tick(wall, emit)
			}
			m.ReceiverGone(wall, emit)
			m.SenderGone(wall, emit)
			for _, id := range SortedIDs(genuine) {
				mt := got[id]
				switch {
				case mt == nil:
					t.Errorf("genuine interval %d lost", id)
				case mt.Sender != genuine[id]:
					t.Errorf("interval %d matched with the early sender interval, not the genuine one", id)
				case rx[id] != nil && mt.Outcome != results.OutcomeMatched && mt.Outcome != results.OutcomePartial:
					t.Errorf("interval %d outcome %s, want matched", id, mt.Outcome)
				case ref[id] == nil || ref[id].Outcome != mt.Outcome || (mt.Receiver != nil) != (ref[id].Receiver != nil) ||
					mt.Receiver != nil && (!sameSketches(mt.Receiver, ref[id].Receiver) || mt.Unresolved != ref[id].Unresolved):
					t.Errorf("interval %d differs from the same halves matched without intervals ahead (its held packets placed otherwise)", id)
				}
			}
			want := map[string]int{RefusedSupersededEarly: len(bogus)}
			if fmt.Sprint(refused) != fmt.Sprint(want) {
				t.Errorf("refusals %v, want %v", refused, want)
			}
		})
	}
}

// TestAheadHeldBounded: beyond max_pending intervals ahead of the clock,
// more are refused and counted (memory stays bounded); those held do not
// push out intervals in time.
func TestAheadHeldBounded(t *testing.T) {
	p := testParams()
	base := int64(1_763_000_000) * p.T
	genuine, rx := buildSides(t, p, base, simulate(t, p, base, 3, 0, 5))
	clock := time.Unix(0, base)
	m := NewMatcher(p, time.Hour, 4)
	m.HoldAhead(func() time.Time { return clock }, time.Duration(2*p.T+p.MaxDelay))
	refused := map[string]int{}
	m.OnRefuse(func(reason string, _ int64) { refused[reason]++ })
	got := map[int64]*Matched{}
	emit := func(mt *Matched) { got[mt.ID] = mt }
	wall := time.Unix(1000, 0)
	first := ID(base, p.T)
	for i := range 10 {
		far := &SenderInterval{ID: first + 100 + int64(i), Sk: genuine[first].Sk}
		m.AddSender(far, SenderMeta{}, wall, emit)
	}
	if refused[RefusedEarlyOverflow] != 6 {
		t.Errorf("refusals %v, want 6 early_overflow (4 held)", refused)
	}
	for _, id := range SortedIDs(rx) {
		clock = time.Unix(0, (id+1)*p.T+p.MaxDelay)
		m.AddReceiver(rx[id], wall, emit)
		if si := genuine[id]; si != nil {
			m.AddSender(si, SenderMeta{}, wall, emit)
		}
	}
	m.ReceiverGone(wall, emit)
	for id := range genuine {
		if mt := got[id]; mt == nil || mt.Sender != genuine[id] {
			t.Errorf("interval %d in time not matched with its sender half beside held ones", id)
		}
	}
	for i := range 4 {
		if got[first+100+int64(i)] != nil {
			t.Errorf("held interval %d given up while still ahead", first+100+int64(i))
		}
	}
}
