package interval

import (
	"bytes"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sketch"
)

type simPkt struct {
	send, recv int64
	lost       bool
	p          capture.Packet
}

func testParams() Params {
	sp := sketch.DefaultParams()
	sp.Columns = 512
	return Params{T: int64(time.Second), MaxDelay: int64(50 * time.Millisecond), Guard: int64(time.Millisecond),
		Sketch: sp, LDA: sketch.DefaultLDAParams(), Classes: 2, Heavy: 10, FlowCap: 1 << 16}
}

// simulate makes packets over n intervals starting at base, with one-way
// delays below maxDelay plus a receiver clock offset within ±guard/2, so
// that many packets straddle boundaries.
func simulate(t *testing.T, p Params, base int64, n int, lossP float64, seed uint64) []simPkt {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	var pk []simPkt
	offset := -p.Guard / 2
	for f := range 60 {
		key, err := capture.FlowKeyFromAddrs(netip.AddrFrom4([4]byte{10, 0, byte(f >> 8), byte(f)}),
			netip.MustParseAddr("192.0.2.7"), 17, uint16(1000+f), 443)
		if err != nil {
			t.Fatal(err)
		}
		fh := r.Uint64()
		cnt := 20 + r.IntN(400)
		for range cnt {
			send := base + r.Int64N(int64(n)*p.T)
			// Concentrate a third of the packets around boundaries.
			if r.IntN(3) == 0 {
				b := (send/p.T + int64(r.IntN(2))) * p.T
				send = b - p.MaxDelay + r.Int64N(2*p.MaxDelay)
				if send < base {
					send = base
				}
			}
			delay := 1 + r.Int64N(p.MaxDelay-p.Guard)
			pk = append(pk, simPkt{send: send, recv: send + delay + offset, lost: r.Float64() < lossP,
				p: capture.Packet{Key: key, FlowHash: fh, PktHash: r.Uint64(), WireLen: uint32(60 + r.IntN(1400)),
					Weight: 1, Class: uint16(f % 2)}})
		}
	}
	return pk
}

func expected(t *testing.T, p Params, pk []simPkt, recv bool) map[int64]*Sketches {
	t.Helper()
	out := map[int64]*Sketches{}
	for i := range pk {
		if recv && pk[i].lost {
			continue
		}
		id := ID(pk[i].send, p.T)
		s := out[id]
		if s == nil {
			var err error
			if s, err = NewSketches(p); err != nil {
				t.Fatal(err)
			}
			out[id] = s
		}
		q := pk[i].p
		ts := pk[i].send
		if recv {
			ts = pk[i].recv
		}
		s.Add(&q, ts-id*p.T)
	}
	return out
}

func sameSketches(a, b *Sketches) bool {
	if !a.LDS.Equal(b.LDS) || a.Packets != b.Packets || a.Bytes != b.Bytes || !slices.Equal(a.ClassPackets, b.ClassPackets) {
		return false
	}
	for i := range a.LDA {
		x, _ := a.LDA[i].MarshalBinary()
		y, _ := b.LDA[i].MarshalBinary()
		if !bytes.Equal(x, y) {
			return false
		}
	}
	return true
}

// TestExactBoundaryAssignment checks DESIGN.md §3's requirement against
// ground truth: every receiver-side sketch equals the sketch of exactly the
// packets the sender sent in that interval, timed at the receiver.
func TestExactBoundaryAssignment(t *testing.T) {
	for _, tc := range []struct {
		name       string
		loss       float64
		interleave bool
	}{{"no-loss", 0, false}, {"loss", 0.02, false}, {"no-loss-interleaved", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := testParams()
			base := int64(1_763_000_000) * p.T
			pk := simulate(t, p, base, 5, tc.loss, 42)
			wantS, wantR := expected(t, p, pk, false), expected(t, p, pk, true)

			sendOrder := slices.Clone(pk)
			slices.SortFunc(sendOrder, func(a, b simPkt) int { return int(a.send - b.send) })
			recvOrder := make([]simPkt, 0, len(pk))
			for _, x := range pk {
				if !x.lost {
					recvOrder = append(recvOrder, x)
				}
			}
			slices.SortFunc(recvOrder, func(a, b simPkt) int { return int(a.recv - b.recv) })

			sb, err := NewSenderBuilder(p, base)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := NewRxBuilder(p, base, true)
			if err != nil {
				t.Fatal(err)
			}
			m := NewMatcher(p, time.Hour, 64)
			now := time.Unix(0, 0)
			got := map[int64]*Matched{}
			emit := func(mt *Matched) {
				if got[mt.ID] != nil {
					t.Errorf("interval %d emitted twice", mt.ID)
				}
				got[mt.ID] = mt
			}
			var sndIvs []*SenderInterval
			for i := range sendOrder {
				q := sendOrder[i].p
				q.TS = sendOrder[i].send
				sb.Add(&q, func(si *SenderInterval) { sndIvs = append(sndIvs, si) })
			}
			sb.Flush(func(si *SenderInterval) { sndIvs = append(sndIvs, si) })
			for _, si := range sndIvs {
				if !sameSketches(si.Sk, wantS[si.ID]) {
					t.Errorf("sender interval %d differs from ground truth", si.ID)
				}
			}
			next := 0
			feedSender := func() {
				if next < len(sndIvs) {
					m.AddSender(sndIvs[next], SenderMeta{}, now, emit)
					next++
				}
			}
			if !tc.interleave {
				for next < len(sndIvs) {
					feedSender()
				}
			}
			for i := range recvOrder {
				q := recvOrder[i].p
				q.TS = recvOrder[i].recv
				rb.Add(&q, func(s *Sealed) {
					m.AddSealed(s, now, emit)
					feedSender()
				})
			}
			rb.Flush(func(s *Sealed) { m.AddSealed(s, now, emit) })
			for next < len(sndIvs) {
				feedSender()
			}
			m.RxGone(now, emit)
			m.SenderGone(now, emit)
			if !m.Idle() {
				t.Fatalf("matcher not idle: %d pending", m.Pending())
			}
			matched := 0
			for id, w := range wantR {
				mt := got[id]
				if mt == nil {
					t.Errorf("interval %d never emitted", id)
					continue
				}
				if mt.Outcome != results.OutcomeMatched {
					t.Errorf("interval %d outcome %s, want matched", id, mt.Outcome)
					continue
				}
				if mt.Unresolved != 0 || mt.Late != 0 {
					t.Errorf("interval %d: %d unresolved, %d late", id, mt.Unresolved, mt.Late)
				}
				if !sameSketches(mt.Rx, w) {
					t.Errorf("interval %d: receiver sketch differs from ground truth (%d vs %d packets)", id, mt.Rx.Packets, w.Packets)
				}
				// The flow table counts exactly the flow's received packets.
				var total uint64
				for _, f := range mt.Flows.Flows {
					total += f.Packets
				}
				if total != w.Packets {
					t.Errorf("interval %d: flow table holds %d packets, want %d", id, total, w.Packets)
				}
				matched++
			}
			if matched != len(wantR) || matched < 5 {
				t.Errorf("matched %d intervals, want %d (>= 5)", matched, len(wantR))
			}
		})
	}
}

// TestPartialAndMissingSender: a sender that starts mid-interval flags it,
// and an interval whose sender sketch never comes is reported, not guessed.
func TestPartialAndMissingSender(t *testing.T) {
	p := testParams()
	base := int64(1_763_000_000) * p.T
	pk := simulate(t, p, base, 3, 0, 3)
	sb, _ := NewSenderBuilder(p, base+p.T/2) // capture began mid-interval
	var ivs []*SenderInterval
	slices.SortFunc(pk, func(a, b simPkt) int { return int(a.send - b.send) })
	for i := range pk {
		q := pk[i].p
		q.TS = pk[i].send
		sb.Add(&q, func(si *SenderInterval) { ivs = append(ivs, si) })
	}
	sb.Flush(func(si *SenderInterval) { ivs = append(ivs, si) })
	if !ivs[0].Partial || ivs[1].Partial {
		t.Fatalf("partial flags: first %v second %v", ivs[0].Partial, ivs[1].Partial)
	}
	rb, _ := NewRxBuilder(p, base, false)
	m := NewMatcher(p, time.Second, 64)
	now := time.Unix(100, 0)
	got := map[int64]string{}
	emit := func(mt *Matched) { got[mt.ID] = mt.Outcome }
	slices.SortFunc(pk, func(a, b simPkt) int { return int(a.recv - b.recv) })
	for i := range pk {
		q := pk[i].p
		q.TS = pk[i].recv
		rb.Add(&q, func(s *Sealed) { m.AddSealed(s, now, emit) })
	}
	rb.Flush(func(s *Sealed) { m.AddSealed(s, now, emit) })
	m.AddSender(ivs[0], SenderMeta{}, now, emit) // interval 1 and 2 never arrive
	m.Tick(now.Add(2*time.Second), emit)
	first := ID(base, p.T)
	if got[first] != results.OutcomePartial {
		t.Errorf("first interval outcome %q, want partial", got[first])
	}
	if got[first+1] != results.OutcomeNoSender {
		t.Errorf("second interval outcome %q, want no_sender_sketch", got[first+1])
	}
	if m.AddSender(ivs[1], SenderMeta{}, now, emit) {
		t.Error("a sender interval arriving after its interval was final must be reported as duplicate")
	}
}

// TestWorkersMergeEqualsOne: packets split over capture workers by flow (as
// PACKET_FANOUT does), each with its own builders, merge at the boundary
// into exactly what one worker would have built.
func TestWorkersMergeEqualsOne(t *testing.T) {
	p := testParams()
	base := int64(1_763_000_000) * p.T
	pk := simulate(t, p, base, 4, 0.01, 9)
	slices.SortFunc(pk, func(a, b simPkt) int { return int(a.send - b.send) })
	const n = 3
	run := func(workers int) (map[int64]*SenderInterval, map[int64]*Sealed) {
		sm, rm := NewSenderMerger(workers, p.Heavy), NewSealedMerger(workers)
		snd, rx := map[int64]*SenderInterval{}, map[int64]*Sealed{}
		emitS := func(si *SenderInterval) {
			if m, err := sm.Add(si); err != nil {
				t.Fatal(err)
			} else if m != nil {
				snd[m.ID] = m
			}
		}
		emitR := func(s *Sealed) {
			if m, err := rm.Add(s); err != nil {
				t.Fatal(err)
			} else if m != nil {
				rx[m.ID] = m
			}
		}
		sbs, rbs := make([]*SenderBuilder, workers), make([]*RxBuilder, workers)
		for w := range workers {
			sbs[w], _ = NewSenderBuilder(p, base)
			rbs[w], _ = NewRxBuilder(p, base, true)
		}
		for i := range pk {
			q := pk[i].p
			q.TS = pk[i].send
			sbs[int(q.FlowHash%uint64(workers))].Add(&q, emitS)
		}
		recv := slices.Clone(pk)
		slices.SortFunc(recv, func(a, b simPkt) int { return int(a.recv - b.recv) })
		for i := range recv {
			if recv[i].lost {
				continue
			}
			q := recv[i].p
			q.TS = recv[i].recv
			rbs[int(q.FlowHash%uint64(workers))].Add(&q, emitR)
		}
		for w := range workers {
			sbs[w].Flush(emitS)
			rbs[w].Flush(emitR)
		}
		return snd, rx
	}
	s1, r1 := run(1)
	sn, rn := run(n)
	if len(s1) != len(sn) || len(r1) != len(rn) || len(s1) < 4 {
		t.Fatalf("interval counts: %d/%d sender, %d/%d sealed", len(s1), len(sn), len(r1), len(rn))
	}
	for id, a := range s1 {
		b := sn[id]
		if b == nil || !sameSketches(a.Sk, b.Sk) || !slices.Equal(a.Boundary, b.Boundary) {
			t.Errorf("sender interval %d: %d workers differ from one", id, n)
		}
	}
	for id, a := range r1 {
		b := rn[id]
		if b == nil || !sameSketches(a.Direct, b.Direct) || len(a.HeldNext) != len(b.HeldNext) || a.Flows.Len() != b.Flows.Len() {
			t.Errorf("sealed interval %d: %d workers differ from one", id, n)
			continue
		}
		for _, f := range a.Flows.Flows {
			g := b.Flows.Lookup(f.Key, f.FlowHash)
			if g == nil || g.Packets != f.Packets || !slices.Equal(g.Cells, f.Cells) {
				t.Errorf("interval %d flow %v: merged flow table differs", id, f.Key)
			}
		}
	}
}

// TestHeavyFlowsFound: the constant-memory heavy-flow table reports the
// truly heaviest flows among 50,000 (Pareto sizes), with counts never
// above the truth.
func TestHeavyFlowsFound(t *testing.T) {
	p := testParams()
	p.Heavy = 100
	b, err := NewSenderBuilder(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	type flow struct {
		key  capture.FlowKey
		hash uint64
		n    int
	}
	flows := make([]flow, 50000)
	var order []int
	for i := range flows {
		k, _ := capture.FlowKeyFromAddrs(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), netip.MustParseAddr("192.0.2.1"), 6, 1, 2)
		flows[i] = flow{k, r.Uint64(), int(3 / math.Pow(r.Float64(), 1/1.1))}
		for range flows[i].n {
			order = append(order, i)
		}
	}
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var got *SenderInterval
	for j, i := range order {
		pk := capture.Packet{TS: int64(j), Key: flows[i].key, FlowHash: flows[i].hash, PktHash: r.Uint64(), Weight: 1}
		b.Add(&pk, func(si *SenderInterval) { got = si })
	}
	b.Flush(func(si *SenderInterval) { got = si })
	got.Finish()
	slices.SortFunc(flows, func(a, b flow) int { return b.n - a.n })
	reported := map[capture.FlowKey]uint64{}
	for i, k := range got.Heavy {
		reported[k] = got.HeavyN[i]
	}
	for i := range 20 {
		c, ok := reported[flows[i].key]
		if !ok {
			t.Errorf("heavy flow #%d (%d packets) not reported", i+1, flows[i].n)
		} else if c > uint64(flows[i].n) {
			t.Errorf("heavy flow #%d: count %d above the true %d", i+1, c, flows[i].n)
		}
	}
	t.Logf("%d flows, %d packets; top-20 sizes %d..%d all reported among %d", len(flows), len(order), flows[0].n, flows[19].n, len(got.Heavy))
}

// TestFlowTableHashCollision: the flow table is keyed by the 64-bit flow
// hash for speed, but two flows that share a hash stay two flows.
func TestFlowTableHashCollision(t *testing.T) {
	ft := NewFlowTable(10, sketch.DefaultParams(), false)
	a, _ := capture.FlowKeyFromAddrs(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("192.0.2.1"), 6, 1, 2)
	b, _ := capture.FlowKeyFromAddrs(netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("192.0.2.1"), 6, 1, 2)
	for i := range 5 {
		k := a
		if i%2 == 1 {
			k = b
		}
		ft.add(&capture.Packet{Key: k, FlowHash: 42, WireLen: 100}, nil)
	}
	fa, fb := ft.Lookup(a, 42), ft.Lookup(b, 42)
	if ft.Len() != 2 || fa == nil || fb == nil || fa.Packets != 3 || fb.Packets != 2 {
		t.Fatalf("flows %d, a %+v, b %+v: want 2 flows with 3 and 2 packets", ft.Len(), fa, fb)
	}
	other := NewFlowTable(10, sketch.DefaultParams(), false)
	other.merge(ft)
	if g := other.Lookup(b, 42); g == nil || g.Packets != 2 || other.Len() != 2 {
		t.Fatalf("merge lost a colliding flow: %+v", g)
	}
}
