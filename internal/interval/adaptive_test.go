package interval

import (
	"cmp"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
)

// delayFn draws the one-way delay of a packet sent at send (ns since base).
type delayFn func(send int64, r *rand.Rand) int64

// simulateDelays makes ~rate packets a second over n intervals from base,
// 80 flows, with one-way delays from delay and a receiver clock offset
// within ±guard/2.
func simulateDelays(t *testing.T, p Params, base int64, n int, rate int, lossP float64, delay delayFn, seed uint64) []simPkt {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 11))
	var flows []capture.FlowKey
	for f := range 80 {
		k, err := capture.FlowKeyFromAddrs(netip.AddrFrom4([4]byte{10, 2, byte(f >> 8), byte(f)}), netip.MustParseAddr("192.0.2.8"), 17, uint16(2000+f), 53)
		if err != nil {
			t.Fatal(err)
		}
		flows = append(flows, k)
	}
	total := int(int64(rate) * int64(n) * p.T / int64(time.Second))
	pk := make([]simPkt, 0, total)
	offset := p.Guard/2 - r.Int64N(p.Guard+1)
	for range total {
		send := r.Int64N(int64(n) * p.T)
		f := r.IntN(len(flows))
		pk = append(pk, simPkt{send: base + send, recv: base + send + delay(send, r) + offset, lost: r.Float64() < lossP,
			p: capture.Packet{Key: flows[f], FlowHash: uint64(f)*0x9e3779b97f4a7c15 + 7, PktHash: r.Uint64(),
				WireLen: uint32(60 + r.IntN(1400)), Weight: 1, Class: uint16(f % 2)}})
	}
	return pk
}

type adaptiveRun struct {
	matched map[int64]*Matched
	checks  map[int64]Assignment
	snd     []*SenderInterval
	plan    *WindowPlan
}

// runAdaptiveWorkers runs the sender builder, the receiver builder with a
// window plan and the matcher in time order, as live daemons on one clock
// do: a sender packet at its send time, a receiver packet at its receive
// time, both builders advanced by every event (the wall clock), the
// receiver's announced windows handed to the sender's table at once, and
// (observe) the plan fed each matched interval's own evidence. n capture
// workers run at each end (packets spread by flow hash, as with AF_PACKET
// fanout), their intervals merged, one plan shared by the receiver's workers.
func runAdaptiveWorkers(t *testing.T, p Params, base int64, pk []simPkt, prime float64, observe bool, n int) *adaptiveRun {
	t.Helper()
	type ev struct {
		ts   int64
		recv bool
		p    capture.Packet
	}
	evs := make([]ev, 0, 2*len(pk))
	for i := range pk {
		q := pk[i].p
		q.TS = pk[i].send
		evs = append(evs, ev{ts: q.TS, p: q})
		if !pk[i].lost {
			q.TS = pk[i].recv
			evs = append(evs, ev{ts: q.TS, recv: true, p: q})
		}
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return cmp.Compare(a.ts, b.ts) })

	plan := NewWindowPlan(p, n)
	if prime > 0 {
		plan.Observe(0, prime, false)
	}
	table := NewWindowTable()
	sbs, rbs := make([]*SenderBuilder, n), make([]*ReceiverBuilder, n)
	for w := range n {
		var err error
		if sbs[w], err = NewSenderBuilderWindows(p, base, table, 0); err != nil {
			t.Fatal(err)
		}
		if rbs[w], err = NewReceiverBuilderPlan(p, base, true, plan); err != nil {
			t.Fatal(err)
		}
	}
	sm, rm := NewSenderMerger(n, p.Heavy), NewReceiverMerger(n)
	m := NewMatcher(p, time.Hour, 64)
	now := time.Unix(0, 0)
	run := &adaptiveRun{matched: map[int64]*Matched{}, checks: map[int64]Assignment{}, plan: plan}
	emit := func(mt *Matched) {
		if run.matched[mt.ID] != nil {
			t.Errorf("interval %d emitted twice", mt.ID)
		}
		run.matched[mt.ID] = mt
		a := mt.CheckAssignment()
		run.checks[mt.ID] = a
		if observe {
			plan.Observe(mt.ID, a.Delay, a.Beyond(mt.Unresolved))
		}
	}
	var seq uint64
	forward := func() {
		var ws []Window
		ws, seq, _, _ = plan.Announced(seq)
		table.Set(ws...)
	}
	emitS := func(si *SenderInterval) {
		merged, err := sm.Add(si)
		if err != nil {
			t.Fatal(err)
		}
		if merged != nil {
			run.snd = append(run.snd, merged)
			m.AddSender(merged, SenderMeta{}, now, emit)
		}
	}
	emitR := func(s *ReceiverInterval) {
		merged, err := rm.Add(s)
		if err != nil {
			t.Fatal(err)
		}
		if merged != nil {
			m.AddReceiver(merged, now, emit)
		}
	}
	for i := range evs {
		e := &evs[i]
		w := int(e.p.FlowHash % uint64(n))
		if e.recv {
			rbs[w].Add(&e.p, emitR)
			for x := range n {
				if x != w {
					rbs[x].Advance(e.ts, emitR) // the idle workers' wall clock
				}
				sbs[x].Advance(e.ts, emitS)
			}
		} else {
			for x := range n {
				rbs[x].Advance(e.ts-p.Guard, emitR)
			}
			forward()
			sbs[w].Add(&e.p, emitS)
			for x := range n {
				if x != w {
					sbs[x].Advance(e.ts, emitS)
				}
			}
		}
		forward()
	}
	for _, rb := range rbs {
		rb.Flush(emitR)
	}
	plan.Close()
	forward()
	for _, sb := range sbs {
		sb.Flush(emitS)
	}
	m.ReceiverGone(now, emit)
	m.SenderGone(now, emit)
	if !m.Idle() {
		t.Fatalf("matcher not idle: %d pending", m.Pending())
	}
	return run
}

// flagged is the receiver's rule: an interval is flagged when its own
// check says packets may be misplaced, or when the next interval's does
// (its surplus came from this one).
func (run *adaptiveRun) flagged(id int64) bool {
	a, ok := run.checks[id]
	b, okNext := run.checks[id+1]
	return ok && a.Beyond(run.matched[id].Unresolved) || okNext && b.Beyond(run.matched[id+1].Unresolved)
}

// TestAdaptiveWindowsExact checks docs/DESIGN.md, "2. Packet → interval",
// against ground truth with windows the receiver chooses and tells the sender: every interval's
// receiver sketch equals the sketch of exactly the packets sent in it, or
// the interval is flagged (never an unflagged wrong sketch); and where
// every delay is below the window, every interval is exact and unflagged.
func TestAdaptiveWindowsExact(t *testing.T) {
	ms := int64(time.Millisecond)
	uniform := func(lo, hi int64) delayFn {
		return func(_ int64, r *rand.Rand) int64 { return lo + r.Int64N(hi-lo) }
	}
	tests := []struct {
		name      string
		T, D      time.Duration
		n, rate   int
		delay     delayFn
		prime     float64 // delay evidence given to the plan at start (0: none)
		observe   bool
		allExact  bool  // every interval exact, none flagged
		maxKeys   int   // largest boundary function, keys (0: not checked)
		wantFlags []int // intervals (from the first) that must be flagged
		exactFrom int   // intervals from this one on must be exact
		workers   int   // capture workers at each end (0: 1)
	}{
		{name: "few ms, T 1s, max_delay 1s: windows stay small", T: time.Second, D: time.Second, n: 5, rate: 20000,
			delay: uniform(100_000, 5*ms), observe: true, allExact: true, maxKeys: 20000 * 125 / 1000},
		{name: "delays up to 1s, T 1s, max_delay 1s", T: time.Second, D: time.Second, n: 6, rate: 4000,
			delay: uniform(ms, 999*ms), prime: float64(time.Second), allExact: true},
		{name: "T 100ms, max_delay 1s, delays up to 1s", T: 100 * time.Millisecond, D: time.Second, n: 30, rate: 4000,
			delay: uniform(ms, 995*ms), prime: float64(time.Second), allExact: true},
		{name: "two capture workers at each end, T 100ms, delays up to 1s", T: 100 * time.Millisecond, D: time.Second, n: 20, rate: 4000,
			delay: uniform(ms, 995*ms), prime: float64(time.Second), allExact: true, workers: 2},
		{name: "step 2ms to 250ms: flagged until the window grows, then exact", T: time.Second, D: time.Second, n: 8, rate: 4000,
			delay: func(s int64, r *rand.Rand) int64 {
				if s < 2*int64(time.Second)+400*ms {
					return ms + r.Int64N(ms)
				}
				return 240*ms + r.Int64N(10*ms)
			}, observe: true, wantFlags: []int{2, 3}, exactFrom: 6},
		{name: "step 2ms to 250ms, two capture workers at each end", T: time.Second, D: time.Second, n: 8, rate: 4000,
			delay: func(s int64, r *rand.Rand) int64 {
				if s < 2*int64(time.Second)+400*ms {
					return ms + r.Int64N(ms)
				}
				return 240*ms + r.Int64N(10*ms)
			}, observe: true, wantFlags: []int{2, 3}, exactFrom: 6, workers: 2},
		{name: "107-254 ms from the start, default settings: grows, then exact", T: time.Second, D: time.Second, n: 8, rate: 4000,
			delay: uniform(107*ms, 254*ms), observe: true, wantFlags: []int{0}, exactFrom: 3},
		{name: "max_delay 20ms, delays 100ms: every interval flagged", T: time.Second, D: 20 * time.Millisecond, n: 6, rate: 4000,
			delay: uniform(95*ms, 105*ms), observe: true, wantFlags: []int{0, 1, 2, 3, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testParams()
			p.T, p.MaxDelay = int64(tc.T), int64(tc.D)
			base := int64(1_763_000_000) * int64(time.Second)
			pk := simulateDelays(t, p, base, tc.n, tc.rate, 0.01, tc.delay, 5)
			run := runAdaptiveWorkers(t, p, base, pk, tc.prime, tc.observe, max(1, tc.workers))
			wantR := expected(t, p, pk, true)
			first := ID(base, p.T)
			wrongUnflagged := 0
			for id, w := range wantR {
				mt := run.matched[id]
				if mt == nil || mt.Outcome != results.OutcomeMatched {
					t.Errorf("interval %d not matched (%v)", id-first, mt)
					continue
				}
				exact := sameSketches(mt.Receiver, w)
				flag := run.flagged(id)
				switch {
				case tc.allExact && (!exact || flag):
					t.Errorf("interval %d: exact %v, flagged %v (%+v), want exact and unflagged", id-first, exact, flag, run.checks[id])
				case !exact && !flag:
					wrongUnflagged++
					t.Errorf("interval %d: receiver sketch wrong (%d vs %d packets) and not flagged (%+v)", id-first, mt.Receiver.Packets, w.Packets, run.checks[id])
				case tc.exactFrom > 0 && id-first >= int64(tc.exactFrom) && id-first < int64(tc.n) && (!exact || flag):
					t.Errorf("interval %d after the window adapted: exact %v, flagged %v", id-first, exact, flag)
				}
			}
			for _, f := range tc.wantFlags {
				if !run.flagged(first + int64(f)) {
					t.Errorf("interval %d not flagged (%+v)", f, run.checks[first+int64(f)])
				}
			}
			biggest := 0
			for _, si := range run.snd {
				biggest = max(biggest, si.Split.Len())
			}
			if tc.maxKeys > 0 && biggest > tc.maxKeys {
				t.Errorf("largest boundary function over %d keys, want <= %d (the window did not follow the delays)", biggest, tc.maxKeys)
			}
			t.Logf("%d packets, largest function %d keys, final target window %v", len(pk), biggest, time.Duration(run.plan.Target()))
		})
	}
}
