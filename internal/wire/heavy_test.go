package wire

import (
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
)

// TestEndFitsWithMostHeavyKeys: the End frame carries the heavy keys
// unchunked, so the largest sketch.heavy the configuration accepts must
// fit in the receiver's default max_frame_bytes even with IPv6 keys.
func TestEndFitsWithMostHeavyKeys(t *testing.T) {
	c := config.DefaultReceiver()
	c.Sketch.Heavy = 10000
	c.Sketch.Seed = "3f1c0a9be47d25c8a1f6d0e2b9c47a15"
	c.Capture.Source.Interface = "eth1"
	c.Receiver.TLS.Plaintext = true
	if err := c.Validate(); err != nil {
		t.Fatalf("sketch.heavy 10000 should be accepted: %v", err)
	}
	c.Sketch.Heavy = 10001
	if err := c.Validate(); err == nil {
		t.Fatal("sketch.heavy 10001 should be refused")
	}
	sk, err := interval.NewSketches(interval.Params{Sketch: c.SketchParams(), LDA: c.LDAParams(), Classes: 1})
	if err != nil {
		t.Fatal(err)
	}
	si := &interval.SenderInterval{ID: 1, Sk: sk}
	for i := range 10000 {
		a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i), 14: byte(i >> 8), 13: 0xff})
		k, err := capture.FlowKeyFromAddrs(a, a, 17, 65535, 65535)
		if err != nil {
			t.Fatal(err)
		}
		si.Heavy = append(si.Heavy, k)
	}
	if err := si.Finish(); err != nil {
		t.Fatal(err)
	}
	frames, err := Encode(si, interval.SenderMeta{ParseDrops: map[string]uint64{"malformed": 1 << 60}}, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	end := frames[len(frames)-1]
	end.Seq = 1 << 62
	if n := proto.Size(end); n >= c.Receiver.MaxFrameBytes {
		t.Fatalf("End frame with 10000 IPv6 heavy keys is %d bytes, over max_frame_bytes %d", n, c.Receiver.MaxFrameBytes)
	} else {
		t.Logf("End frame with 10000 IPv6 heavy keys: %d bytes (limit %d)", n, c.Receiver.MaxFrameBytes)
	}
}
