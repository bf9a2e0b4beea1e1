package interval

import (
	"bytes"
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/retrieval"
	"github.com/lds-net/lds/internal/sketch"
)

type simPkt struct {
	send, recv int64
	lost       bool
	// rxPrev: the receiver is expected to place this packet one interval
	// before its send interval (a duplicate of a packet sent before the
	// boundary: the documented tie rule).
	rxPrev bool
	p      capture.Packet
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
		if recv && pk[i].rxPrev {
			id--
		}
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

// TestExactBoundaryAssignment checks the requirement of docs/DESIGN.md,
// "2. Packet → interval", against ground truth: every receiver-side sketch
// equals the sketch of exactly the packets the sender sent in that
// interval, timed at the receiver.
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
			if n, _ := runExact(t, p, base, pk, tc.interleave); n < 5 {
				t.Errorf("matched %d intervals, want >= 5", n)
			}
		})
	}
}

// byTime returns pk in send order, and the packets received (not lost)
// in receive order.
func byTime(pk []simPkt) (sent, received []simPkt) {
	sent = slices.Clone(pk)
	slices.SortStableFunc(sent, func(a, b simPkt) int { return cmp.Compare(a.send, b.send) })
	received = make([]simPkt, 0, len(pk))
	for _, x := range pk {
		if !x.lost {
			received = append(received, x)
		}
	}
	slices.SortStableFunc(received, func(a, b simPkt) int { return cmp.Compare(a.recv, b.recv) })
	return sent, received
}

// newBuilders makes both ends' builders for p from base, or fails the test.
func newBuilders(t *testing.T, p Params, base int64) (*SenderBuilder, *ReceiverBuilder) {
	t.Helper()
	sb, err := NewSenderBuilder(p, base)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := NewReceiverBuilder(p, base, true)
	if err != nil {
		t.Fatal(err)
	}
	return sb, rb
}

// sendAll runs sent (in send order) through sb as the capture loop does,
// in batches of 1 to 40 packets (AddBatch), flushes it and returns its
// intervals in the order it emitted them.
func sendAll(sb *SenderBuilder, sent []simPkt) []*SenderInterval {
	var out []*SenderInterval
	keep := func(si *SenderInterval) { out = append(out, si) }
	pkts := make([]capture.Packet, len(sent))
	for i := range sent {
		pkts[i] = sent[i].p
		pkts[i].TS = sent[i].send
	}
	r := rand.New(rand.NewPCG(uint64(len(sent)), 5))
	for len(pkts) > 0 {
		n := min(1+r.IntN(40), len(pkts))
		sb.AddBatch(pkts[:n], nil, keep)
		pkts = pkts[n:]
	}
	sb.Flush(keep)
	return out
}

// sendEach is sendAll a packet at a time (Add).
func sendEach(sb *SenderBuilder, sent []simPkt) []*SenderInterval {
	var out []*SenderInterval
	keep := func(si *SenderInterval) { out = append(out, si) }
	for i := range sent {
		q := sent[i].p
		q.TS = sent[i].send
		sb.Add(&q, keep)
	}
	sb.Flush(keep)
	return out
}

// TestAddBatchEqualsAdd: the capture loop's path (AddBatch: each
// packet's cells found and prefetched ahead) emits the same intervals as
// Add, whether the sketch is plain (the spot path) or not, and across
// interval ends inside a batch.
func TestAddBatchEqualsAdd(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*sketch.Params)
	}{
		{"plain", func(*sketch.Params) {}},
		{"k 3", func(p *sketch.Params) { p.VLDA = 3 }},
		{"sampled rows", func(p *sketch.Params) { p.Sampling = []float64{0.25, 1, 0.5, 1} }},
		{"nine rows", func(p *sketch.Params) { p.Rows, p.Sampling = sketch.SpotRows+1, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testParams()
			tc.set(&p.Sketch)
			p.Heavy, p.LostCells = 20, sketch.IBLTCells(200)
			base := int64(1_763_000_000) * p.T
			sent, _ := byTime(simulate(t, p, base, 4, 0, 9))
			a, _ := newBuilders(t, p, base)
			b, _ := newBuilders(t, p, base)
			want, got := sendEach(a, sent), sendAll(b, sent)
			if len(got) != len(want) {
				t.Fatalf("AddBatch emitted %d intervals, Add %d", len(got), len(want))
			}
			for i := range want {
				w, g := want[i], got[i]
				if err := errors.Join(w.Finish(), g.Finish()); err != nil {
					t.Fatal(err)
				}
				if g.ID != w.ID || !sameSketches(g.Sk, w.Sk) || !sameSplit(g, w) || !slices.Equal(g.Heavy, w.Heavy) ||
					!slices.Equal(g.HeavyN, w.HeavyN) || g.Late != w.Late {
					t.Errorf("interval %d: AddBatch's differs from Add's", w.ID)
				}
				if !sameLogs(g.Logs, w.Logs) {
					t.Errorf("interval %d: AddBatch's packet log differs from Add's", w.ID)
				}
			}
		})
	}
}

// sameLogs reports whether two sets of packet logs hold the same records.
func sameLogs(a, b []*PacketLog) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Len() != b[i].Len() || !slices.Equal(a[i].Keys, b[i].Keys) {
			return false
		}
		for j := range a[i].Len() {
			if a[i].chunks[j>>logRecsBits][j&(logRecsChunk-1)] != b[i].chunks[j>>logRecsBits][j&(logRecsChunk-1)] {
				return false
			}
		}
	}
	return true
}

// runExact runs pk through a sender builder, a receiver builder and the
// matcher (sender intervals fed all first, or interleaved with the
// receiver's sealing) and checks every receiver sketch and flow table
// against the packets' true send intervals. It returns the number of
// intervals matched and the sender's intervals.
func runExact(t *testing.T, p Params, base int64, pk []simPkt, interleave bool) (int, []*SenderInterval) {
	t.Helper()
	wantS, wantR := expected(t, p, pk, false), expected(t, p, pk, true)

	sendOrder, recvOrder := byTime(pk)
	sb, rb := newBuilders(t, p, base)
	m := NewMatcher(p, time.Hour, 64)
	now := time.Unix(0, 0)
	got := map[int64]*Matched{}
	emit := func(mt *Matched) {
		if got[mt.ID] != nil {
			t.Errorf("interval %d emitted twice", mt.ID)
		}
		got[mt.ID] = mt
	}
	sndIvs := sendAll(sb, sendOrder)
	for i, si := range sndIvs {
		if !sameSketches(si.Sk, wantS[si.ID]) {
			t.Errorf("sender interval %d differs from ground truth", si.ID)
		}
		if i > 0 && si.ID <= sndIvs[i-1].ID {
			t.Errorf("sender interval %d emitted after %d", si.ID, sndIvs[i-1].ID)
		}
	}
	next := 0
	feedSender := func() {
		if next < len(sndIvs) {
			m.AddSender(sndIvs[next], SenderMeta{}, now, emit)
			next++
		}
	}
	if !interleave {
		for next < len(sndIvs) {
			feedSender()
		}
	}
	for i := range recvOrder {
		q := recvOrder[i].p
		q.TS = recvOrder[i].recv
		rb.Add(&q, func(s *ReceiverInterval) {
			m.AddReceiver(s, now, emit)
			feedSender()
		})
	}
	rb.Flush(func(s *ReceiverInterval) { m.AddReceiver(s, now, emit) })
	for next < len(sndIvs) {
		feedSender()
	}
	m.ReceiverGone(now, emit)
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
		if !sameSketches(mt.Receiver, w) {
			t.Errorf("interval %d: receiver sketch differs from ground truth (%d vs %d packets)", id, mt.Receiver.Packets, w.Packets)
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
	if matched != len(wantR) {
		t.Errorf("matched %d intervals, want %d", matched, len(wantR))
	}
	return matched, sndIvs
}

// TestExactBoundaryHighRate: ~250k packets within 60 ms of one boundary
// (about 4 Mpps there; ~210k of them in the sender's boundary function),
// with receiver clocks ahead and behind within the guard and duplicates
// of identical content on both sides of the boundary: every held packet
// lands where the sender saw it (a duplicate seen before the boundary
// takes its twin along: the documented tie rule).
func TestExactBoundaryHighRate(t *testing.T) {
	n := 250_000
	if testing.Short() {
		n = 60_000
	}
	for _, offset := range []int64{-int64(400 * time.Microsecond), int64(900 * time.Microsecond)} {
		t.Run(time.Duration(offset).String(), func(t *testing.T) {
			p := testParams()
			base := int64(1_763_000_000) * p.T
			b := base + p.T
			r := rand.New(rand.NewPCG(uint64(offset), 3))
			var flows []capture.FlowKey
			for f := range 500 {
				k, err := capture.FlowKeyFromAddrs(netip.AddrFrom4([4]byte{10, 1, byte(f >> 8), byte(f)}), netip.MustParseAddr("192.0.2.9"), 6, uint16(f), 80)
				if err != nil {
					t.Fatal(err)
				}
				flows = append(flows, k)
			}
			pkt := func(send int64) simPkt {
				f := r.IntN(len(flows))
				delay := r.Int64N(p.MaxDelay - p.Guard)
				return simPkt{send: send, recv: send + delay + offset, lost: r.IntN(100) == 0,
					p: capture.Packet{Key: flows[f], FlowHash: uint64(f)*0x9e3779b97f4a7c15 + 1, PktHash: r.Uint64(),
						WireLen: uint32(60 + r.IntN(1400)), Weight: 1, Class: uint16(f % 2)}}
			}
			var pk []simPkt
			for range n {
				pk = append(pk, pkt(b-60*int64(time.Millisecond)+r.Int64N(120*int64(time.Millisecond))))
			}
			for range 2000 { // the rest of both intervals, thinly
				pk = append(pk, pkt(base+r.Int64N(2*p.T)))
			}
			// Identical content sent just before and just after B.
			for range 200 {
				x := pkt(b - 1 - r.Int64N(p.MaxDelay))
				x.lost = false
				y := x
				y.send = b + r.Int64N(p.MaxDelay)
				y.recv = y.send + r.Int64N(p.MaxDelay-p.Guard) + offset
				// Only a held twin (received before B + max_delay) is
				// placed by the boundary function; a later one is placed
				// by its receive time, correctly.
				y.rxPrev = y.recv < b+p.MaxDelay
				pk = append(pk, x, y)
			}
			got, snd := runExact(t, p, base, pk, true)
			if got != 2 || len(snd) != 2 {
				t.Fatalf("matched %d intervals from %d sender intervals, want 2", got, len(snd))
			}
			// The window B ± (max_delay + guard) holds 102 of the 120 ms.
			if k := snd[0].Split.Len(); k < n*8/10 {
				t.Errorf("boundary function over %d keys, want >= %d", k, n*8/10)
			}
			t.Logf("boundary function: %d keys, %d bytes encoded", snd[0].Split.Len(), retrieval.EncodedLen(snd[0].Split.Len(), snd[0].Split.Width()))
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
	rb, _ := NewReceiverBuilder(p, base, false)
	m := NewMatcher(p, time.Second, 64)
	now := time.Unix(100, 0)
	got := map[int64]results.Outcome{}
	emit := func(mt *Matched) { got[mt.ID] = mt.Outcome }
	slices.SortFunc(pk, func(a, b simPkt) int { return int(a.recv - b.recv) })
	for i := range pk {
		q := pk[i].p
		q.TS = pk[i].recv
		rb.Add(&q, func(s *ReceiverInterval) { m.AddReceiver(s, now, emit) })
	}
	rb.Flush(func(s *ReceiverInterval) { m.AddReceiver(s, now, emit) })
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
	run := func(workers int) (map[int64]*SenderInterval, map[int64]*ReceiverInterval) {
		sm, rm := NewSenderMerger(workers, p.Heavy), NewReceiverMerger(workers)
		snd, rx := map[int64]*SenderInterval{}, map[int64]*ReceiverInterval{}
		emitS := func(si *SenderInterval) {
			if m, err := sm.Add(si); err != nil {
				t.Fatal(err)
			} else if m != nil {
				// Finished as the sender's ship stage does.
				if err := m.Finish(); err != nil {
					t.Fatal(err)
				}
				snd[m.ID] = m
			}
		}
		emitR := func(s *ReceiverInterval) {
			if m, err := rm.Add(s); err != nil {
				t.Fatal(err)
			} else if m != nil {
				rx[m.ID] = m
			}
		}
		sbs, rbs := make([]*SenderBuilder, workers), make([]*ReceiverBuilder, workers)
		for w := range workers {
			sbs[w], _ = NewSenderBuilder(p, base)
			rbs[w], _ = NewReceiverBuilder(p, base, true)
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
		if b == nil || !sameSketches(a.Sk, b.Sk) || !slices.Equal(keySet(a.Keys), keySet(b.Keys)) || !sameSplit(a, b) {
			t.Errorf("sender interval %d: %d workers differ from one", id, n)
		}
	}
	for id, a := range r1 {
		b := rn[id]
		if b == nil || !sameSketches(a.Direct, b.Direct) || len(a.HeldNext.Pkts) != len(b.HeldNext.Pkts) || a.Flows.Len() != b.Flows.Len() {
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

// keySet is a boundary's keys sorted by hash (Keys come in capture order).
func keySet(k []BoundaryKey) []BoundaryKey {
	k = slices.Clone(k)
	slices.SortFunc(k, func(a, b BoundaryKey) int { return cmp.Or(cmp.Compare(a.Hash, b.Hash), cmp.Compare(a.Off, b.Off)) })
	return k
}

func sameSplit(a, b *SenderInterval) bool {
	if a.Split == nil || b.Split == nil {
		return false
	}
	x, _ := a.Split.MarshalBinary()
	y, _ := b.Split.MarshalBinary()
	return bytes.Equal(x, y)
}

// TestSenderHoldsIntervalForBoundaryWindow: an interval leaves the builder
// only once the sender's clock passes its end + max_delay + guard (or at
// the end of input / a stop), in order, with Keys holding exactly the
// packets of its end boundary's key window [end - max_delay - 2 guard,
// end + max_delay + guard), each answering its offset.
func TestSenderHoldsIntervalForBoundaryWindow(t *testing.T) {
	p := testParams()
	base := int64(1_763_000_000) * p.T
	w := p.MaxDelay + p.Guard
	ms := int64(time.Millisecond)
	var _ = w
	type step struct {
		ts       int64 // packet time, relative to base
		advance  bool  // Advance to ts instead of a packet
		wantEmit []int64
	}
	tests := []struct {
		name  string
		steps []step
		flush string // "", "flush", "partial"
		want  []int64
	}{
		{"held until the window passes", []step{
			{ts: 10 * ms}, {ts: p.T - 1}, {ts: p.T}, {ts: p.T + w - 1},
			{ts: p.T + w, wantEmit: []int64{0}},
			{ts: 2*p.T + 5*ms}, {ts: 2*p.T + w + 7*ms, wantEmit: []int64{1}},
		}, "flush", []int64{0, 1, 2}},
		{"idle link: the wall clock releases it", []step{
			{ts: 10 * ms}, {ts: p.T - 2*ms}, {ts: p.T + w - 1, advance: true},
			{ts: p.T + w, advance: true, wantEmit: []int64{0}},
		}, "", []int64{0}},
		{"long idle gap: skipped to now, in order", []step{
			{ts: 10 * ms}, {ts: p.T - ms}, {ts: 40 * p.T, wantEmit: []int64{0}},
		}, "partial", []int64{0, 40}},
		{"short idle gap: empty intervals, in order", []step{
			{ts: 10 * ms}, {ts: p.T - ms}, {ts: 4*p.T + 2*ms, wantEmit: []int64{0, 1, 2}},
		}, "flush", []int64{0, 1, 2, 3, 4}},
		{"stop inside the window", []step{
			{ts: p.T - 3*ms}, {ts: p.T + 3*ms},
		}, "partial", []int64{0, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := NewSenderBuilder(p, base)
			if err != nil {
				t.Fatal(err)
			}
			var got []*SenderInterval
			emit := func(si *SenderInterval) { got = append(got, si) }
			sent := map[uint64]int64{} // packet hash -> send time
			for i, st := range tc.steps {
				before := len(got)
				if st.advance {
					sb.Advance(base+st.ts, emit)
				} else {
					h := uint64(i+1) * 0x9e3779b97f4a7c15
					sent[h] = base + st.ts
					sb.Add(&capture.Packet{TS: base + st.ts, PktHash: h, FlowHash: 1, Weight: 1, WireLen: 100}, emit)
				}
				var ids []int64
				for _, si := range got[before:] {
					ids = append(ids, si.ID-ID(base, p.T))
				}
				if !slices.Equal(ids, st.wantEmit) {
					t.Fatalf("step %d (t=%v): emitted %v, want %v", i, time.Duration(st.ts), ids, st.wantEmit)
				}
			}
			switch tc.flush {
			case "flush":
				sb.Flush(emit)
			case "partial":
				sb.FlushPartial(base+tc.steps[len(tc.steps)-1].ts+ms, emit)
			}
			var ids []int64
			for _, si := range got {
				ids = append(ids, si.ID-ID(base, p.T))
				from, to := p.KeyWindow(si.ID+1, p.MaxDelay)
				var want []BoundaryKey
				for h, ts := range sent {
					if ts >= from && ts < to {
						want = append(want, BoundaryKey{Hash: h, Off: uint32(si.ID + 1 - ID(ts, p.T))})
					}
				}
				if err := si.Finish(); err != nil {
					t.Fatal(err)
				}
				slices.SortFunc(want, func(a, b BoundaryKey) int { return cmp.Compare(a.Hash, b.Hash) })
				if !slices.Equal(keySet(si.Keys), want) {
					t.Errorf("interval %d: keys %v, want %v", si.ID, si.Keys, want)
				}
				for _, k := range want {
					if got := si.SentOffset(k.Hash); got != uint64(k.Off) {
						t.Errorf("interval %d: %#x answered offset %d, want %d", si.ID, k.Hash, got, k.Off)
					}
				}
			}
			if !slices.Equal(ids, tc.want) {
				t.Errorf("emitted %v in all, want %v", ids, tc.want)
			}
		})
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
	if err := got.Finish(); err != nil {
		t.Fatal(err)
	}
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
		ft.add(&capture.Packet{Key: k, FlowHash: 42, WireLen: 100})
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
