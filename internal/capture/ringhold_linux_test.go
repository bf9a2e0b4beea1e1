//go:build linux

package capture

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"
)

// fullFrame returns p grown to a frame of n bytes by its payload (not by
// Ethernet padding), so its IP length fields say the frame's length.
func fullFrame(t *testing.T, p pk, n int) []byte {
	t.Helper()
	p.padTo = 0
	grow := n - len(p.frame(t))
	if grow < 0 {
		t.Fatalf("frame already %d bytes, want %d", n-grow, n)
	}
	p.payload = append(p.payload, make([]byte, grow)...)
	for i := len(p.payload) - grow; i < len(p.payload); i++ {
		p.payload[i] = byte(i * 7)
	}
	f := p.frame(t)
	if len(f) != n {
		t.Fatalf("frame of %d bytes, want %d", len(f), n)
	}
	return f
}

// holdRun opens src at v's B end, sends frame from A at perTick frames
// every tick (never catching up in a burst: ticks missed under load are
// skipped) for longer than the ring can hold, and reads the ring only
// afterwards. It returns the frames sent, read and dropped and the span
// of the read frames' kernel timestamps: the earliest frames are the ones
// held, so the span is how long the ring held traffic.
func holdRun(t *testing.T, v *vethPair, src SourceConfig, frame []byte, perTick int, tick, dur time.Duration) (sent, read int, d DropStats, held time.Duration) {
	t.Helper()
	var s Source
	if err := inNetns(v.nsB, func() (err error) { s, err = OpenAFPacket(src, 0, nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err := inNetns(v.nsA, func() error {
		ifc, err := net.InterfaceByName(v.ifA)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
		start := time.Now()
		for i := 0; time.Duration(i)*tick < dur; {
			time.Sleep(time.Until(start.Add(time.Duration(i) * tick))) // the traffic's pace, not a synchronisation
			for range perTick {
				if err := unix.Sendto(fd, frame, 0, sa); err != nil {
					return err
				}
				sent++
			}
			i = max(i+1, int(time.Since(start)/tick)) // skip the ticks missed: no catch-up burst
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var first, last int64
	for {
		_, ts, _, err := s.ReadPacket(nil)
		if errors.Is(err, ErrTimeout) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if read == 0 {
			first = ts
		}
		last = max(last, ts)
		read++
	}
	if d, err = s.Stats(); err != nil {
		t.Fatal(err)
	}
	if uint64(read)+d.Kernel != uint64(sent) {
		t.Errorf("read %d + kernel drops %d, want the %d frames sent", read, d.Kernel, sent)
	}
	return sent, read, d, time.Duration(last - first)
}

// TestLiveAFPacketRingHold measures how long the default ring holds
// traffic while nobody reads it (a daemon stopped or starved of CPU), at
// a low packet rate and at full-size frames, each for a second longer
// than RingHold says it holds at low rates; everything is read
// afterwards. The kernel hands a block over when it is full, and its
// timer hands over the open one every block_timeout (later under load,
// never sooner), so the ring takes at most ceil(x) blocks a block_timeout
// for x blocks of traffic in one, and the test asserts >= 2 s where the
// default ring overflowed. The sender never bursts (perTick frames a tick
// at most): with the default snap length 1365 frames of 192 ring bytes
// fit a 256 KiB block and 1500 arrive in a block_timeout at 30 frames a
// millisecond, a full block and a nearly empty one, so the ring holds
// ~6.4 s (RingHold), and slower if the machine cannot keep the pace.
// Whole frames (snaplen 65535, what the ring kept before it had a snap
// length) are measured beside them: 163 fit a block, so the ring's bytes
// bound it and it holds at most 256 × 163 frames.
func TestLiveAFPacketRingHold(t *testing.T) {
	def := DefaultConfig().Source
	def.Kind, def.PollTimeout = "afpacket", 50*time.Millisecond
	whole := def
	whole.Snaplen = 65535
	small := randomPackets(1, 3)[0]
	small.padTo = 60
	for _, tc := range []struct {
		name    string
		src     SourceConfig
		full    bool // 1514-byte frames, else one of 265 bytes
		perTick int
		tick    time.Duration
	}{
		{"low rate", def, false, 1, 2 * time.Millisecond},
		{"full frames", def, true, 30, time.Millisecond},
		{"full frames whole", whole, true, 30, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVeth(t)
			tc.src.Interface = v.ifB
			frame := small.frame(t)
			if tc.full {
				frame = fullFrame(t, randomPackets(1, 3)[0], 1514)
			}
			snap := tc.src.SnapLen(DefaultConfig().Identity)
			slot := RingFrameBytes(len(frame), snap)
			pps := float64(tc.perTick) / tc.tick.Seconds()
			want := RingHold(tc.src.BlockSize, tc.src.NumBlocks, tc.src.BlockTimeout, pps*float64(slot))
			sent, read, d, held := holdRun(t, v, tc.src, frame, tc.perTick, tc.tick, RingHold(tc.src.BlockSize, tc.src.NumBlocks, tc.src.BlockTimeout, 0)+time.Second)
			t.Logf("%d frames of %d bytes at up to %.0f a second (snaplen %d: %d ring bytes each) into a ring of %d × %d B (block_timeout %v, RingHold %v) nobody read: %d held over %v (%.0f a second), %d dropped",
				sent, len(frame), pps, snap, slot, tc.src.NumBlocks, tc.src.BlockSize, tc.src.BlockTimeout, want.Round(time.Millisecond), read, held.Round(time.Millisecond), float64(read)/held.Seconds(), d.Kernel)
			bs, nb := RingGeometry(tc.src.BlockSize, tc.src.NumBlocks)
			if room := nb * ((bs - ringBlockHeader) / slot); read > room {
				t.Errorf("%d frames held, more than the ring's %d slots of %d bytes", read, room, slot)
			}
			if snap == tc.src.SnapLen(DefaultConfig().Identity) && tc.src.Snaplen == 0 && d.Kernel > 0 && held < 2*time.Second {
				t.Errorf("the default ring overflowed after holding %v of traffic at %.0f frames a second of %d bytes, want >= 2s", held, pps, len(frame))
			}
		})
	}
}

// TestLiveAFPacketRingSlots: with the default snap length the kernel
// stores 104 bytes of a full-size frame and reports its whole length; the
// parse of the cut frame gives the identity of the whole one; and the
// ring slots are RingFrameBytes long (the layout RingHold assumes).
func TestLiveAFPacketRingSlots(t *testing.T) {
	v := newVeth(t)
	src := DefaultConfig().Source
	src.Kind, src.Interface, src.PollTimeout = "afpacket", v.ifB, 50*time.Millisecond
	var s Source
	if err := inNetns(v.nsB, func() (err error) { s, err = OpenAFPacket(src, 0, nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	spec := testParser(t, nil)
	var frames [][]byte
	want := map[uint64]int{} // packet hash -> wire length
	for i, p := range randomPackets(60, 9) {
		n := []int{60, 98, 104, 105, 600, 1514}[i%6]
		var f []byte
		if p.fragOff != 0 || len(p.frame(t)) > n {
			p.padTo = n
			f = p.frame(t)
		} else {
			f = fullFrame(t, p, n)
		}
		id, r := spec.Identify(f, 0, layers.LinkTypeEthernet)
		if r != ReasonOK {
			t.Fatal(r)
		}
		want[id.PktHash] = len(f)
		frames = append(frames, f)
	}
	sendFrames(t, v.nsA, v.ifA, frames)
	as := s.(*afSource)
	snap := as.Snaplen()
	p := testParser(t, nil)
	prev, slots := uintptr(0), map[int]int{}
	for range frames {
		data, ts, wl, err := s.ReadPacket(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != min(wl, snap) {
			t.Errorf("frame of %d bytes: %d kept, want %d", wl, len(data), min(wl, snap))
		}
		var pkt Packet
		if !p.Parse(data, wl, ts, layers.LinkTypeEthernet, &pkt) {
			t.Fatalf("frame of %d bytes cut to %d: not parsed (%+v)", wl, len(data), p.Counters())
		}
		if w, ok := want[pkt.PktHash]; !ok || w != wl || int(pkt.WireLen) != wl {
			t.Errorf("frame of %d bytes cut to %d: identity %x, wire length %d, not a frame sent whole", wl, len(data), pkt.PktHash, pkt.WireLen)
		}
		at := uintptr(unsafe.Pointer(unsafe.SliceData(data))) - uintptr(unsafe.Pointer(unsafe.SliceData(as.ring)))
		if prev != 0 && int(prev)/as.bs == int(at)/as.bs { // same block: the previous frame's slot
			slots[int(at-prev)]++
		}
		prev = at
		if off := int(at) % as.bs; off < ringBlockHeader+ringMacOffset {
			t.Errorf("frame data at block offset %d, before the block header and first slot's header", off)
		}
	}
	// Each frame's slot is the gap to the next one in the block.
	wantSlots := map[int]bool{}
	for _, f := range frames {
		wantSlots[RingFrameBytes(len(f), snap)] = true
	}
	for n := range slots {
		if !wantSlots[n] {
			t.Errorf("a ring slot of %d bytes; RingFrameBytes gives %v for these frames", n, wantSlots)
		}
	}
	t.Logf("snaplen %d: slots seen %v (RingFrameBytes: %v)", snap, slots, wantSlots)
}

// TestLiveSnapRing: the kernel stores only the snap length of a frame in
// the ring, with or without a user filter (-tags pcap), for kind afpacket
// and for libpcap, which without a socket filter would store whole frames
// and cut them only after reading them. 3000 frames of 1514 bytes into a
// 2 MiB ring nobody reads, with a block timeout far longer than the
// sending, so only full blocks are handed over: at the default snap
// length they fit (192 ring bytes each) and none is dropped; kept whole
// (1600 bytes each) they do not fit.
func TestLiveSnapRing(t *testing.T) {
	kinds, bpfs := []string{"afpacket"}, []string{""}
	if pcapBuilt {
		kinds, bpfs = append(kinds, "pcap"), append(bpfs, "ip or ip6")
	}
	for _, kind := range kinds {
		for _, expr := range bpfs {
			for _, tc := range []struct {
				snaplen int
				drops   bool
			}{{0, false}, {65535, true}} {
				t.Run(fmt.Sprintf("%s/bpf=%q/snaplen=%d", kind, expr, tc.snaplen), func(t *testing.T) {
					v := newVeth(t)
					src := DefaultConfig().Source
					src.Kind, src.Interface, src.Snaplen, src.BPF = kind, v.ifB, tc.snaplen, expr
					src.BufferSize, src.PollTimeout = 2<<20, 20*time.Second // libpcap: its buffer, and its block timeout
					src.BlockSize, src.NumBlocks, src.BlockTimeout = 256<<10, 8, 20*time.Second
					var ss []Source
					if err := inNetns(v.nsB, func() (err error) { ss, err = OpenSources(src, nil); return err }); err != nil {
						t.Fatal(err)
					}
					defer ss[0].Close()
					frame := fullFrame(t, randomPackets(1, 3)[0], 1514)
					frames := make([][]byte, 3000)
					for i := range frames {
						frames[i] = frame
					}
					sendFrames(t, v.nsA, v.ifA, frames)
					var d DropStats
					for d.Received < uint64(len(frames)) { // the kernel has run every frame through the socket
						var err error
						if d, err = ss[0].Stats(); err != nil {
							t.Fatal(err)
						}
						runtime.Gosched()
					}
					t.Logf("%s, bpf %q, snaplen %d (%d kept): %d frames of %d bytes into a 2 MiB ring: %d dropped",
						kind, expr, tc.snaplen, src.SnapLen(DefaultConfig().Identity), d.Received, len(frame), d.Kernel)
					if (d.Kernel > 0) != tc.drops {
						t.Errorf("%d of %d frames dropped, want drops %v", d.Kernel, d.Received, tc.drops)
					}
				})
			}
		}
	}
}
