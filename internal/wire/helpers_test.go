package wire

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/sketch"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// testParams are small sketches (a few KiB per interval) so that tests
// exercise chunking without moving megabytes.
func testParams() interval.Params {
	return interval.Params{T: int64(time.Second), MaxDelay: int64(50 * time.Millisecond), Guard: int64(time.Millisecond),
		Sketch:  sketch.Params{Rows: 3, Columns: 64, VLDA: 1, Sampling: []float64{1, 1, 1}},
		LDA:     sketch.LDAParams{Banks: 4, Cells: 16},
		Classes: 2, Heavy: 5, FlowCap: 1000}
}

func testLimits(p interval.Params) Limits {
	return Limits{MaxSketchBytes: 1 << 20, MaxCells: p.Sketch.Rows*p.Sketch.Columns + 1<<16, MaxClasses: p.Classes}
}

// makeInterval fills an interval with n random packets of 8 flows, the
// boundary key lists (before and after its end) and heavy keys, all drawn
// from seed.
func makeInterval(t testing.TB, p interval.Params, id int64, n int, seed uint64) *interval.SenderInterval {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, uint64(id)))
	sk, err := interval.NewSketches(p)
	if err != nil {
		t.Fatal(err)
	}
	var keys []capture.FlowKey
	for f := range 8 {
		src, dst := netip.AddrFrom4([4]byte{10, 1, 0, byte(f)}), netip.AddrFrom4([4]byte{192, 0, 2, 7})
		if f%2 == 1 {
			src, dst = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(f)}), netip.MustParseAddr("2001:db8::7")
		}
		k, err := capture.FlowKeyFromAddrs(src, dst, 6, uint16(40000+f), 443)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	var keysB []interval.BoundaryKey
	for i := range n {
		f := r.IntN(len(keys))
		pk := capture.Packet{Key: keys[f], FlowHash: uint64(f)*0x9e3779b97f4a7c15 + 1, PktHash: r.Uint64(),
			WireLen: uint32(60 + r.IntN(1400)), Weight: 1, Class: uint16(f % p.Classes)}
		ts := r.Int64N(p.T)
		sk.Add(&pk, ts)
		if ts >= p.T-p.MaxDelay-p.Guard {
			keysB = append(keysB, interval.BoundaryKey{Hash: pk.PktHash, Off: 1})
		}
		// Stand-ins for the packets sent just after the boundary, and
		// (a window wider than the interval) two intervals before it.
		if ts < p.MaxDelay+p.Guard {
			keysB = append(keysB, interval.BoundaryKey{Hash: r.Uint64(), Off: 0})
			if i%3 == 0 {
				keysB = append(keysB, interval.BoundaryKey{Hash: r.Uint64(), Off: 2})
			}
		}
	}
	si := &interval.SenderInterval{ID: id, Sk: sk, Keys: keysB, Heavy: keys[:p.Heavy], Late: uint64(r.IntN(5))}
	// Finished as the sender's ship stage does, before encoding.
	if err := si.Finish(); err != nil {
		t.Fatal(err)
	}
	return si
}

func testMeta() interval.SenderMeta {
	return interval.SenderMeta{
		Clock:       interval.ClockStatus{State: "synced", OffsetNS: -1234, GrandmasterPresent: true, GrandmasterID: "gm-1", PortState: "SLAVE"},
		KernelDrops: 3, IfDrops: 4, DropsAffecting: 19, ParseDrops: map[string]uint64{"malformed": 2},
	}
}

// encodeAll encodes intervals back to back and numbers the frames 1, 2, ...
// as a stream does after Hello (seq 0).
func encodeAll(t testing.TB, chunk int, ivs ...*interval.SenderInterval) []*ldsv1.SenderFrame {
	t.Helper()
	var out []*ldsv1.SenderFrame
	for _, si := range ivs {
		fr, err := Encode(si, testMeta(), chunk)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fr...)
	}
	for i, f := range out {
		f.Seq = uint64(i + 1)
	}
	return out
}

// sameSplit: the decoded interval and the sent one carry the same boundary function (the same
// encoding: same keys count, seed and table).
func sameSplit(a *Interval, b *interval.SenderInterval) bool {
	if a.Boundary == nil || b.Split == nil {
		return false
	}
	x, _ := a.Boundary.MarshalBinary()
	y, _ := b.Split.MarshalBinary()
	return bytes.Equal(x, y)
}
