package interval

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/lds-net/lds/internal/capture"
)

// boundaryCost is what the boundaries of a run cost: the largest set of
// packets the receiver held at one boundary, and the boundary functions'
// encoded bytes per interval (the interior boundaries).
type boundaryCost struct {
	maxHeld   int
	meanBytes float64
}

// runCost feeds packets in time order through a sender builder and a
// receiver builder (with a plan when adaptive, the receiver's windows
// forwarded at once, as over the Ack stream) and measures the boundaries.
func runCost(t *testing.T, p Params, base int64, pk []simPkt, adaptive bool) boundaryCost {
	t.Helper()
	type ev struct {
		ts   int64
		recv bool
		i    int
	}
	evs := make([]ev, 0, 2*len(pk))
	for i := range pk {
		evs = append(evs, ev{ts: pk[i].send, i: i}, ev{ts: pk[i].recv, recv: true, i: i})
	}
	slices.SortFunc(evs, func(a, b ev) int { return cmp.Compare(a.ts, b.ts) })
	var plan *WindowPlan
	var table *WindowTable
	if adaptive {
		plan, table = NewWindowPlan(p, 1), NewWindowTable()
	}
	sb, err := NewSenderBuilderWindows(p, base, table, 0)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := NewReceiverBuilderPlan(p, base, false, plan)
	if err != nil {
		t.Fatal(err)
	}
	var c boundaryCost
	var bytes, n int
	last := ID(pk[len(pk)-1].send, p.T) // intervals past the trace are not interior
	emitS := func(si *SenderInterval) {
		if err := si.Finish(); err != nil {
			t.Fatal(err)
		}
		if si.ID >= ID(base, p.T) && si.ID < last {
			b, _ := si.Split.MarshalBinary()
			bytes += len(b)
			n++
		}
		si.Release()
	}
	emitR := func(s *ReceiverInterval) {
		c.maxHeld = max(c.maxHeld, len(s.HeldNext.Pkts))
		s.Release()
	}
	var seq uint64
	for _, e := range evs {
		q := pk[e.i].p
		q.TS = e.ts
		if e.recv {
			rb.Add(&q, emitR)
		} else {
			sb.Add(&q, emitS)
		}
		if adaptive {
			var ws []Window
			ws, seq, _, _ = plan.Announced(seq)
			table.Set(ws...)
		}
	}
	rb.Flush(emitR)
	sb.Flush(emitS)
	c.meanBytes = float64(bytes) / float64(max(n, 1))
	return c
}

// TestBoundaryCostFollowsDelays: with delays of a few ms, the adaptive
// windows under the default max_delay of 1 s cost what a fixed 50 ms bound
// costs (within 10 %): receiver memory (the packets held at a boundary)
// and wire bytes (the boundary function). The rate is 100 kpps to keep
// the test small; both costs scale with the rate (docs/PERFORMANCE.md has
// the 1 Mpps replay).
func TestBoundaryCostFollowsDelays(t *testing.T) {
	ms := int64(time.Millisecond)
	fixed := testParams()
	fixed.MaxDelay = 50 * ms
	adaptive := testParams()
	adaptive.MaxDelay = int64(time.Second)
	base := int64(1_763_000_000) * int64(time.Second)
	delay := func(_ int64, r *rand.Rand) int64 { return 500_000 + r.Int64N(6*ms) }
	pk := simulateDelays(t, fixed, base, 3, 100_000, 0.001, delay, 3)
	live := pk[:0:0]
	for _, x := range pk {
		if !x.lost {
			live = append(live, x)
		}
	}
	slices.SortFunc(live, func(a, b simPkt) int { return cmp.Compare(a.send, b.send) })
	f := runCost(t, fixed, base, live, false)
	a := runCost(t, adaptive, base, live, true)
	size := int(unsafe.Sizeof(capture.Packet{}))
	t.Logf("fixed 50 ms: %d packets held at most (%d B), %.0f B of boundary function an interval", f.maxHeld, f.maxHeld*size, f.meanBytes)
	t.Logf("adaptive, max_delay 1 s: %d packets held at most (%d B), %.0f B of boundary function an interval", a.maxHeld, a.maxHeld*size, a.meanBytes)
	if f.maxHeld == 0 || f.meanBytes == 0 {
		t.Fatal("nothing measured")
	}
	if float64(a.maxHeld) > 1.1*float64(f.maxHeld) {
		t.Errorf("receiver holds %d packets at a boundary, the fixed 50 ms bound %d: more than +10 %%", a.maxHeld, f.maxHeld)
	}
	if a.meanBytes > 1.1*f.meanBytes {
		t.Errorf("boundary function %.0f B an interval, the fixed 50 ms bound %.0f B: more than +10 %%", a.meanBytes, f.meanBytes)
	}
}
