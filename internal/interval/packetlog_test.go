package interval

import (
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
