//go:build pcap && linux

package capture

import (
	"errors"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// TestLiveAFPacketBPF: a BPF program compiled by libpcap and attached to
// the afpacket socket lets through exactly the IPv6 frames that were sent.
func TestLiveAFPacketBPF(t *testing.T) {
	v := newVeth(t)
	cfg := DefaultConfig()
	cfg.Identity.Seed = tseed
	cfg.Source.Kind, cfg.Source.Interface, cfg.Source.BPF = "afpacket", v.ifB, "ip6"
	cfg.Source.BlockSize, cfg.Source.NumBlocks = 1<<18, 4
	var readers []*Reader
	if err := inNetns(v.nsB, func() error {
		var err error
		readers, err = cfg.Open(nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer CloseReaders(readers)
	spec := testParser(t, nil)
	want := map[uint64]bool{}
	var frames [][]byte
	for _, b := range randomPackets(200, 11) {
		b.padTo = 60
		frames = append(frames, b.frame(t))
		if b.v6 {
			id, r := spec.Identify(b.ipPacket(t), 0, layers.LinkTypeRaw)
			if r != ReasonOK {
				t.Fatal(r)
			}
			want[id.PktHash] = true
		}
	}
	if len(want) == 0 || len(want) == len(frames) {
		t.Fatalf("%d of %d frames are IPv6: the filter would not be tested", len(want), len(frames))
	}
	sendFrames(t, v.nsA, v.ifA, frames)
	got := map[uint64]int{}
	for {
		var p Packet
		err := readers[0].Next(&p)
		if errors.Is(err, ErrTimeout) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[p.PktHash]++
	}
	for h := range want {
		if got[h] != 1 {
			t.Errorf("IPv6 packet %x captured %d times, want once", h, got[h])
		}
	}
	for h, n := range got {
		if !want[h] {
			t.Errorf("packet %x (%d times) passed the ip6 filter but was not an IPv6 frame sent", h, n)
		}
	}
	t.Logf("%d frames sent, %d IPv6, %d captured", len(frames), len(want), len(got))
}
