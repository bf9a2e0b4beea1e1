package interval

import (
	"math"
	"testing"
	"time"
)

// TestWindowPlanFollowsEvidence: the target starts at the minimum window,
// grows at once to twice the evidence (doubles on a misplaced packet),
// never past max_delay, and shrinks by an eighth an interval.
func TestWindowPlanFollowsEvidence(t *testing.T) {
	ms := float64(time.Millisecond)
	p := testParams()
	p.MaxDelay = int64(time.Second)
	pl := NewWindowPlan(p, 1)
	steps := []struct {
		delay     float64
		misplaced bool
		want      time.Duration
	}{
		{math.NaN(), false, 50 * time.Millisecond}, // no evidence: the minimum
		{3 * ms, false, 50 * time.Millisecond},     // a fast link stays at the minimum
		{200 * ms, false, 400 * time.Millisecond},  // grows at once to twice the evidence
		{200 * ms, true, 800 * time.Millisecond},   // doubles on a misplaced packet
		{900 * ms, false, time.Second},             // never past max_delay
		{3 * ms, false, 875 * time.Millisecond},    // shrinks by an eighth
		{3 * ms, false, 765625 * time.Microsecond},
	}
	for i, st := range steps {
		pl.Observe(int64(i), st.delay, st.misplaced)
		if got := time.Duration(pl.Target()); got != st.want {
			t.Fatalf("step %d (evidence %v, misplaced %v): target %v, want %v", i, time.Duration(st.delay), st.misplaced, got, st.want)
		}
	}
}

// TestWindowPlanClassesAndAnnouncements: a boundary's class grows by at
// most one a boundary; its window is announced once every worker ended
// its hold, as the largest of theirs.
func TestWindowPlanClassesAndAnnouncements(t *testing.T) {
	p := testParams()
	p.T, p.MaxDelay = int64(100*time.Millisecond), int64(time.Second)
	pl := NewWindowPlan(p, 2)
	if k := pl.classFor(10, false); k != 1 {
		t.Fatalf("first class %d, want 1", k)
	}
	pl.Observe(0, float64(time.Second), false) // target: max_delay, class 11
	for b := int64(11); b <= 13; b++ {
		if k := pl.classFor(b, false); k != b-9 {
			t.Errorf("boundary %d: class %d, want %d (one more a boundary)", b, k, b-9)
		}
	}
	if w := pl.startFor(11, false); w != p.classTop(2) {
		t.Errorf("boundary 11 starts at %v, want the top of class 2 (%v)", time.Duration(w), time.Duration(p.classTop(2)))
	}
	pl.ended(11, 150_000_000)
	if ws, _, _, _ := pl.Announced(0); len(ws) != 0 {
		t.Fatalf("announced %v after one of two workers", ws)
	}
	pl.ended(11, 190_000_000)
	ws, seq, _, _ := pl.Announced(0)
	if len(ws) != 1 || ws[0] != (Window{Boundary: 11, W: 190_000_000}) || seq != 1 {
		t.Fatalf("announced %v (seq %d), want boundary 11 at 190ms", ws, seq)
	}
	tab := NewWindowTable()
	tab.Set(ws...)
	if w, ok := tab.Get(11); !ok || w != 190_000_000 {
		t.Errorf("table: %v %v", w, ok)
	}
	if _, ok := tab.wait(12, 10*time.Millisecond); ok {
		t.Error("table: a window never set was found")
	}
	tab.Close()
	if _, ok := tab.wait(12, time.Hour); ok {
		t.Error("closed table: a window never set was found")
	}
}

// TestWindowPlanCloseEndsPacedWait: a capture worker waiting (Pace) for
// the evidence of an earlier interval stops waiting once the plan is
// closed, as a stopping receiver closes it before draining its workers.
func TestWindowPlanCloseEndsPacedWait(t *testing.T) {
	pl := NewWindowPlan(testParams(), 1)
	pl.Pace(time.Hour)
	const b = int64(1_763_000_000)
	pl.classFor(b, true) // the first boundary: nothing before it to wait for
	done := make(chan struct{})
	go func() {
		defer close(done)
		pl.startFor(b+10, true) // waits for the evidence of interval b+8 or so
	}()
	time.Sleep(50 * time.Millisecond) // usually waiting by now; Close must end the wait or prevent it
	pl.Close()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a paced wait for evidence outlived Close by a minute")
	}
}
