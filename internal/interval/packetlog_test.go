package interval

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/sketch"
	"github.com/lds-net/lds/test/testutil"
)

func logPackets(n int, pool *recPool) *PacketLog {
	l := newPacketLog(0, pool)
	ht := newHeavyTable(1000)
	for i := range n {
		k := capture.FlowKey{SPort: uint16(i % 5000), DPort: 443, Proto: 6}
		k.Src[0], k.Dst[0] = 10, 192
		fh := uint64(i%5000)*0x9e3779b97f4a7c15 + 1
		ref := ht.addLog(&k, fh, l)
		l.add(uint64(i)*0xbf58476d1ce4e5b9+7, int64(i), ref|uint32(capture.IDTCPSeq)<<refKindShift, uint32(i))
	}
	return l
}

// TestPacketLogAnswers: the log names every asked packet it holds, with
// its flow, identifier and time, and nothing else.
func TestPacketLogAnswers(t *testing.T) {
	l := logPackets(100_000, &recPool{})
	want := map[uint64]bool{}
	for i := 0; i < 100_000; i += 997 {
		want[uint64(i)*0xbf58476d1ce4e5b9+7] = true
	}
	want[12345] = true // never logged
	got := map[uint64]LoggedPacket{}
	Answer([]*PacketLog{l}, want, func(p LoggedPacket) { got[p.Hash] = p })
	if len(got) != len(want)-1 {
		t.Fatalf("answered %d, want %d", len(got), len(want)-1)
	}
	for h, p := range got {
		i := int(p.SentNS)
		if h != uint64(i)*0xbf58476d1ce4e5b9+7 || p.ID != uint32(i) || p.IDKind != capture.IDTCPSeq || p.Key.SPort != uint16(i%5000) {
			t.Errorf("answer %+v for packet %d", p, i)
		}
	}
	l.Release()
}

// TestPacketLogAppendAllocs: a steady-state append allocates nothing (the
// chunks come back through the pool).
func TestPacketLogAppendAllocs(t *testing.T) {
	pool := &recPool{}
	logPackets(3*logRecsChunk, pool).Release()
	l := newPacketLog(0, pool)
	if n := testing.AllocsPerRun(2*logRecsChunk, func() { l.add(1, 2, 3, 4) }); n != 0 {
		t.Fatalf("%v allocations a packet, want 0", n)
	}
}

// BenchmarkLostBuild is the sender's off-path work for one interval of a
// million packets: its lost-packet table built from the log (ns a packet).
func BenchmarkLostBuild(b *testing.B) {
	l := logPackets(1_000_000, &recPool{})
	t, _ := sketch.NewIBLT(sketch.IBLTCells(1000))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	c0 := testutil.ThreadCPU()
	for b.Loop() {
		t.Reset()
		l.insertAll(t)
	}
	b.ReportMetric(float64(testutil.ThreadCPU()-c0)/float64(b.N)/1e6, "cpu-ns/packet")
}

// BenchmarkLostAnswer is the sender's answer to a full question (1000
// lost hashes) from a log of a million packets.
func BenchmarkLostAnswer(b *testing.B) {
	l := logPackets(1_000_000, &recPool{})
	want := map[uint64]bool{}
	for i := 0; i < 1_000_000; i += 1000 {
		want[uint64(i)*0xbf58476d1ce4e5b9+7] = true
	}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		Answer([]*PacketLog{l}, want, func(LoggedPacket) { n++ })
		if n != len(want) {
			b.Fatal(n)
		}
	}
}

// TestSenderLogNamesEveryPacket: through the sender's packet path, the
// log answers for every packet of each interval with the flow, time and
// identifier it was captured with (the truth kept here), across chunk
// ends, for flows that share one heavy-flow slot and one set of the
// table of other flows (more of them than a set holds), and for many
// flows competing for slots.
func TestSenderLogNamesEveryPacket(t *testing.T) {
	p := testParams()
	p.Heavy, p.LostCells = 1000, sketch.IBLTCells(1000)
	b, err := NewSenderBuilder(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 7))
	type flow struct {
		key  capture.FlowKey
		hash uint64
	}
	// Hashes that differ only above bit 49 share the slot and the set.
	const sharing = 3 * otherWays
	flows := make([]flow, sharing+30000)
	shared := r.Uint64()
	for i := range flows {
		flows[i].key, _ = capture.FlowKeyFromAddrs(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), netip.MustParseAddr("192.0.2.1"), 6, uint16(i), 443)
		flows[i].hash = r.Uint64()
		if i < sharing {
			flows[i].hash = shared ^ uint64(i)<<50
		}
	}
	type sent struct {
		id   int64
		flow int
		pkt  capture.Packet
	}
	truth := map[uint64]sent{}
	var got []*SenderInterval
	emit := func(si *SenderInterval) { got = append(got, si) }
	const perInterval = 40000 // more than two chunks of the log
	for j := range 3 * perInterval {
		f := j % sharing
		if j%2 == 1 {
			f = sharing + r.IntN(len(flows)-sharing)
		}
		pk := capture.Packet{TS: int64(j) * p.T / perInterval, Key: flows[f].key, FlowHash: flows[f].hash,
			PktHash: r.Uint64(), Weight: 1, IDKind: capture.IDKind(j % 3), ID: r.Uint32()}
		truth[pk.PktHash] = sent{ID(pk.TS, p.T), f, pk}
		b.Add(&pk, emit)
	}
	b.Flush(emit)
	answered := 0
	for _, si := range got {
		want := map[uint64]bool{}
		for h, s := range truth {
			if s.id == si.ID {
				want[h] = true
			}
		}
		n := 0
		Answer(si.Logs, want, func(lp LoggedPacket) {
			n++
			s, ok := truth[lp.Hash]
			if !ok || s.id != si.ID || lp.Key != s.pkt.Key || lp.SentNS != s.pkt.TS || lp.IDKind != s.pkt.IDKind || lp.ID != s.pkt.ID {
				t.Fatalf("interval %d: answer %+v, sent %+v (flow %d)", si.ID, lp, s.pkt, s.flow)
			}
		})
		if n != len(want) {
			t.Errorf("interval %d: %d of %d packets answered", si.ID, n, len(want))
		}
		answered += n
		si.Release()
		for _, l := range si.Logs {
			l.Release()
		}
	}
	if answered != len(truth) {
		t.Fatalf("%d of %d packets answered", answered, len(truth))
	}
}

// TestSenderLogAllocs: once the pools hold an interval's storage, the
// sender's packet path with the lost-packet table allocates nothing:
// every packet of an interval's middle (no boundary work), 4096 flows in
// the default heavy-flow table (a fifth of them sharing a slot), the logs
// given back when their interval leaves, as the sender does once they are
// answered.
func TestSenderLogAllocs(t *testing.T) {
	p := testParams()
	p.Heavy, p.LostCells = 1000, sketch.IBLTCells(1000)
	b, err := NewSenderBuilder(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	flows := make([]capture.FlowKey, 4096)
	for i := range flows {
		flows[i], _ = capture.FlowKeyFromAddrs(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), netip.MustParseAddr("192.0.2.1"), 6, 1, 2)
	}
	emit := func(si *SenderInterval) {
		si.Release()
		for _, l := range si.Logs {
			l.Release()
		}
	}
	const perInterval = 100_000 // past six log chunks
	pk := capture.Packet{Weight: 1, IDKind: capture.IDTCPSeq}
	j := 0
	add := func() {
		f := j * 7919 % len(flows)
		pk.TS, pk.Key, pk.ID = int64(j)*p.T/perInterval, flows[f], uint32(j)
		pk.FlowHash, pk.PktHash = uint64(f)*0x9e3779b97f4a7c15+1, uint64(j)*0xbf58476d1ce4e5b9+7
		b.Add(&pk, emit)
		j++
	}
	for j < 4*perInterval+perInterval/5 { // four intervals and the fifth's start
		add()
	}
	// The middle of the fifth interval: AllocsPerRun runs f once more
	// before it counts, so 2n packets, past the log chunk at 65,536.
	n := perInterval / 4
	if a := testing.AllocsPerRun(1, func() {
		for range n {
			add()
		}
	}); a != 0 {
		t.Fatalf("%v allocations in %d packets, want 0", a, n)
	}
}

// TestRecPoolKeepsPeak: once the logs have held more chunks at once than
// recsKept, the pool keeps them all, so that the same load again takes
// every chunk from it (a fresh chunk costs page faults and zeroing on the
// packet path).
func TestRecPoolKeepsPeak(t *testing.T) {
	var p recPool
	got := make([][]PacketRec, recsKept+40)
	cycle := func() {
		for i := range got {
			got[i] = p.get()
		}
		for _, c := range got {
			p.put(c)
		}
	}
	cycle()
	if a := testing.AllocsPerRun(3, cycle); a != 0 {
		t.Errorf("%d chunks out again allocated %v times, want 0", len(got), a)
	}
	if n := p.out.Load(); n != 0 {
		t.Errorf("%d chunks counted out after all came back", n)
	}
}
