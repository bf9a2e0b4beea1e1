//go:build linux

package capture

import (
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLiveAFPacketRingHold measures how long the default ring holds
// traffic at a low packet rate while nobody reads it (a daemon stopped or
// starved of CPU): 500 frames a second for longer than RingHold says it
// holds, then everything is read. The frames read are the earliest ones,
// so the span of their kernel timestamps is how long the ring held. The
// kernel hands a block over at most once a block_timeout (later under
// load, never sooner), so the span is at least (num_blocks − 1) ×
// block_timeout whatever the machine's load; the test asserts >= 2 s
// where the ring overflowed.
func TestLiveAFPacketRingHold(t *testing.T) {
	v := newVeth(t)
	src := DefaultConfig().Source
	src.Kind, src.Interface = "afpacket", v.ifB
	src.PollTimeout = 50 * time.Millisecond
	var s Source
	err := inNetns(v.nsB, func() error {
		var err error
		s, err = OpenAFPacket(src, 0, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := RingHold(src.BlockSize, src.NumBlocks, src.BlockTimeout, 0)
	const every = 2 * time.Millisecond
	n := int((want + time.Second) / every) // a second more than it holds
	f := randomPackets(1, 3)[0]
	f.padTo = 60
	frame := f.frame(t)
	err = inNetns(v.nsA, func() error {
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
		for i := range n {
			time.Sleep(time.Until(start.Add(time.Duration(i) * every))) // the traffic's pace, not a synchronisation
			if err := unix.Sendto(fd, frame, 0, sa); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var first, last int64
	read := 0
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
	d, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	held := time.Duration(last - first)
	t.Logf("%d frames at one per %v into a ring of %d × %d B (block_timeout %v, RingHold %v) nobody read: %d held over %v, %d dropped",
		n, every, src.NumBlocks, src.BlockSize, src.BlockTimeout, want, read, held.Round(time.Millisecond), d.Kernel)
	if uint64(read)+d.Kernel != uint64(n) {
		t.Errorf("read %d + kernel drops %d, want the %d frames sent", read, d.Kernel, n)
	}
	if d.Kernel > 0 && held < 2*time.Second {
		t.Errorf("the default ring overflowed after holding %v of traffic at %v a frame, want >= 2s", held, every)
	}
}
