//go:build pcap && linux

package capture

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLivePcap(t *testing.T) {
	v := newVeth(t)
	src := DefaultConfig().Source
	src.Kind, src.Interface, src.Promiscuous = "pcap", v.ifB, true
	src.TimestampSource = "host"
	src.BPF = "ip or ip6 or vlan"
	liveRoundTrip(t, v, src)
}

// A timestamp source the interface lacks is refused with a clear error.
func TestPcapTimestampSourceRefused(t *testing.T) {
	v := newVeth(t)
	src := DefaultConfig().Source
	src.Kind, src.Interface, src.TimestampSource = "pcap", v.ifB, "adapter_unsynced"
	err := inNetns(v.nsB, func() error {
		s, err := OpenPcap(src, nil)
		if err == nil {
			s.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "does not offer") || !strings.Contains(err.Error(), "capture.source.timestamp_source") {
		t.Errorf("veth has no adapter clock; got %v", err)
	}
	src.TimestampSource = "no-such-clock"
	if _, err := OpenPcap(src, nil); err == nil || !strings.Contains(err.Error(), "not a libpcap timestamp type") {
		t.Errorf("bad name: %v", err)
	}
}

// TestLivePcapSnapRing: libpcap cuts frames to its snap length only after
// reading them from its ring, unless a socket filter returns the snap
// length; the pcap source always attaches one, so the kernel stores 104
// bytes of a full-size frame. 3000 frames of 1514 bytes into a 2 MiB
// buffer nobody reads, with a block timeout (the poll timeout) far longer
// than the sending: kept at the default snap length they fit (192 ring
// bytes each) and none is dropped; kept whole (1600 bytes each) they do
// not fit.
func TestLivePcapSnapRing(t *testing.T) {
	for _, tc := range []struct {
		snaplen int
		drops   bool
	}{{0, false}, {65535, true}} {
		t.Run(strconv.Itoa(tc.snaplen), func(t *testing.T) {
			v := newVeth(t)
			src := DefaultConfig().Source
			src.Kind, src.Interface, src.Snaplen = "pcap", v.ifB, tc.snaplen
			src.BufferSize, src.PollTimeout = 2<<20, 20*time.Second
			var s Source
			if err := inNetns(v.nsB, func() (err error) { s, err = OpenPcap(src, nil); return err }); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			frame := fullFrame(t, randomPackets(1, 3)[0], 1514)
			frames := make([][]byte, 3000)
			for i := range frames {
				frames[i] = frame
			}
			sendFrames(t, v.nsA, v.ifA, frames)
			var d DropStats
			for d.Received < uint64(len(frames)) { // the kernel has run every frame through the socket
				var err error
				if d, err = s.Stats(); err != nil {
					t.Fatal(err)
				}
				runtime.Gosched()
			}
			t.Logf("snaplen %d (%d kept): %d frames of %d bytes into a 2 MiB libpcap buffer: %d dropped",
				tc.snaplen, src.SnapLen(DefaultConfig().Identity), d.Received, len(frame), d.Kernel)
			if (d.Kernel > 0) != tc.drops {
				t.Errorf("snaplen %d: %d of %d frames dropped, want drops %v", tc.snaplen, d.Kernel, d.Received, tc.drops)
			}
		})
	}
}
